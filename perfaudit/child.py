"""The audited process: `python -m perfaudit.child SCRIPT [ARGS...]` (config in PERFAUDIT_CONFIG).

Composed here, at the top of the house, so that collection never reaches up: the session (or, for
`verify`, the timing session) wraps the script; after its window, a rank of a torchrun job analyses
its own trace, and under `torchrun -m perfaudit.launch` rank 0 reports on the whole job. The script
runs as `python SCRIPT ARGS` would run it (`__main__`, its own sys.argv, its folder first on sys.path).
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

from .collect.internal import record_internal_error
from .collect.userframes import first_line, raised, traceback_text, user_frame_of
from .collect.window.session import Interrupted, Session, Spawned, WindowDone
from .outcome import Outcome

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _raised_by_perfaudit(tb) -> bool:
    """Whether an exception was raised in perfaudit's own code (a probe or hook that escaped its
    guard), not in the script or the libraries it calls."""
    frames = list(traceback.walk_tb(tb))
    if not frames:
        return False
    path = frames[-1][0].f_code.co_filename
    return path.startswith(_OWN_DIR) and not path.endswith(os.path.join("perfaudit", "child.py"))


def _watch_parent(parent: int) -> None:
    """If perfaudit itself dies (SIGKILL), stop as on SIGTERM: write what was recorded, then exit,
    rather than train on with no parent and no timeout."""
    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="perfaudit-parent-watch", daemon=True).start()


def _run_main(script_path: str, patched: str | None) -> None:
    """`python SCRIPT`: the script as `__main__`; `verify` gives the fixed source to run in its place,
    under the script's own name (its __file__, its tracebacks, its relative paths unchanged)."""
    import runpy
    if patched is None:
        runpy.run_path(script_path, run_name="__main__")
        return
    import types
    with open(patched, encoding="utf-8") as f:
        code = compile(f.read(), script_path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__file__ = script_path
    module.__dict__["__builtins__"] = __builtins__
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous


def _raised_as_on_a_gpu(exc: BaseException) -> bool:
    """An error the emulated device raised because a GPU raises it there (a DataLoader's pinning thread
    passes it on with its message): the script's."""
    shim = sys.modules.get("perfaudit.collect.emulation.cuda_shim")
    return shim is not None and any(message in str(exc) for message in shim.AS_ON_A_GPU)


def _describe_exception(exc: BaseException) -> dict:
    if _raised_as_on_a_gpu(exc):
        return {**raised(exc), "as_on_a_gpu": True}
    if getattr(exc, "perfaudit_op_error", False):  # a torch op the emulated device ran refused the script's call
        return {**raised(exc), "op_error": True}
    if _raised_by_perfaudit(exc.__traceback__):
        record_internal_error("the audited process", exc)
        return {"outcome": Outcome.INTERNAL_ERROR, "exception": type(exc).__name__,
                "message": first_line(exc), "site": user_frame_of(exc.__traceback__),  # the script's call into it
                "traceback": traceback_text(exc)}
    return raised(exc)


def _exit_result(exc: SystemExit) -> dict:
    """sys.exit(code) or sys.exit("message"): a message is printed to stderr by Python (exit code 1)
    and kept for the report."""
    if isinstance(exc.code, int) or exc.code is None:
        return {"outcome": Outcome.EXITED, "exit_code": exc.code or 0}
    message = str(exc.code)
    print(message, file=sys.stderr)
    return {"outcome": Outcome.EXITED, "exit_code": 1, "message": message.splitlines()[0][:500] if message else ""}


def _session(config: dict, script: str) -> Session:
    if config.get("mode") == "timing":
        from .collect.run.timing import TimingSession, seed_everything, serve_patched_sources
        session = TimingSession(config, script)
        serve_patched_sources(config.get("patched") or {})
        seed_everything(config.get("seed"))
        return session
    return Session(config, script)


def _after_window(session: Session, config: dict) -> None:
    """Under torchrun: this rank analyses its own trace, here, while the others do theirs; under
    `torchrun -m perfaudit.launch`, rank 0 then reports on the whole job."""
    if config.get("mode") == "timing":
        return
    if session.rank is not None and session.trace_path:
        try:
            from .usecases.jobs import analyse_rank
            analyse_rank(session.trace_path, config)
        except Exception as exc:  # the parent parses the trace itself and says why
            session._say("analysis_failed", error=str(exc)[:300])
    job = config.get("job_report")
    if job and session.rank == 0:
        from .usecases.jobs import job_report
        job_report(config["run_dir"], job["world_size"])


def _setup_failed(config: dict, exc: Exception) -> None:
    from .collect.window.export import write_json
    from .collect.window.session import launched_rank
    record_internal_error("set-up of the audited process", exc)
    rank = launched_rank()
    path = os.path.join(config["run_dir"], "result.json" if rank is None else f"rank{rank}.result.json")
    write_json(path, {"outcome": Outcome.INTERNAL_ERROR, "exception": type(exc).__name__,
                      "message": first_line(exc),
                      "traceback": traceback_text(exc),
                      "steps_recorded": 0, "profiling_started": False,
                      "internal_errors": [{"part": "set-up of the audited process",
                                           "error": f"{type(exc).__name__}: {exc}"[:300]}]})
    print(f"perfaudit: internal error while setting up the audited process: {type(exc).__name__}: {exc}",
          file=sys.stderr)


def main() -> None:
    faulthandler.enable()  # a crash (the script's, torch's or ours) leaves its Python stack in script.log
    script, *args = sys.argv[1:]
    config = json.loads(os.environ.pop("PERFAUDIT_CONFIG"))  # not a file: nothing in the script's way
    script_path = config.get("run_as") or os.path.abspath(script)
    sys.argv = [script, *args]
    # the script's folder first on sys.path, as `python SCRIPT` does (its ASCII alias, if it has one)
    aliases = config.get("path_aliases") or {}
    sys.path[0] = config.get("import_dir") or next((a for a in aliases if os.path.isdir(a)),
                                                   os.path.dirname(script_path))
    try:
        session = _session(config, script)
        if config.get("batch_scale"):  # a batch plan's run: the script's batches made larger (below the probes)
            from .collect import batch_scale
            batch_scale.install(float(config["batch_scale"]))
        if config.get("checkpoint_classes"):  # a checkpointing plan's run: these blocks recompute in backward
            from .collect import checkpointing
            checkpointing.install(list(config["checkpoint_classes"]), config.get("checkpoint_first"))
        session.install()
    except Exception as exc:  # perfaudit's own set-up failed: say so; the script is not blamed
        _setup_failed(config, exc)
        os._exit(0)
    _watch_parent(os.getppid())
    session._say("running")
    try:
        patched = config.get("patched") or {}
        _run_main(script_path, patched.get(os.path.abspath(script_path)) or patched.get(os.path.realpath(script_path)))
        result: dict[str, Any] = {"outcome": Outcome.COMPLETED}
    except WindowDone:
        result = {"outcome": Outcome.WINDOW_COMPLETE}
    except Interrupted as exc:
        result = {"outcome": Outcome.INTERRUPTED, "signal": str(exc)}
    except Spawned as exc:
        result = {"outcome": Outcome.SPAWNED, "api": str(exc)}
    except KeyboardInterrupt:
        result = {"outcome": Outcome.INTERRUPTED, "signal": "SIGINT"}
    except SystemExit as exc:
        result = _exit_result(exc)
    except BaseException as exc:  # the user's script failed: keep what was recorded
        result = _describe_exception(exc)
    result["at"] = time.time()  # when it ended: under torchrun, the rank that failed first is the cause
    session.finish(result)
    _after_window(session, config)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown of a half-finished training script; the runner cleans up


if __name__ == "__main__":
    # run from the imported module, not this `__main__` copy: the session's exceptions must be the
    # very classes main() catches
    from perfaudit.child import main as _main
    _main()
