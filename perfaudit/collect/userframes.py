"""Which frames are the user's: not perfaudit, torch, the standard library or an installed package.
Every probe locates what it saw at the innermost user frame."""
from __future__ import annotations

import functools
import os
import sys
import traceback
from types import FrameType

from ..outcome import Outcome

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = None
_LIB_MARKERS = ("site-packages", "dist-packages", os.sep + "lib" + os.sep + "python3")


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch
        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
    return _TORCH_DIR


@functools.lru_cache(maxsize=8192)  # asked for every frame of every stack walked: a few hundred distinct files
def is_user_file(path: str | None) -> bool:
    """A file of the user's code: not perfaudit, torch, the standard library or an installed package."""
    if not path:
        return False
    return not (path.startswith("<") or path.startswith(_OWN_DIR) or path.startswith(_torch_dir())
                or any(m in path for m in _LIB_MARKERS))


def is_own_file(path: str) -> bool:
    """A file of perfaudit's own package (a probe calling torch itself, not the script)."""
    return path.startswith(_OWN_DIR)


def user_site(depth: int = 2) -> dict | None:
    """The innermost frame of the user's code on the current stack: {path, line, func}. A frame whose
    line number is unknown (None while the interpreter sets it up) is located at its function's first
    line, so a site never carries `line: null`."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        if is_user_file(code.co_filename):
            line = frame.f_lineno if frame.f_lineno is not None else code.co_firstlineno
            return {"path": code.co_filename, "line": line, "func": code.co_name}
        frame = frame.f_back
    return None


def library_caller(depth: int = 2) -> str | None:
    """The installed package (top-level name) whose code made the call, between torch and the user's code
    (`transformers` for an optimizer its Trainer builds), or None when the user's code called torch itself."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        path = frame.f_code.co_filename
        if is_user_file(path):
            return None
        if not (path.startswith(_OWN_DIR) or path.startswith(_torch_dir()) or path.startswith("<")):
            for marker in ("site-packages", "dist-packages"):
                if marker in path:
                    return path.split(marker, 1)[1].lstrip(os.sep).split(os.sep, 1)[0].removesuffix(".py")
        frame = frame.f_back
    return None


# torch's Python between the user's own read and the C slot (print(t), t[...]): not a library's call
_PASS_THROUGH = tuple(os.path.join("torch", name) for name in ("overrides.py", "_tensor.py", "_tensor_str.py",
                                                                os.path.join("utils", "_python_dispatch.py")))


def library_reader(depth: int = 2) -> dict | None:
    """Where a read of a device value was made when the user's line did not make it itself: `callee`, the
    library function that line called, and `reader`, the innermost one (which read), each as
    "package/path.py:function". None when the user's own code read the value (through torch's Tensor methods
    alone)."""
    frame: FrameType | None = sys._getframe(depth)
    found = []
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        path = frame.f_code.co_filename
        if not path.startswith(_OWN_DIR) and not path.endswith(_PASS_THROUGH):
            found.append(f"{_package_path(path)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return {"callee": found[-1], "reader": found[0]} if frame is not None and found else None


def _package_path(path: str) -> str:
    """A library file by its path inside the installed packages (`torch/nn/utils/clip_grad.py`)."""
    path = path.replace(os.sep, "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    torch_dir = _torch_dir().replace(os.sep, "/")
    return "torch" + path[len(torch_dir):] if path.startswith(torch_dir) else path


def user_frame_of(tb) -> dict | None:
    """The innermost frame of the user's code in a traceback: {path, line, func}."""
    last = None
    for frame, line in traceback.walk_tb(tb):
        if is_user_file(frame.f_code.co_filename):
            last = {"path": frame.f_code.co_filename, "line": line, "func": frame.f_code.co_name}
    return last


def raised(exc: BaseException) -> dict:
    """What happened when the script (or a training in the user's process) raised `exc`, as outcome.py
    records it: the exception, its first line, where in the user's code, the traceback's end."""
    return {"outcome": Outcome.RAISED, "exception": type(exc).__name__,
            "message": first_line(exc),
            "site": user_frame_of(exc.__traceback__),
            "traceback": traceback_text(exc)}


def first_line(exc: BaseException) -> str:
    """The exception's message in one line. A DataLoader worker's error says only "Caught ValueError in DataLoader
    worker process 0." first: the worker's own error, its last line, is added."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.startswith("Caught ") and "DataLoader worker process" in first and len(lines) > 1:
        first = f"{first.rstrip('.')}: {lines[-1].strip()}"
    return first[:500]


def traceback_text(exc: BaseException, limit: int = 4000) -> str:
    """The traceback as Python prints it, in at most `limit` characters: its last frames and the start of
    the message (torch's dispatcher errors list every backend for pages: cut at the end, the frames that
    say where it was raised would be what is lost)."""
    *stack, message = traceback.format_exception(exc)
    message = message if len(message) <= limit // 4 else message[:limit // 4] + " …\n"
    frames = "".join(stack)
    return frames[-(limit - len(message)):] + message
