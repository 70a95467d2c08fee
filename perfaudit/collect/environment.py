"""The machine and the flags a run ran with: versions, device, cudnn/TF32 settings, CPU count and
how busy the machine was (load average)."""
from __future__ import annotations

import os
import platform


def load_average() -> float | None:
    """The 1-minute load average (processes running or waiting for a CPU), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def environment() -> dict:
    import torch
    cuda = torch.cuda.is_available()
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_avg": load_average(),
        "cuda_available": cuda,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "device": "cpu",
    }
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(device="cuda", device_name=props.name, capability=f"{props.major}.{props.minor}",
                   device_memory=props.total_memory)
    return env
