"""Which rank of a job this process is, when torchrun started it."""
from __future__ import annotations

import os


def launched_rank() -> int | None:
    """This process's rank when torchrun (torch.distributed.run) started it, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ and "LOCAL_RANK" not in os.environ:
        return None
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return None
