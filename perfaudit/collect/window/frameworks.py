"""Which training framework drives the steps: Lightning's Trainer.fit, Hugging Face's Trainer.train or
an Accelerate loop. Read once, when the window opens, from the stack of the step that opens it (the
framework's loop is on it) and from what the script imported; the report says so, and what a step is."""
from __future__ import annotations

import os
import sys

# (name, a path fragment of the framework's training loop on the stack, module for the version, loop)
_LOOPS = (
    ("Lightning", os.sep + os.path.join("lightning", "pytorch") + os.sep, "lightning", "Trainer.fit"),
    ("Lightning", os.sep + "pytorch_lightning" + os.sep, "pytorch_lightning", "Trainer.fit"),
    ("Hugging Face Transformers", os.sep + os.path.join("transformers", "trainer.py"), "transformers",
     "Trainer.train"),
)


def _version(module: str) -> str | None:
    mod = sys.modules.get(module)
    return getattr(mod, "__version__", None) if mod is not None else None


def _accelerate_in_use() -> bool:
    """An Accelerator was built: its shared state is filled in."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "AcceleratorState", None), "_shared_state", None) if state else None
    return bool(shared)


def detect(frame=None) -> dict | None:
    """{name, version, loop} of the framework whose training loop is on the stack (or in use), else None."""
    frame = frame or sys._getframe(1)
    paths = []
    while frame is not None:
        paths.append(frame.f_code.co_filename)
        frame = frame.f_back
    for name, fragment, module, loop in _LOOPS:
        if any(fragment in p for p in paths):
            return {"name": name, "version": _version(module), "loop": loop}
    if _accelerate_in_use():
        return {"name": "Accelerate", "version": _version("accelerate"), "loop": "Accelerator"}
    return None
