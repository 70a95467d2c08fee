"""The machine and the flags a run ran with: versions, device, cudnn/TF32 settings, CPU count and
how busy the machine was (load average)."""
from __future__ import annotations

import functools
import os
import platform


def load_average() -> float | None:
    """The 1-minute load average (processes running or waiting for a CPU), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def busy_now() -> float | None:
    """How many CPUs other processes want right now (Linux: the threads runnable at this moment, less
    this one, the median of five looks over 0.1 s). Not the load average: it lags a minute behind and
    counts the audit's own work just before (importing torch, a previous run). Elsewhere, the load
    average."""
    import statistics
    import time
    counts = []
    for i in range(5):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return load_average()
        if i < 4:
            time.sleep(0.025)
    return float(max(0, statistics.median(counts)))


def free_cores() -> int | None:
    """The cores left by other processes when they want some (at least one), else None: the machine is
    free. Decides the intra-op threads of an audited run and of every verify run."""
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    others, cpus = busy_now(), os.cpu_count() or 1
    if others is None or others < 1:
        return None
    return max(1, int(cpus - others + 0.5))


@functools.cache
def _platform() -> dict:
    return {"python": platform.python_version(), "platform": platform.platform()}


def environment() -> dict:
    import torch

    from ..emulation.cuda_shim import emulated, gpu_present, real_cuda_version, real_cudnn_version
    cuda = gpu_present()
    env = {
        "torch": torch.__version__,
        **_platform(),
        "cpu_count": os.cpu_count(),
        "load_avg": load_average(),
        "cuda_available": cuda,
        "cuda": real_cuda_version(),  # the build's, as cudnn below
        "cudnn": real_cudnn_version(),  # the build's, not what the emulated device answers the script
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "device": "cpu",
        "emulated_cuda": emulated(),  # the script saw a CUDA device that the CPU served (emulate.py)
        "no_memory_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"),
    }
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(device="cuda", device_name=props.name, capability=f"{props.major}.{props.minor}",
                   device_memory=props.total_memory)
        try:  # the caching allocator's own record: retries mean it had to free and allocate again
            stats = torch.cuda.memory_stats()
            env.update(alloc_retries=int(stats.get("num_alloc_retries", 0)),
                       max_memory_allocated=torch.cuda.max_memory_allocated(),
                       max_memory_reserved=torch.cuda.max_memory_reserved())
        except Exception:  # noqa: BLE001 - a device that cannot say
            pass
    return env


def fit_threads_to_free_cores(torch) -> dict | None:
    """On a busy machine, the script runs with as many intra-op threads as there are free cores (at
    least one): a thread pool wider than the free cores makes every parallel op wait for a preempted
    thread, and the step's figures then measure the neighbours, not the script. Nothing changes when the
    machine has the cores, or when OMP_NUM_THREADS / MKL_NUM_THREADS say how many (the script's own
    torch.set_num_threads still wins). Returns what was done, for the report."""
    free = free_cores()
    default = torch.get_num_threads()
    if free is None or free >= default:
        return None
    torch.set_num_threads(free)
    return {"default": default, "used": free, "load_avg": load_average(), "cpu_count": os.cpu_count()}


def choose_threads(torch, config: dict, fit: bool) -> dict | None:
    """The intra-op threads: as `verify` chose them for all its runs, or fitted to a busy machine's free cores."""
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
        return {"used": int(config["threads"]), "set_by": "verify"}
    return fit_threads_to_free_cores(torch) if fit else None
