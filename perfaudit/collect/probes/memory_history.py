"""The CUDA allocator's memory history left on (`torch.cuda.memory._record_memory_history`, tip T07): while it
records, every allocation and free of the device's blocks takes a stack trace and an entry in a history that
grows until it is turned off. Noted where the script turned it on or off, and whether it was on in the window;
perfaudit's own memory probes (gpu_memory.py, oom.py) call it too, and those calls are not the script's."""
from __future__ import annotations

import sys

import torch

from ..userframes import is_own_file, user_site
from ..wrap import patch, wrap

API = "_record_memory_history"


class MemoryHistory:
    """Whether the script's history recording is on (`on`), and was at any sample in the window."""

    def __init__(self, calls: list[dict]):
        self.calls = calls      # the probes' debug calls: each of the script's, with its site
        self.on = False
        self.in_window = False

    def install(self) -> None:
        memory = getattr(torch.cuda, "memory", None)
        if memory is None or not callable(getattr(memory, API, None)):
            return
        wrap(memory, API, self._called)
        if hasattr(torch.cuda, API):  # torch.cuda's own name for it, where it has one
            patch(torch.cuda, API, getattr(memory, API))

    def _called(self, args, kwargs) -> None:
        if is_own_file(sys._getframe(2).f_code.co_filename):
            return  # perfaudit's own memory probe
        enabled = args[0] if args else kwargs.get("enabled", "all")  # "all", "state", None; a bool before 2.1
        self.on = enabled not in (None, False)
        self.calls.append({"api": API, "enabled": self.on, "site": user_site(3)})

    def sample(self) -> None:
        self.in_window = self.in_window or self.on
