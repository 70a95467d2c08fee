"""Busy-looping processes beside the tests, as on a laptop or a shared CI runner:

    python tests/busy.py -- python -m pytest -q -m timing     # two busy loops beside the timing tests
    python tests/busy.py -n 3 -- perfaudit run train.py       # three beside one audit

The loops are started before the command and always stopped after it (also on Ctrl-C or an error);
the command's exit code is returned. `busy()` is the same as a context manager for tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager

_LOOP = "import os, signal\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\nwhile True:\n    pass\n"


@contextmanager
def busy(n: int = 2):
    """`n` processes spinning on a CPU each for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", _LOOP], start_new_session=True) for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def main(argv: list[str]) -> int:
    n = 2
    if argv[:1] == ["-n"]:
        n, argv = int(argv[1]), argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with busy(n):
        return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
