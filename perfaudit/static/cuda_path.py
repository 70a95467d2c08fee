"""Whether a script has a CUDA path: code that runs on a GPU when there is one. `perfaudit run
--device auto` emulates a CUDA device for such a script on a machine without a GPU."""
from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig

# "cuda" if torch.cuda.is_available(), .cuda(), torch.accelerator, a framework that picks the device
CUDA_PATH = re.compile(r"\bcuda\b|\.cuda\(|torch\.accelerator|current_accelerator|\bnccl\b"
                       r"|^\s*(?:from|import)\s+(?:lightning|pytorch_lightning|transformers|accelerate)\b", re.M)
_IMPORT = re.compile(r"^\s*(?:from\s+(\.?\w+)|import\s+(\w+))", re.M)
MAX_FILES = 50
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # perfaudit's package, not the user's
MAX_BYTES = 2_000_000


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_BYTES)
    except OSError:
        return ""


def _local_modules(text: str, folder: str) -> list[str]:
    """The files of the modules and packages beside the script that it imports (a helper that picks
    the device: `from utils import get_device`, `from common.device import pick_device`)."""
    out = []
    for m in _IMPORT.finditer(text):
        name = (m.group(1) or m.group(2) or "").lstrip(".")
        if not name:
            continue
        module, package = os.path.join(folder, name + ".py"), os.path.join(folder, name)
        if os.path.isfile(module):
            out.append(module)
        elif os.path.isdir(package):
            out += [os.path.join(package, f) for f in sorted(os.listdir(package)) if f.endswith(".py")]
    return out[:MAX_FILES]


def _package_files(spec) -> list[str]:
    if spec.submodule_search_locations:
        return [os.path.join(folder, f) for folder in spec.submodule_search_locations if os.path.isdir(folder)
                for f in sorted(os.listdir(folder)) if f.endswith(".py")]
    return [spec.origin] if spec.origin and spec.origin.endswith(".py") else []


def _libraries() -> list[str]:
    """The standard library's and the installed packages' folders."""
    paths = sysconfig.get_paths()
    return [os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)]


def _users_elsewhere(text: str, folder: str) -> list[str]:
    """The files of the user's own packages the script imports from elsewhere on its import path: a package of
    the repository on PYTHONPATH or installed in editable mode (minGPT's `projects/adder/adder.py` imports
    `mingpt.trainer`, whose Trainer picks "cuda"), never the standard library's or an installed package's."""
    libraries, out = _libraries(), []
    names = dict.fromkeys((m.group(1) or m.group(2) or "").split(".")[0] for m in _IMPORT.finditer(text))
    sys.path.insert(0, folder)  # the script's folder comes first on its own path
    try:
        for name in names:
            if not name or name in sys.builtin_module_names or os.path.exists(os.path.join(folder, name + ".py")):
                continue
            try:
                spec = importlib.util.find_spec(name)  # a top-level name: finds, imports nothing
            except Exception:  # noqa: BLE001 - a name the text merely looks like importing
                continue
            origin = os.path.realpath(spec.origin) if spec is not None and spec.origin else ""
            if (not origin.endswith(".py") or any(origin.startswith(lib) for lib in [*libraries, _OWN])
                    or "site-packages" in origin or "dist-packages" in origin):
                continue
            out += _package_files(spec)
            if len(out) >= MAX_FILES:
                break
    finally:
        sys.path.remove(folder)
    return out[:MAX_FILES]


def has_cuda_path(script: str) -> bool:
    """In the script, or in a module of the user's that the script imports: beside it, or elsewhere on its
    import path (a package of the user's repository)."""
    path = os.path.abspath(script)
    text = _read(path)
    if CUDA_PATH.search(text):
        return True
    folder = os.path.dirname(path)
    if any(CUDA_PATH.search(_read(p)) for p in _local_modules(text, folder)):
        return True
    return any(CUDA_PATH.search(_read(p)) for p in _users_elsewhere(text, folder))
