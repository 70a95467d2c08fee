"""DistributedDataParallel models: their options (from DDP's own logging data), and how often their
forward asks for gradient synchronisation, in the window and overall (tip T27)."""
from __future__ import annotations

import functools
import weakref

from ..userframes import user_site
from ..wrap import patch, wrap


class DDPProbe:
    def __init__(self, owner):
        self.owner = owner          # the Probes: its window_step says whether the window is open
        self.models: list[dict] = []

    def install(self) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        probe = self

        def record(args, kwargs):
            model = args[0]
            self.models.append({"site": user_site(3), "_ref": weakref.ref(model), "sync_forwards": 0,
                                "nosync_forwards": 0, "window_sync_forwards": 0, "window_nosync_forwards": 0})
            model._perfaudit_ddp = len(self.models) - 1

        wrap(DDP, "__init__", record)
        original_forward = DDP.forward

        @functools.wraps(original_forward)
        def forward(model, *args, **kwargs):
            try:
                info = probe.models[model._perfaudit_ddp]
                sync = "sync_forwards" if model.require_backward_grad_sync else "nosync_forwards"
                info[sync] += 1
                step = probe.owner.window_step()
                if step is not None:
                    info["window_" + sync] += 1
                    by_step = info.setdefault("window_" + sync + "_by_step", {})
                    by_step[str(step)] = by_step.get(str(step), 0) + 1
            except Exception:
                pass
            return original_forward(model, *args, **kwargs)

        patch(DDP, "forward", forward)

    def snapshot(self) -> list[dict]:
        out = []
        for info in self.models:
            entry = {k: v for k, v in info.items() if not k.startswith("_")}
            model = info["_ref"]()
            if model is not None:
                try:  # DDP's own record: options, backend, and the parameters that got no gradient
                    data = model._get_ddp_logging_data()
                    entry.update(find_unused_parameters=bool(data.get("find_unused_parameters")),
                                 gradient_as_bucket_view=bool(data.get("gradient_as_bucket_view")),
                                 backend=str(data.get("backend_name", "")),
                                 unused_parameter_size=data.get("unused_parameter_size"))
                except Exception:
                    entry.update(find_unused_parameters=bool(getattr(model, "find_unused_parameters", False)),
                                 gradient_as_bucket_view=bool(getattr(model, "gradient_as_bucket_view", False)))
                params = [p for p in model.parameters() if p.requires_grad]
                entry["param_device"] = params[0].device.type if params else None
                entry["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
                entry["params_without_grad"] = sum(1 for p in params if p.grad is None)
            out.append(entry)
        return out
