"""Whether a script has a CUDA path: code that runs on a GPU when there is one. `perfaudit run
--device auto` emulates a CUDA device for such a script on a machine without a GPU."""
from __future__ import annotations

import os
import re

# "cuda" if torch.cuda.is_available(), .cuda(), torch.accelerator, a framework that picks the device
CUDA_PATH = re.compile(r"\bcuda\b|\.cuda\(|torch\.accelerator|current_accelerator|\bnccl\b"
                       r"|^\s*(?:from|import)\s+(?:lightning|pytorch_lightning|transformers|accelerate)\b", re.M)
_IMPORT = re.compile(r"^\s*(?:from\s+(\.?\w+)|import\s+(\w+))", re.M)
MAX_FILES = 50
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


def has_cuda_path(script: str) -> bool:
    """In the script, or in a module of the user's beside it that the script imports."""
    path = os.path.abspath(script)
    text = _read(path)
    if CUDA_PATH.search(text):
        return True
    return any(CUDA_PATH.search(_read(p)) for p in _local_modules(text, os.path.dirname(path)))
