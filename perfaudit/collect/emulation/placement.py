"""Where the script puts its tensors when it runs on an emulated CUDA device, and what that would cost.

A TorchFunctionMode sees every torch call of the audited process's main thread. A tensor placed on
"cuda" (a `.to(device)`, `.cuda()`, a factory with `device="cuda"`, an op on such tensors) is computed
on the CPU and remembered by identity, so the script sees `x.device == cuda:0` and `x.is_cuda`, and
torch's own Python code (the optimizer's foreach/fused choice, GradScaler, DDP) takes its CUDA path.
Every crossing of the host/device line is recorded as a GPU run would perform it: host-to-device copies
(bytes, pinned or pageable source, non_blocking, where the source came from, per step, at the user's
line), device-to-host reads that synchronise, and the CUDA calls that block."""
from __future__ import annotations

import sys
import threading
import types

import torch
import torch.utils._device as _device_context
from torch.overrides import TorchFunctionMode

from ...probe_schema import SYNC_RANGE, h2d_range
from ..internal import record_internal_error
from ..userframes import is_user_file, library_reader, user_site
from .attention import attention_handlers
from .cuda_shim import cast_to_type, gpu_error
from .factories import FACTORIES as _FACTORIES
from .factories import FROM_DATA as _FROM_DATA
from .generators import generator_handlers
from .host_outputs import host_output_handlers
from .host_reads import KERNEL_READS, READS, REFUSED
from .marks import mark
from .moves.device_index import parse_to
from .moves.same_device import SAME_DEVICE, raise_if_mixed
from .moves.samples import sample_moves
from .opaque.graphs import refuse_a_wait_in_capture
from .tensor_registry import KINDS, KeyedRef, Registry, copied, first_placed, is_cuda, kind_of, tag, tensor_bytes

DEFAULT = object()  # a handler's answer when the mode's own path is to make the call (Placement.DEFAULT)
CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
Tensor = torch.Tensor

# what torch's default device (a DeviceContext, at the bottom of the mode stack) makes on that device. A torch
# without CURRENT_DEVICE (before 2.3) pushes its DeviceContext above this mode, which then sees device= given
if not hasattr(_device_context, "CURRENT_DEVICE"):
    _device_context = types.SimpleNamespace(CURRENT_DEVICE=None)  # type: ignore[assignment]
_DEFAULT_DEVICE_FACTORIES = frozenset(getattr(torch.utils._device, "_device_constructors", set)())
class Placement(TorchFunctionMode):
    """The emulated device's bookkeeping: the mode, the tensors' registries, the records the report reads."""
    DEFAULT = DEFAULT

    def __init__(self):
        super().__init__()
        self.on_device = Registry()   # tensors the script placed on "cuda"
        self.pinned = Registry()      # host tensors in pinned memory (pin_memory(), a pinning DataLoader)
        self.from_loader = Registry() # host tensors that came out of a DataLoader (or were made from one)
        self.made = Registry()        # host tensors a factory of the user's code made: value = its site
        self._on_device_refs, self._from_loader_refs = self.on_device._refs, self.from_loader._refs
        self._made_refs = self.made._refs
        self.copies: dict[tuple, dict] = {}
        self.reads: dict[tuple, dict] = {}
        self.calls: dict[tuple, dict] = {}
        self.autocast: dict[tuple, dict] = {}
        self.window_step = lambda: None
        self.step_clock = lambda: 0   # steps ended so far
        self.in_fetch = False         # inside DataLoader.__next__ (a Dataset's __getitem__ runs there)
        self.placements = 0           # tensors put on the device (moves, factories with device=, legacy types)
        self.fetch_aside = False      # this fetch runs without the mode (fetch_begins)
        self._fetches: dict = {}      # loader id -> [clean fetches, touched the device]
        self._main_thread = threading.get_ident()
        self.aside = False            # the script took its CPU branch: the mode is off (emulate.py)
        self.memory = None            # device_memory.DeviceMemory while one step's memory is tracked
        self.tracked_memory = None    # the same, for good: the script's memory queries read its steps' peak
        self.device_ops = 0           # torch calls on tensors on the device
        self._user_code: dict = {}
        self.handlers = {
            Tensor.to: sample_moves(self), Tensor.cuda: self._cuda, Tensor.cpu: self._cpu,
            Tensor.is_cuda.__get__: lambda f, a, k: self.on_device.has(a[0]),
            Tensor.device.__get__: lambda f, a, k: CUDA if self.on_device.has(a[0]) else f(*a, **k),
            Tensor.get_device: lambda f, a, k: 0 if self.on_device.has(a[0]) else f(*a, **k),
            Tensor.grad.__get__: self._grad,
            Tensor.data.__set__: self._set_data,
            Tensor.record_stream: lambda f, a, k: None, Tensor.new_tensor: self._new_tensor,
            Tensor.type: lambda f, a, k: cast_to_type(self, f, a, k),
            torch._C._nn._parse_to: parse_to,  # Module.to's parser: a device keyword, no tensor
            **host_output_handlers(self), **attention_handlers(self), **generator_handlers(self),
        }
        for func, name in READS.items():
            self.handlers[func] = self._reader(name)

    # -- the mode --------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # the hot path of every torch call the script makes: few calls (each, builtins included, is an
        # event of the profiler's Python tracer): dicts read with `in` and `[]`, types through KINDS
        handlers = self.handlers
        if func in handlers:
            out = handlers[func](func, args, kwargs or {})
            if out is not DEFAULT:  # a handler may leave a call to the bookkeeping below
                return out
        default = _device_context.CURRENT_DEVICE  # `with torch.device("cuda")`, torch.set_default_device
        if default is not None and default.type == "cuda" and func in _DEFAULT_DEVICE_FACTORIES:
            if not kwargs or kwargs.get("device") is None:  # torch's DeviceContext gives it the device, below us
                return self._made_on_device(func, args, {**(kwargs or {}), "device": default})
        try:
            if kwargs:
                device = kwargs["device"] if "device" in kwargs else None
                if device is not None and is_cuda(device):
                    return self._made_on_device(func, args, kwargs)
                if "pin_memory" in kwargs and kwargs["pin_memory"]:  # a CPU build has no pinned allocator
                    out = func(*args, **{**kwargs, "pin_memory": False})
                    self.pinned.add(out)  # pinned, as on a GPU machine (save_on_cpu's buffers, staging tensors)
                else:
                    out = func(*args, **kwargs)
            else:
                out = func(*args)
        except Exception as exc:  # the op refused the script's arguments: the script's error, not the device's
            exc.perfaudit_op_error = True  # read by child.py
            raise
        cls = type(out)
        kind = KINDS[cls] if cls in KINDS else kind_of(cls)
        if not kind:  # sizes, dims, Python numbers: nothing to follow
            return out
        on_device = self._on_device_refs
        if on_device:
            for a in args:
                cls = type(a)
                arg_kind = KINDS[cls] if cls in KINDS else kind_of(cls)
                if arg_kind == 1:
                    key = id(a)
                    if key in on_device and on_device[key][0]() is a:
                        break
                elif arg_kind == 2 and first_placed(a, self.on_device):
                    break
            else:
                a = None
            if a is not None:
                self.device_ops += 1
                if func in SAME_DEVICE and (self._made_refs or self._from_loader_refs):
                    raise_if_mixed(self, args, kwargs or {}, func)  # a known host tensor meets it: a GPU raises
                if func in KERNEL_READS:
                    self._kernel_read(func, args, kwargs)
                if kind == 1:
                    ref = KeyedRef(out, self.on_device._gone)
                    ref.key = key = id(out)
                    on_device[key] = (ref, True)
                else:
                    tag(out, self.on_device)
                return out
        if self._from_loader_refs and first_placed(args, self.from_loader):
            tag(out, self.from_loader)
        elif func in _FACTORIES:
            self._host_made(out)
        elif self._made_refs:  # made from a made tensor (a slice, a stack, a cast): made when and where it was
            made = first_placed(args, self.made)
            if made is not None:
                tag(out, self.made, made)
        return out

    def _made_on_device(self, func, args, kwargs):
        out = func(*args, **{**kwargs, "device": "cpu"})
        self._placed(out)
        tag(out, self.on_device)
        data = args[1] if func is Tensor.new_tensor and len(args) > 1 else (args[0] if args else None)
        if func in _FROM_DATA and data is not None and not isinstance(data, Tensor) and tensor_bytes(out):
            self._copy_in(None, tensor_bytes(out), non_blocking=False, api=getattr(func, "__name__", "tensor") + "(device=)")
        return out

    def _host_made(self, out, depth: int = 2) -> None:
        """A factory called by the user's code made `out` on the host: noted with where and in which step
        (`depth`: the caller's frame, counted from here)."""
        caller = sys._getframe(depth).f_code.co_filename
        mine = self._user_code.get(caller)
        if mine is None:
            mine = self._user_code[caller] = is_user_file(caller)
        site = user_site(2) if mine else None
        if site is not None:
            tag(out, self.made, (site, self.step_clock()))

    # -- moves -----------------------------------------------------------------------------------
    def _to(self, func, args, kwargs):
        src, rest = args[0], list(args[1:])
        target, non_blocking = None, bool(kwargs.get("non_blocking", False))
        if "device" in kwargs:
            target = "cuda" if is_cuda(kwargs["device"]) else "cpu"
            kwargs = {**kwargs, "device": "cpu"}
        for i, a in enumerate(rest):
            if isinstance(a, (torch.device, str)) or (isinstance(a, int) and not isinstance(a, bool) and i == 0):
                target = "cuda" if is_cuda(a) else "cpu"
                rest[i] = CPU
            elif isinstance(a, Tensor) and i == 0:
                target = "cuda" if self.on_device.has(a) else "cpu"
            elif isinstance(a, bool) and i > 0:
                non_blocking = a
        out = func(src, *rest, **kwargs)
        was_on = self.on_device.has(src)
        if target == "cuda":
            if not was_on:
                out = copied(out) if out is src else out
                self._copy_in(src, tensor_bytes(src), non_blocking, "to")
                self._placed(out, src)
            tag(out, self.on_device)
        elif target == "cpu" and was_on:
            out = copied(out) if out is src else out
            self._read(".to(cpu)" if not non_blocking else ".to(cpu, non_blocking=True)", blocking=not non_blocking)
        elif was_on:
            tag(out, self.on_device)
        return out

    def _cuda(self, func, args, kwargs):
        src = args[0]
        if self.on_device.has(src):
            return src
        out = src.clone(memory_format=kwargs["memory_format"]) if "memory_format" in kwargs else copied(src)
        self._copy_in(src, tensor_bytes(src), bool(kwargs.get("non_blocking", False)), "cuda")
        self._placed(out, src)
        tag(out, self.on_device)
        return out

    def _cpu(self, func, args, kwargs):
        src = args[0]
        out = func(*args, **kwargs)
        if self.on_device.has(src):
            self._read(".cpu()", blocking=True)
            out = copied(out) if out is src else out
        return out

    def _placed(self, out, src=None) -> None:
        """A tensor put on the device; the step whose memory is tracked (device_memory.py) is told."""
        self.placements += 1
        if self.memory is not None and isinstance(out, Tensor):
            batch = src is not None and (self.in_fetch or self.from_loader.has(src))
            self.memory.placed(out, "batches" if batch else "temporaries")

    def _grad(self, func, args, kwargs):
        grad = func(*args, **kwargs)
        if grad is not None:  # read by the optimizer for every parameter: the registry read as its dict
            refs, param, key = self._on_device_refs, args[0], id(grad)
            placed = id(param) in refs and refs[id(param)][0]() is param
            if placed and not (key in refs and refs[key][0]() is grad):
                self.on_device.add(grad)  # autograd made it in C++: it lives where its parameter does
        return grad

    def _new_tensor(self, func, args, kwargs):
        """`x.new_tensor(data)` on a device tensor copies the host data over, like torch.tensor(data, device=…)."""
        device = kwargs.get("device")
        if device is not None and is_cuda(device):
            return self._made_on_device(func, args, kwargs)
        out = func(*args, **kwargs)
        if device is None and self.on_device.has(args[0]):
            tag(out, self.on_device)
            data = args[1] if len(args) > 1 else kwargs.get("data")
            if not isinstance(data, Tensor):
                self._copy_in(None, tensor_bytes(out), non_blocking=False, api="new_tensor")
        elif not self.on_device.has(args[0]):
            self._host_made(out, depth=3)
        return out

    def _set_data(self, func, args, kwargs):
        # nn.Module.to() swaps each parameter's data: the parameter is where its new data is
        out = func(*args, **kwargs)
        if self.on_device.has(args[1]):
            self.on_device.add(args[0])
        return out

    def _reader(self, name: str):
        def read(func, args, kwargs):
            if args and isinstance(args[0], Tensor) and self.on_device.has(args[0]):
                if func in REFUSED:  # .numpy() of a device tensor: a GPU raises, the script must copy first
                    raise gpu_error(*REFUSED[func])
                self._read(name, blocking=True)
            return func(*args, **kwargs)
        return read

    def _kernel_read(self, func, args, kwargs) -> None:
        name, position, keyword, reads = KERNEL_READS[func]
        read = args[position] if len(args) > position else (kwargs or {}).get(keyword)
        if not (isinstance(read, Tensor) and self.on_device.has(read)):
            return
        for _ in range(reads if isinstance(reads, int) else reads(args, kwargs or {})):
            self._read(name, blocking=True, kernel=True)

    # -- records ---------------------------------------------------------------------------------
    def _entry(self, table: dict, key_extra: str, site: dict | None, **fields) -> dict | None:
        if site is None:
            return None
        key = (site["path"], site["line"], key_extra)
        entry = table.get(key)
        if entry is None:
            entry = table[key] = {"site": site, "calls": 0, "window_calls": 0, "by_step": {}, **fields}
        entry["calls"] += 1
        step = self.window_step()
        if step is not None:
            entry["window_calls"] += 1
            entry["by_step"][str(step)] = entry["by_step"].get(str(step), 0) + 1
        return entry

    def _copy_in(self, src, nbytes: int, non_blocking: bool, api: str) -> None:
        try:
            if threading.get_ident() != self._main_thread:
                origin, made_at = "thread", None  # a prefetching thread's: it overlaps the step by design
            elif src is None:
                origin, made_at = "data", None
            elif self.in_fetch:
                origin, made_at = "sample", None  # a Dataset's __getitem__ moves each sample
            elif self.from_loader.has(src):
                origin, made_at = "loader", None
            else:  # made in this step and moved: COPY002; kept on the host from before: data
                made = self.made.get(src)
                made_at = made[0] if made is not None else None
                origin = "made" if made is not None and made[1] == self.step_clock() else "host"
            pinned = src is not None and self.pinned.has(src)
            mark(h2d_range(origin, pinned, non_blocking, nbytes))  # the copy, for the projection to time
            entry = self._entry(self.copies, origin, user_site(3), api=api, origin=origin, bytes=0,
                                window_bytes=0, pinned=True, non_blocking=True, made_at=made_at)
            if entry is None:
                return
            entry["bytes"] = max(entry["bytes"], nbytes)
            if self.window_step() is not None:
                if not entry["window_bytes"]:  # where the window's copies were made: the first step's may not
                    entry["made_at"] = made_at  # be (data made before training shares its step clock, 0)
                entry["window_bytes"] += nbytes
            entry["pinned"] = entry["pinned"] and pinned
            entry["non_blocking"] = entry["non_blocking"] and non_blocking
        except Exception as exc:  # noqa: BLE001  a record must never break the script
            record_internal_error("CUDA emulation", exc)

    def _read(self, name: str, blocking: bool, kernel: bool = False) -> None:
        try:  # the user's own read, or one a library function the user's line called made (`inside` it)
            inside = library_reader(3)
            self._entry(self.reads, f"{name} {inside}", user_site(3), api=name, blocking=blocking, inside=inside,
                        kernel=kernel)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("CUDA emulation", exc)
        if blocking:
            _host_waits()

    def cuda_call(self, api: str) -> None:
        try:
            self._entry(self.calls, api, user_site(3), api=api)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("CUDA emulation", exc)
        if api.endswith("synchronize"):  # torch.cuda / torch.accelerator / a stream's / an event's
            _host_waits()

    def autocast_entered(self, device_type: str, dtype, enabled: bool) -> None:
        self._entry(self.autocast, device_type, user_site(3), device_type=device_type,
                    dtype=str(dtype).replace("torch.", "") if dtype is not None else None, enabled=bool(enabled))

    # -- DataLoader fetches and batches -----------------------------------------------------------
    LEARNING_FETCHES = 2  # fetches a loader makes under the mode before its host work runs without it

    def fetch_begins(self, loader) -> tuple:
        """A main-process DataLoader fetch begins (its Dataset's __getitem__ and collate run now). The
        first fetches of each loader run under the mode: a Dataset that touches the device (moves each
        sample there, indexes a tensor kept there) is seen doing so. A loader whose first fetches never
        did has its later fetches run with the mode set aside (`fetch_aside`): host work on host
        tensors at native speed, no bookkeeping for tensors that never reach the device."""
        state = self._fetches.setdefault(loader, [0, False])  # [clean fetches, touched the device]
        self.in_fetch = True
        self.fetch_aside = state[0] >= self.LEARNING_FETCHES and not state[1]
        return state, self.placements + self.device_ops

    def fetch_ends(self, begun: tuple) -> None:
        state, before = begun
        self.in_fetch = self.fetch_aside = False
        if self.placements + self.device_ops != before:
            state[1] = True
        elif state[0] < self.LEARNING_FETCHES:
            state[0] += 1

    def fetch_touched_device(self) -> None:
        """A fetch run with the mode aside needed the device after all: that loader keeps the mode."""
        for state in self._fetches.values():
            state[1] = True

    def loader_batch(self, batch, depth: int = 0) -> None:
        if isinstance(batch, Tensor):
            self.from_loader.add(batch)
        elif depth <= 4 and isinstance(batch, (dict, list, tuple)):
            for v in batch.values() if isinstance(batch, dict) else batch:
                self.loader_batch(v, depth + 1)

    def snapshot(self) -> dict:
        rows = lambda table: [dict(v) for v in table.values()][:200]  # noqa: E731
        return {"copies": rows(self.copies), "reads": rows(self.reads), "calls": rows(self.calls),
                "autocast": rows(self.autocast), "params_on_device": len(self.on_device),
                "placements": self.placements, "device_ops": self.device_ops}

    def place(self, t, copied_from_host: bool = False):
        """Place `t` on the emulated device from outside the mode (torch.cuda.FloatTensor(...))."""
        self.on_device.add(t)
        self._placed(t)
        if copied_from_host:
            self._copy_in(None, tensor_bytes(t), non_blocking=False, api="torch.cuda.*Tensor(data)")
        return t


def _host_waits() -> None:
    """Mark where a GPU's host would wait for the device (probe_schema.SYNC_RANGE); fail there in a capture."""
    refuse_a_wait_in_capture()
    mark(SYNC_RANGE)
