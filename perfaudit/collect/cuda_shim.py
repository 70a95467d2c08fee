"""The CUDA API a training script calls, served on a machine without a GPU (`--device emulate-cuda`).

The script sees one CUDA device (`torch.cuda` and `torch.accelerator` say so), so it takes the branch
it takes on a GPU; placement.py computes what it puts there on the CPU. Calls that only make sense on
a GPU (synchronize, events, memory queries, streams) answer plausibly and are recorded. Nothing here
pretends to time anything: an event's elapsed time is host time.
"""
from __future__ import annotations

import contextlib
import time
import types

import torch

_real_cuda_available = torch.cuda.is_available
DEVICE_NAME = "CUDA device emulated on the CPU (perfaudit)"
TOTAL_MEMORY = 80 * 2 ** 30


def gpu_present() -> bool:
    """Whether this machine really has a CUDA device (never the emulated answer)."""
    return _real_cuda_available()


def emulated() -> bool:
    return torch.cuda.is_available is not _real_cuda_available and torch.cuda.is_available()


class _Event:
    """torch.cuda.Event on the host: record() notes the host time; elapsed_time() is host time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **_):
        self._t = None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def synchronize(self):
        _recorder.cuda_call("Event.synchronize")

    def wait(self, stream=None):
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _Event) -> float:
        _recorder.cuda_call("Event.elapsed_time")
        if self._t is None or end._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._t - self._t) * 1000.0


class _Stream:
    """torch.cuda.Stream: one in-order queue, which the CPU is."""

    def __init__(self, device=None, priority: int = 0, **_):
        self.device = torch.device("cuda", 0)
        self.priority = priority
        self.cuda_stream = 0

    def wait_stream(self, stream): pass
    def wait_event(self, event): pass
    def synchronize(self): _recorder.cuda_call("Stream.synchronize")
    def query(self) -> bool: return True
    def is_capturing(self) -> bool: return False

    def record_event(self, event=None):
        event = event or _Event()
        event.record(self)
        return event

    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def __eq__(self, other): return isinstance(other, _Stream)
    def __hash__(self): return 0


class _DeviceContext(contextlib.nullcontext):
    """torch.cuda.device(i) / torch.accelerator.device_index(i): one device, nothing to switch."""

    def __init__(self, device=None):
        super().__init__()
        self.idx = 0


def _properties(device=None):
    return types.SimpleNamespace(name=DEVICE_NAME, major=8, minor=0, total_memory=TOTAL_MEMORY,
                                 multi_processor_count=108, is_integrated=False, is_multi_gpu_board=False,
                                 L2_cache_size=40 * 2 ** 20, uuid="emulated", gcnArchName="")


def _legacy_type(name: str, dtype: torch.dtype):
    """torch.cuda.FloatTensor and its kin: built on the device from sizes, copied there from data."""

    class Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.is_cuda

    def __new__(cls, *args):
        sizes = len(args) > 0 and all(isinstance(a, int) for a in args)
        data = None if sizes or not args else args[0]
        made = torch.empty(*args, dtype=dtype) if sizes or not args else torch.as_tensor(data, dtype=dtype).clone()
        return _recorder.place(made, copied_from_host=data is not None)

    return Meta(name, (), {"__new__": __new__, "dtype": dtype})


_LEGACY = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
           "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
           "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8,
           "BoolTensor": torch.bool}


def zero(*args, **kwargs) -> int:
    return 0


def nothing(*args, **kwargs) -> None:
    return None


def _own(value, name: str):
    """A function object of its own for each name: torch._dynamo maps torch's functions by identity
    and refuses one object under two names."""
    if isinstance(value, type) or not callable(value):
        return value

    def served(*args, **kwargs):
        return value(*args, **kwargs)
    served.__name__ = served.__qualname__ = name
    return served


class _NoRecorder:
    def cuda_call(self, api: str) -> None: pass
    def place(self, t, copied_from_host: bool = False): return t


_recorder = _NoRecorder()


def install(recorder) -> None:
    """Serve torch.cuda / torch.accelerator as one CUDA device; `recorder.cuda_call(api)` hears the calls
    a GPU run would pay for (synchronize, event timing), `recorder.place(t)` puts a legacy-typed tensor
    on the device."""
    global _recorder
    _recorder = recorder
    cuda = torch.cuda

    def synchronize(device=None):
        recorder.cuda_call("torch.cuda.synchronize")

    served = {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "set_device": nothing, "is_initialized": lambda: True, "init": nothing,
        "get_device_name": lambda device=None: DEVICE_NAME, "get_device_capability": lambda device=None: (8, 0),
        "get_device_properties": _properties, "is_bf16_supported": lambda including_emulation=True: True,
        "synchronize": synchronize, "Event": _Event, "Stream": _Stream, "ExternalStream": _Stream,
        "current_stream": lambda device=None: _Stream(), "default_stream": lambda device=None: _Stream(),
        "stream": lambda stream=None: contextlib.nullcontext(), "device": _DeviceContext,
        "device_of": _DeviceContext,
        "memory_allocated": zero, "max_memory_allocated": zero, "memory_reserved": zero,
        "max_memory_reserved": zero, "memory_cached": zero, "max_memory_cached": zero,
        "reset_peak_memory_stats": nothing, "reset_max_memory_allocated": nothing,
        "reset_accumulated_memory_stats": nothing, "memory_stats": lambda device=None: {},
        "memory_summary": lambda *a, **k: "(CUDA emulated on the CPU: no device memory)",
        "mem_get_info": lambda device=None: (TOTAL_MEMORY, TOTAL_MEMORY), "empty_cache": nothing,
        "set_sync_debug_mode": nothing, "get_sync_debug_mode": zero, "ipc_collect": nothing,
        "set_per_process_memory_fraction": nothing, "get_arch_list": lambda: ["sm_80"],
        "is_current_stream_capturing": lambda: False, "set_stream": nothing,
        # tensors "on the device" draw from the CPU's generator: the device's own RNG state is a token
        "manual_seed": nothing, "manual_seed_all": nothing, "seed": nothing, "seed_all": nothing,
        "initial_seed": zero, "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8)], "set_rng_state": nothing,
        "set_rng_state_all": nothing,
    }
    for name, value in served.items():
        setattr(cuda, name, _own(value, name))
    for name, dtype in _LEGACY.items():
        setattr(cuda, name, _legacy_type(name, dtype))
    torch.backends.cudnn.is_available = lambda: True

    acc = getattr(torch, "accelerator", None)  # torch 2.6 and newer
    for name, value in {} if acc is None else {
        "is_available": lambda: True, "device_count": lambda: 1,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "current_device_index": lambda: 0, "current_device_idx": lambda: 0,
        "set_device_index": nothing, "set_device_idx": nothing,
        "synchronize": lambda device=None: recorder.cuda_call("torch.accelerator.synchronize"),
        "device_index": _DeviceContext, "empty_cache": nothing,
        "current_stream": lambda device=None: _Stream(), "set_stream": nothing,
        "memory_allocated": zero, "max_memory_allocated": zero, "memory_reserved": zero,
        "max_memory_reserved": zero, "reset_peak_memory_stats": nothing, "memory_stats": lambda *a: {},
    }.items():
        if hasattr(acc, name):
            setattr(acc, name, _own(value, name))
