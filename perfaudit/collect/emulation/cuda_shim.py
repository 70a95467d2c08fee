"""The CUDA API a training script calls, served on a machine without a GPU (`--device emulate-cuda`).

The script sees one CUDA device (`torch.cuda` and `torch.accelerator` say so), so it takes the branch
it takes on a GPU; placement.py computes what it puts there on the CPU. Calls that only make sense on
a GPU (synchronize, events, memory queries, streams) answer plausibly and are recorded. Nothing here
pretends to time anything: an event's elapsed time is host time.
"""
from __future__ import annotations

import contextlib
import sys
import time
import types
from typing import Any

import torch

from ...probe_schema import EMPTY_CACHE_MARK
from .marks import mark
from .memory.queries import MemoryQueries
from .tensor_registry import Registry, copied, tag, tensor_bytes

_real_cuda_available = torch.cuda.is_available
_real_cudnn_available, _real_cudnn_version = torch.backends.cudnn.is_available, torch.backends.cudnn.version
_real_cuda_version = torch.version.cuda
# the device the script sees: the run's --target GPU (the child's config, from the projection's table), else the
# default target's (facts/gpu/projection.py), so that every run of a script, verify's and plan's too, sees one GPU
GPU: dict[str, Any] = {"name": "H100 SXM (emulated on the CPU by perfaudit)", "total_memory": 80 * 2 ** 30,
                       "capability": (9, 0), "sms": 132}


def gpu_present() -> bool:
    """Whether this machine really has a CUDA device (never the emulated answer)."""
    return _real_cuda_available()


def real_cuda_version() -> str | None:
    """The CUDA this build of torch was made with (None on a CPU build), never the emulated answer."""
    return _real_cuda_version


def real_cudnn_version() -> int | None:
    """This build's own cuDNN version (None on a CPU build), never the emulated answer."""
    return _real_cudnn_version() if _real_cudnn_available() else None


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


_StreamBase: Any = getattr(torch, "Stream", object)


class _Stream(_StreamBase):
    """torch.cuda.Stream: one in-order queue, which the CPU is. A torch.Stream (a CPU one underneath), so that
    torch's argument parser takes it where a stream is asked for (`tensor.record_stream(stream)`, which the
    placement mode then serves) instead of failing before any mode sees the call."""

    def __new__(cls, device=None, priority: int = 0, **_):
        if _StreamBase is object:
            return object.__new__(cls)
        try:
            return _StreamBase.__new__(cls, device="cpu")
        except TypeError:  # an older torch.Stream, built from ids
            return _StreamBase.__new__(cls)

    def __init__(self, device=None, priority: int = 0, **_):
        self.priority = priority
        self.cuda_stream = 0

    @property
    def device(self):
        return torch.device("cuda", 0)

    @property
    def device_type(self):
        return 1  # torch's DeviceType enum value for CUDA, as a CUDA stream reports it

    @property
    def device_index(self):
        return 0

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


_RealGenerator = torch.Generator


class _Generator(_RealGenerator):
    """torch.Generator(device="cuda"): a CPU generator (the device's tensors are drawn on the CPU) that says it
    is the device's, so seeded sampling code (`torch.Generator(device=device).manual_seed(0)`) runs its GPU
    branch; a generator for the host is torch's own."""

    def __new__(cls, device="cpu", **kwargs):
        cuda = _is_cuda(device)
        made = _RealGenerator.__new__(cls, "cpu" if cuda else device, **kwargs)
        made._emulated_cuda = cuda
        return made

    def __init__(self, device="cpu", **kwargs):
        pass  # made in __new__

    @property
    def device(self):
        return torch.device("cuda", 0) if self._emulated_cuda else _RealGenerator.device.__get__(self)


def _is_cuda(device) -> bool:
    try:
        return torch.device(device).type == "cuda"
    except (RuntimeError, TypeError, ValueError):
        return False


class _Nvtx:
    """NVTX's ranges and marks (torch.cuda.nvtx, for Nsight): a CPU build has none; here they nest and do nothing."""

    def __init__(self):
        self.depth, self.handles = 0, 0

    def rangePushA(self, message) -> int:
        self.depth += 1
        return self.depth - 1

    def rangePop(self) -> int:
        self.depth = max(self.depth - 1, 0)
        return self.depth

    def rangeStartA(self, message) -> int:
        self.handles += 1
        return self.handles

    def rangeEnd(self, handle) -> None: pass
    def markA(self, message) -> None: pass


def _properties(device=None):
    major, minor = GPU["capability"]
    return types.SimpleNamespace(name=GPU["name"], major=major, minor=minor, total_memory=GPU["total_memory"],
                                 multi_processor_count=GPU["sms"], is_integrated=False, is_multi_gpu_board=False,
                                 L2_cache_size=40 * 2 ** 20, uuid="emulated", gcnArchName="")


def _legacy_type(name: str, dtype: torch.dtype):
    """torch.cuda.FloatTensor and its kin: built on the device from sizes, copied there from data."""

    class Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.is_cuda

    def __new__(cls, *args):
        sizes = len(args) > 0 and all(isinstance(a, int) for a in args)
        data = None if sizes or not args else args[0]
        made = (torch.empty(*args, dtype=dtype, device="cpu") if sizes or not args
                else torch.as_tensor(data, dtype=dtype, device="cpu").clone())
        return _recorder.place(made, copied_from_host=data is not None)

    return Meta(name, (), {"__new__": __new__, "dtype": dtype, "is_emulated_cuda_type": True})


LEGACY_TYPES = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
           "BFloat16Tensor": torch.bfloat16, "LongTensor": torch.int64, "IntTensor": torch.int32,
           "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8,
           "BoolTensor": torch.bool}


def cast_to_type(mode, func, args, kwargs):
    """`x.type(torch.cuda.FloatTensor)` / `x.type("torch.cuda.HalfTensor")`: a cast and a move to the
    device; `x.type()` names a device tensor's type as CUDA does."""
    src = args[0]
    target = args[1] if len(args) > 1 else kwargs.get("dtype")
    on = mode.on_device.has(src)
    if target is None:
        name = func(src)
        return name.replace("torch.", "torch.cuda.", 1) if on and not name.startswith("torch.cuda.") else name
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    cuda_type = (target.startswith("torch.cuda.") if isinstance(target, str)
                 else getattr(target, "is_emulated_cuda_type", False))
    if not cuda_type:
        host_type = not isinstance(target, torch.dtype)  # torch.FloatTensor, "torch.FloatTensor": the host's
        if host_type and on:  # a cast and a copy back to the host
            mode._read(".type(host type)", blocking=True)
        out = func(src, *args[1:], **kwargs)
        if on and not host_type:
            tag(out, mode.on_device)
        return out
    dtype = LEGACY_TYPES.get(name.rsplit(".", 1)[-1]) if isinstance(name, str) else None
    out = src.to(dtype=dtype) if dtype is not None else src
    if not on:
        out = copied(out) if out is src else out
        mode._copy_in(src, tensor_bytes(src), bool(kwargs.get("non_blocking", False)), "type")
    mode._placed(out, src)
    tag(out, mode.on_device)
    return out


# the messages of errors the emulated device raised because a GPU raises them there: the script's errors,
# not the emulation's (child.py reports them as the script's; no rerun on the CPU path)
AS_ON_A_GPU: set[str] = set()


def gpu_error(message: str, kind: type = RuntimeError) -> Exception:
    AS_ON_A_GPU.add(message)
    return kind(message)


def zero(*args, **kwargs) -> int:
    return 0


def nothing(*args, **kwargs) -> None:
    return None


def _empty_cache(recorder):
    """torch.cuda.empty_cache(): in a step whose memory is tracked, the allocator's replay gives back the free
    segments here (device_memory.py); in every step a mark says where a GPU would (the projection prices the
    cudaFree and the cudaMalloc that takes each segment again)."""
    def empty_cache() -> None:
        memory = getattr(recorder, "memory", None)
        if memory is not None:
            memory.cache_emptied()
        mark(EMPTY_CACHE_MARK)
    return empty_cache


# the CUDA runtime's Python bindings (torch.cuda.cudart()): Nsight's capture range (torch.cuda.profiler.start()),
# host memory registration; every call succeeds
_CUDART = types.SimpleNamespace(cudaError=types.SimpleNamespace(success=0), cudaProfilerStart=zero,
                                cudaProfilerStop=zero, cudaHostRegister=zero, cudaHostUnregister=zero)


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
    on_device = Registry()  # nothing is on the device before the emulation starts


CUDNN_VERSION = 91002  # what a current CUDA 12 build of torch reports
CUDA_VERSION = "12.8"  # the CUDA of that build (torch's cu128 wheels carry cuDNN 9.10.2)


_recorder = _NoRecorder()


def _serve(namespace, name: str, served) -> None:
    """Set `namespace.name`, and the same function where torch defines it (`torch.cuda.random.manual_seed` is
    `torch.cuda.manual_seed`; a script that calls it by its module's name was once left with this build's own,
    which raised)."""
    original = getattr(namespace, name, None)
    setattr(namespace, name, served)
    home = sys.modules.get(getattr(original, "__module__", None) or "")
    if (isinstance(original, (types.FunctionType, types.BuiltinFunctionType)) and home is not None
            and home is not namespace and getattr(home, name, None) is original):
        setattr(home, name, served)


def install(recorder, gpu: dict | None = None) -> None:
    """Serve torch.cuda / torch.accelerator as one CUDA device, the GPU `gpu` describes (name, total_memory,
    capability, sms); `recorder.cuda_call(api)` hears the calls a GPU run would pay for (synchronize, event
    timing), `recorder.place(t)` puts a legacy-typed tensor on the device."""
    global _recorder
    _recorder = recorder
    if gpu:
        GPU.update(gpu, capability=tuple(gpu.get("capability") or GPU["capability"]))
    cuda = torch.cuda
    major, minor = GPU["capability"]
    memory = MemoryQueries(recorder, GPU["total_memory"], major + minor / 10)
    emptied = _empty_cache(recorder)

    def synchronize(device=None):
        recorder.cuda_call("torch.cuda.synchronize")

    served = {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "set_device": nothing, "is_initialized": lambda: True, "init": nothing,
        "get_device_name": lambda device=None: GPU["name"], "get_device_capability": lambda device=None: (major, minor),
        "get_device_properties": _properties, "is_bf16_supported": lambda including_emulation=True: True,
        "synchronize": synchronize, "Event": _Event, "Stream": _Stream, "ExternalStream": _Stream,
        "current_stream": lambda device=None: _Stream(), "default_stream": lambda device=None: _Stream(),
        "stream": lambda stream=None: contextlib.nullcontext(), "device": _DeviceContext,
        "device_of": _DeviceContext,
        "memory_allocated": memory.allocated, "max_memory_allocated": memory.max_allocated,
        "memory_reserved": memory.reserved, "max_memory_reserved": memory.max_reserved,
        "memory_cached": memory.reserved, "max_memory_cached": memory.max_reserved,
        "reset_peak_memory_stats": memory.reset_peak, "reset_max_memory_allocated": memory.reset_peak,
        "reset_accumulated_memory_stats": nothing, "memory_stats": memory.stats,
        "memory_summary": memory.summary, "mem_get_info": memory.free_and_total, "empty_cache": emptied,
        "set_sync_debug_mode": nothing, "get_sync_debug_mode": zero, "ipc_collect": nothing,
        "set_per_process_memory_fraction": nothing, "get_arch_list": lambda: [f"sm_{major}{minor}"],
        "set_stream": nothing,  # CUDA graphs: opaque/graphs.py
        # tensors "on the device" draw from the CPU's generator: the device's own RNG state is a token
        "manual_seed": nothing, "manual_seed_all": nothing, "seed": nothing, "seed_all": nothing,
        "initial_seed": zero, "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8, device="cpu"),
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8, device="cpu")], "set_rng_state": nothing,
        "set_rng_state_all": nothing,
        # NVML's readings (torch asks nvidia-ml-py): an emulated device has none to give
        "utilization": zero, "memory_usage": zero, "temperature": zero, "power_draw": zero, "clock_rate": zero,
    }
    for name, value in served.items():
        _serve(cuda, name, _own(value, name))
    for name, dtype in LEGACY_TYPES.items():
        setattr(cuda, name, _legacy_type(name, dtype))
    torch.Generator = _Generator  # type: ignore[misc]
    torch.cuda.nvtx._nvtx = _Nvtx()  # type: ignore[assignment]
    cuda._cudart = _CUDART
    if not hasattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled"):  # asked by torch.compile(mode="reduce-overhead")
        torch._C._cuda_cudaCachingAllocator_is_enabled = lambda: True  # before it keeps a CPU graph out of CUDA graphs
    cuda.cudart = cuda.profiler.cudart = _own(lambda: _CUDART, "cudart")
    # the allocator's memory history (a memory-profiling script's): nothing recorded, an empty snapshot
    history = {"_record_memory_history": nothing, "_snapshot": lambda *args, **kwargs: {"segments": [], "device_traces": [[]]},
               "memory_snapshot": lambda *args, **kwargs: [], "get_allocator_backend": lambda: "native"}
    for name, value in history.items():
        setattr(cuda.memory, name, _own(value, name))
        if hasattr(cuda, name):
            setattr(cuda, name, getattr(cuda.memory, name))
    cudnn = torch.backends.cudnn
    cudnn.is_available = lambda: True
    cudnn.version = lambda: CUDNN_VERSION
    if torch.version.cuda is None and torch.version.hip is None:
        # a CPU build's None breaks a script that parses it (`torch.version.cuda.split(".")`) or takes it
        # for ROCm; a build made for a GPU keeps its own
        torch.version.cuda = CUDA_VERSION
    # no cuDNN kernel runs here: an RNN's flatten_parameters() and forward take the native path
    cudnn.is_acceptable = lambda tensor: False

    acc = getattr(torch, "accelerator", None)  # torch 2.6 and newer
    for name, value in {} if acc is None else {
        "is_available": lambda: True, "device_count": lambda: 1,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "current_device_index": lambda: 0, "current_device_idx": lambda: 0,
        "set_device_index": nothing, "set_device_idx": nothing,
        "synchronize": lambda device=None: recorder.cuda_call("torch.accelerator.synchronize"),
        "device_index": _DeviceContext, "empty_cache": emptied,
        "current_stream": lambda device=None: _Stream(), "set_stream": nothing,
        "memory_allocated": memory.allocated, "max_memory_allocated": memory.max_allocated,
        "memory_reserved": memory.reserved, "max_memory_reserved": memory.max_reserved,
        "reset_peak_memory_stats": memory.reset_peak, "memory_stats": memory.stats,
    }.items():
        if hasattr(acc, name):
            setattr(acc, name, _own(value, name))
