"""The script's batches made larger by a factor, for a batch plan (verify/batch_plan.py): every DataLoader the
script builds with a `batch_size` gets that size times the factor, as the user would edit it. A loader built
with a `batch_sampler`, or without batching (`batch_size=None`), is left as it is; the loader probe records the
size each loader iterates with, which is how the plan sees what was scaled."""
from __future__ import annotations

import inspect

import torch

from .internal import record_internal_error
from .wrap import patch


def install(factor: float) -> None:
    dl = torch.utils.data.DataLoader
    original = dl.__init__
    signature = inspect.signature(original)
    scaled: list = []  # the datasets whose loader was scaled: a library rebuilding that loader from its
    # attributes (Lightning adding a distributed sampler) passes the scaled size, which is not scaled again

    def __init__(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
            asked = bound.arguments.get("batch_size", 1)
            dataset = bound.arguments.get("dataset")
            if (bound.arguments.get("batch_sampler") is None and isinstance(asked, int)
                    and not isinstance(asked, bool) and asked >= 1 and not any(d is dataset for d in scaled)):
                bound.arguments["batch_size"] = max(1, round(asked * factor))
                args, kwargs = bound.args[1:], bound.kwargs
                scaled.append(dataset)
        except TypeError:  # arguments DataLoader itself rejects: it says why
            pass
        except Exception as exc:  # noqa: BLE001 - never break the user's script
            record_internal_error("batch scaling", exc)
        original(self, *args, **kwargs)

    patch(dl, "__init__", __init__)
