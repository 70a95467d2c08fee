"""Attribute host events to the Python frames that were running when they happened.

Kineto's python_function events name a frame as `path(first_line): function`, and builtin calls as
`<built-in method item of Tensor object at 0x…>`. For an op we keep the innermost *user* frame (the
function in the user's code) and the call just below it (`via`: `item`, `__format__`, …), which
tells the source locator what to look for in that function.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sysconfig
from dataclasses import dataclass
from functools import lru_cache

from .model import Event, Frame, Trace
from .nesting import Nesting, by_thread

_FRAME = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<func>.+)$", re.DOTALL)  # a path may hold a newline
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<name>[\w.]+)")
_LIB_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "\\lib\\python3")
_ALWAYS_LIBRARY = {"perfaudit", "torch", "runpy", "typing", "contextlib", "functools", "threading"}


_MODULE = re.compile(r"^nn\.Module: (?P<cls>\w+?)(?:_\d+)?$")
# torch's Python implementations of tensor methods (__format__, __bool__…): a read through them is
# still the user's own read of the tensor
_TENSOR_METHOD_FILES = ("torch/_tensor.py", "torch/_tensor_str.py")


@dataclass(frozen=True, slots=True)
class Attribution:
    frame: Frame          # innermost user frame
    via: str | None       # the call just below it: a builtin method name or a library function
    via_path: str | None  # the library file of `via`, when it is a Python function
    library: bool = False     # library Python code ran between the user's line and the event
    module: str | None = None  # the torch module class the user's line called (`nn.Module: X` events)
    loading: bool = False     # the user's code ran for the DataLoader (a Dataset's __getitem__, a collate_fn)
    reader: Frame | None = None  # the innermost library Python frame below the user's line (what made the event)


@lru_cache(maxsize=4096)
def _is_library_module(top: str) -> bool:
    if top in _ALWAYS_LIBRARY:
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    origin = spec.origin or ""
    if origin in ("built-in", "frozen"):
        return True
    lib_dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    # an installed package, also from another site-packages on the path (a user site, PYTHONPATH)
    return any(origin.startswith(d) for d in lib_dirs) or any(m in origin for m in _LIB_MARKERS)


def is_user_path(path: str, user_roots: tuple[str, ...] = ()) -> bool:
    if path.startswith("<") or any(m in path for m in _LIB_MARKERS):
        return False
    top = path.replace("\\", "/").split("/")[0]
    if top in _ALWAYS_LIBRARY or "/perfaudit/collect/" in path.replace("\\", "/"):
        return False
    if os.path.isabs(path):
        return not user_roots or any(path.startswith(r.rstrip(os.sep) + os.sep) for r in user_roots)
    if any(os.path.exists(os.path.join(r, path)) for r in user_roots):
        return True
    return not _is_library_module(top[:-3] if top.endswith(".py") else top)


@lru_cache(maxsize=65536)
def parse_frame(name: str, user_roots: tuple[str, ...] = ()) -> Frame | None:
    m = _FRAME.match(name)
    if not m:
        return None
    path = m.group("path")
    return Frame(path, int(m.group("line")), m.group("func"), is_user_path(path, user_roots))


def _via(name: str) -> tuple[str | None, str | None]:
    b = _BUILTIN.match(name)
    if b:
        return b.group("name").rsplit(".", 1)[-1], None
    m = _FRAME.match(name)
    if m:
        return m.group("func"), m.group("path")
    return None, None


# Python code between a library and the event that is not the library's own: torch's Tensor method wrappers and
# torch-function dispatch, and perfaudit's emulated device (its mode serves every torch call)
_PASS_THROUGH = _TENSOR_METHOD_FILES + ("torch/overrides.py",)


def _innermost_library(frames: list[Frame | None]) -> Frame | None:
    for frame in reversed(frames):
        if frame is not None and not frame.path.replace("\\", "/").endswith(_PASS_THROUGH) \
                and "perfaudit/collect/" not in frame.path.replace("\\", "/"):
            return frame
    return None


class FrameIndex:
    """Attributes host events to the user frames that were running when they started."""

    def __init__(self, trace: Trace, user_roots: tuple[str, ...] = ()):
        self._trace = trace
        self._roots = user_roots
        self._nesting: Nesting | None = None  # the Python frames' nesting, made on the first attribution
        self._by_frame: dict = {}  # Nesting.open_at -> the attribution of what starts there

    def __bool__(self) -> bool:
        return bool(self._trace.python)

    def _attribution(self, stack: list[Event]) -> Attribution | None:
        for i in range(len(stack) - 1, -1, -1):
            frame = parse_frame(stack[i].name, self._roots)
            if frame is not None and frame.user:
                below = stack[i + 1:]
                via, via_path = _via(below[0].name) if below else (None, None)
                module = next((m.group("cls") for e in below if (m := _MODULE.match(e.name))), None)
                frames = [parse_frame(e.name, self._roots) for e in below]
                library = any(f is not None and not f.path.replace("\\", "/").endswith(_TENSOR_METHOD_FILES)
                              for f in frames)
                loading = any("torch/utils/data/" in e.name.replace("\\", "/") for e in stack[:i])
                return Attribution(frame, via if not module or via else f"module:{module}", via_path, library, module,
                                   loading, _innermost_library(frames))
        return None

    def attribute_all(self, events: list[Event]) -> dict[int, Attribution]:
        """Map id(event) to its attribution, for the events that ran inside user code. Events that start
        inside the same innermost frame share its attribution (worked out once per FrameIndex)."""
        out: dict[int, Attribution] = {}
        if self._nesting is None:
            self._nesting = Nesting(by_thread(self._trace.python))
        nesting, known = self._nesting, self._by_frame
        for q in events:
            where = nesting.open_at(q)
            if q.kind == "python":  # a frame itself: its own stack leaves it out
                attribution = self._attribution(nesting.chain(where, q))
            elif where in known:
                attribution = known[where]
            else:
                attribution = known[where] = self._attribution(nesting.chain(where))
            if attribution is not None:
                out[id(q)] = attribution
        return out
