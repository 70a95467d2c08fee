"""Training in processes the script starts itself: the Hogwild pattern (`mp.Process(target=train)` for each
rank, then `join()`). perfaudit watches the process it runs, not those, and the report said the script never
started training. When the script waits for such a process before it trained itself, its training is there:
the processes are stopped and the run ends at once, saying where they were started (torch.multiprocessing.spawn
is recognised the same way, in probes/live.py). A process whose function does not train (a preprocessing step the
script waits for before training itself) is left alone."""
from __future__ import annotations

import functools
import multiprocessing.process
import os
import types

from ..userframes import is_user_file, user_site
from ..wrap import patch


def guard_user_processes(on_joined) -> None:
    """`on_joined(api, stop)` is called when the script joins a process whose target is its own function:
    `api` says which and where, `stop()` terminates every such process started so far."""
    cls = multiprocessing.process.BaseProcess
    started: dict = {}  # process -> what it runs and where it was started
    pid = os.getpid()
    original_start, original_join = cls.start, cls.join

    @functools.wraps(original_start)
    def start(self):
        target = getattr(self, "_target", None)
        code = getattr(target, "__code__", None)
        if os.getpid() == pid and code is not None and is_user_file(code.co_filename) and trains(target):
            site = user_site(2)
            where = f" at {os.path.basename(site['path'])}:{site['line']}" if site else ""
            started[self] = f"Process(target={code.co_name}){where}"
        return original_start(self)

    def stop() -> None:
        for process in started:
            if process.is_alive():
                process.terminate()
        for process in started:
            original_join(process, 5)

    @functools.wraps(original_join)
    def join(self, timeout=None):
        api = started.get(self)
        if api is not None and os.getpid() == pid:
            on_joined(api, stop)
        return original_join(self, timeout)

    patch(cls, "start", start)
    patch(cls, "join", join)


# what a function that trains calls: loss.backward(), trainer.fit() (not step(): an environment's, a scheduler's)
_TRAINING_CALLS = frozenset({"backward", "fit"})


def trains(function, depth: int = 3) -> bool:
    """Whether `function`, or a function of the user's it calls by name (to `depth` levels), calls backward()
    or fit(): the names its code uses, looked up in its module."""
    seen: set = set()
    todo = [(function, 0)]
    while todo:
        fn, level = todo.pop()
        code = fn if isinstance(fn, types.CodeType) else getattr(fn, "__code__", None)
        if code is None or code in seen or not is_user_file(code.co_filename):
            continue
        seen.add(code)
        names = set(code.co_names)
        if names & _TRAINING_CALLS:
            return True
        if level < depth:
            scope = getattr(fn, "__globals__", {})
            todo.extend((scope[name], level + 1) for name in names if callable(scope.get(name)))
            todo.extend((const, level) for const in code.co_consts if isinstance(const, types.CodeType))
    return False
