"""Host-device synchronisation points inside the step (tip T01)."""
from __future__ import annotations

import ast
import re

from ...calls import FRAMEWORK_READS, HOST_READS, NONZERO_CALLS, SCALAR_READ_CALLS, SYNC_CALLS, TORCH_READS
from ...static.uses import host_consumer, host_table_read
from ...trace.model import Event
from ...trace.nesting import enclosing, innermost
from ..compiled import REGION
from ..emulated import emulated, emulated_waits, in_measured_steps
from ..registry import Context, fact
from ..sites import Site, SiteCollector, site_from_probe
from .copies import pageable_h2d
from .emulated_reads import NOT_READS, ReadLines, callless_reads, device_read_in, device_read_lines, probe_path
from .waits import host_waits

# Ops that read a device value back to the host: they block until the GPU has caught up.
SCALAR_OPS = {"aten::_local_scalar_dense"}
NONZERO_OPS = {"aten::nonzero"}
# What to look for in the user's function when a sync op has no Python call of its own (a slot
# such as bool(t) or t[mask] called from C): calls by name, then syntactic forms.
SCALAR_FALLBACK = (SCALAR_READ_CALLS, ("branch",))
NONZERO_FALLBACK = (NONZERO_CALLS, ("mask",))
COPY_FALLBACK = (SYNC_CALLS, ())

# On a CPU run a scalar read inside library code (an optimizer's CPU step counter, autograd's anomaly
# checks) is not a device sync on a GPU; only reads the user's code makes on a tensor count.
_NOT_USER_READS = {"backward"}

DETAIL = {"aten::_local_scalar_dense": "scalar read (.item(), float(), print or `if` on a tensor)",
          "aten::nonzero": "nonzero / boolean-mask indexing (output size needs the device)"}


def _sync_items(ctx: Context):
    """(anchor, counted, ms, detail) for every sync point in the measured steps, and the ids of the anchors
    of reads a Python call made (`.item()`, `int(t)`, `bool(t)`, `.cpu()`, `nonzero()`: calls the emulated
    device sees), as against those an op's own kernel made inside it (a boolean mask's `nonzero`)."""
    host_ops = ctx.host_of("op")
    items, called = [], set[int]()
    if ctx.is_gpu:
        # a copy from pageable memory waits for itself: COPY001's (pinned memory, non_blocking), as the
        # emulated device reports it; not a read of a device value
        copying = {id(owner) for _, owner in pageable_h2d(ctx) if owner is not None}
        for rt, op, idle in host_waits(ctx):
            if op is not None and id(op) in copying:
                continue
            detail = DETAIL.get(op.name, f"{op.name} ({rt.name})") if op else f"{rt.name} called directly"
            items.append((op or rt, rt, idle / 1000.0, detail))
    else:
        items += _host_reads(ctx)
        called.update(id(anchor) for anchor, _, _, _ in items)
        reads = [e for e in host_ops if e.name in SCALAR_OPS | NONZERO_OPS]
        nested = innermost(reads, reads)
        inside_kernel, by_call = _read_inside_another_op(host_ops, reads)
        called |= by_call
        for op in reads:
            if id(op) not in nested and id(op) not in inside_kernel:
                items.append((op, op, op.dur / 1000.0, DETAIL[op.name]))
        if emulated(ctx):  # compiled code runs with the emulated device's mode set aside: it saw no read there
            regions = sorted(ctx.need_trace().named(lambda name: name.startswith(REGION)), key=lambda e: (e.ts, -e.dur))
            called -= {id(q) for q, stack in enclosing(regions, [anchor for anchor, _, _, _ in items]) if stack}
    return items, called


# Ops through which the user's own read of a value reaches `_local_scalar_dense` (t.item(), bool(t),
# torch.equal), and ops that read a device value on every device (their output size or their loop
# depends on it): a scalar read under any other op is that op's CPU kernel reading a value of its own
# (std/var read their element count), which its CUDA kernel does not do.
_READ_PATHS = frozenset({"aten::item", "aten::is_nonzero", "aten::equal", "aten::allclose", "aten::is_same_size",
                         "aten::repeat_interleave", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                         "aten::unique_consecutive", "aten::masked_select", "aten::bincount", "aten::histc",
                         "aten::multinomial", "aten::nonzero", "aten::index", "aten::index_put_",
                         "aten::_assert_async", "aten::masked_scatter_"})


# the ops a Python call's read goes through: `.item()`, `int(t)`, `float(t)` (aten::item), `bool(t)`
_CALLED_READS = frozenset({"aten::item", "aten::is_nonzero"})


def _read_inside_another_op(host_ops: list[Event], reads: list[Event]) -> tuple[set[int], set[int]]:
    """ids of the scalar reads that an op outside _READ_PATHS made inside its own CPU kernel, and ids of those
    a Python call made (no op around them but the call's own)."""
    ops = [e for e in host_ops if e.name.startswith("aten::")]
    inside, called = set(), set()
    for q, stack in enclosing(ops, reads):
        outer = [e for e in stack if e is not q and e.end >= q.end and e.name not in SCALAR_OPS]
        if outer and outer[0].name not in _READ_PATHS:
            inside.add(id(q))
        if not outer or outer[0].name in _CALLED_READS:
            called.add(id(q))
    return inside, called


_HOST_READ = re.compile(rf"^<built-in method ({'|'.join(sorted(HOST_READS - {'item'}))}) of Tensor object")


def _method(anchor) -> str | None:
    """The Tensor method a host-read anchor of `_host_reads` is (`cpu`, `numpy`, `tolist`); None for an op."""
    m = _HOST_READ.match(anchor.name)
    return m.group(1) if m else None


def _host_reads(ctx: Context):
    """On a CPU run `.cpu()`, `.numpy()` and `.tolist()` copy nothing, so no sync op shows; the Python
    tracer still records the calls. Each one is a device-to-host copy and sync on a GPU."""
    items = []
    reads: dict[str, re.Match | None] = {}  # by name: a name repeats in every step
    for ev in ctx.need_trace().python:
        m = reads[ev.name] if ev.name in reads else reads.setdefault(ev.name, _HOST_READ.match(ev.name))
        if m and ctx.step_of(ev.ts) is not None:
            # an anchor just inside the call, so the frame stack ends with the builtin itself
            anchor = Event("op", ev.name, ev.ts + min(ev.dur, 0.001) / 2, 0.0, ev.pid, ev.tid, {})
            items.append((anchor, anchor, ev.dur / 1000.0, f".{m.group(1)}() (device-to-host copy on a GPU)"))
    return items


@fact("sync.sites", "Host-device sync points in the measured steps, grouped by the user line that "
                    "caused them; on a GPU trace ms is the GPU idle time each sync exposes (the device "
                    "drained during the wait until the host launched new work).", needs=("stacks",))
def sync_sites(ctx: Context):
    ctx.need_trace()
    ctx.steps
    items, called = _sync_items(ctx)
    attributions = ctx.frames.attribute_all([anchor for anchor, _, _, _ in items]) if ctx.frames else {}
    if not ctx.is_gpu and ctx.frames:
        on_device = device_read_lines(ctx)
        items = [item for item in items if _user_read(attributions.get(id(item[0])))
                 or _read_of_the_device(ctx, attributions.get(id(item[0])), on_device)]
        if emulated(ctx):
            items = [item for item in items if id(item[0]) not in called
                     or device_read_in(ctx, attributions.get(id(item[0])), on_device, _method(item[0]))]
    items = [_for_grad_scaler(_for_framework(_for_module(item, att), att), att) for item in items
             for att in [attributions.get(id(item[0]))]]
    seen = callless_reads(ctx, DETAIL["aten::_local_scalar_dense"]) if emulated(ctx) else None
    collector = SiteCollector(ctx, *COPY_FALLBACK, seen_lines=seen)
    collector.add_all(items, hints={DETAIL["aten::_local_scalar_dense"]: SCALAR_FALLBACK, GRAD_SCALER: SCALAR_FALLBACK,
                                    DETAIL["aten::nonzero"]: NONZERO_FALLBACK}, attributions=attributions)
    sites = collector.result()
    if not ctx.is_gpu:  # reads of tensors the step itself made on the host are no device sync
        sites = [s for s in sites if not s.path or not set(s.extra.get("lines") or [s.line])
                 <= ctx.source.host_iteration_lines(s.path)]
    confirmed = {(ctx.source.display_path(d["path"]), d["line"]) for d in ctx.probes.get("sync_debug", [])}
    for site in sites:  # torch's own sync debug mode flagged these lines during the run
        site.extra["confirmed"] = any((site.path, line) in confirmed for line in site.extra.get("lines", []))
        _split_by_line(ctx, site)
    if emulated(ctx):  # what the CPU trace cannot show: synchronize() and event waits, torch's own reads
        sites += emulated_waits(ctx)
        sites += torch_internal_reads(ctx, sites)
    needed = [s for s in sites if _needed_by(ctx, s) or _scaler_needed(ctx, s)]
    ctx.__dict__["_sync_needed"] = needed
    kept = [s for s in sites if s not in needed]
    for site in kept:
        _for_host_table(ctx, site)
    return kept


def _for_host_table(ctx: Context, site) -> None:
    """A read that only indexes a tensor kept on the host (`table.gather(-1, t.cpu())`) says so: the table
    belongs on the device, where it is indexed without the read."""
    tree = ctx.source.tree(site.path) if site.path and site.exact else None
    feeds = [host_table_read(tree, line) for line in site.extra.get("lines") or [site.line]] if tree else []
    if feeds and feeds[0] and all(feeds):
        site.detail = f"{site.detail}, feeding `{feeds[0]}` on a tensor kept on the host"


def _needed_by(ctx: Context, site) -> str | None:
    """The code outside torch that needs the value read at this site (`env.step`), when every line of
    the site feeds such code: a read the program needs, not a sync to remove (static/uses.py)."""
    if not site.path or not site.exact:
        return None
    tree = ctx.source.tree(site.path)
    if tree is None:
        return None
    consumers = [host_consumer(tree, line) for line in site.extra.get("lines") or [site.line]]
    if not consumers or not all(consumers):
        return None
    site.extra["needed_by"] = consumers[0]
    return consumers[0]


def _split_by_line(ctx: Context, site) -> None:
    """A site of several lines (one function, several reads) gets each line's own count per step: the reads
    written on it (`.item()`, `.tolist()`…; one where the form is another) times how often its statement ran in
    the traced warm-up step. A statement over several lines (a logged f-string) ran as often as the least run of
    them: Python's line events go back and forth between its lines."""
    lines = site.extra.get("lines") or []
    if len(lines) < 2 or not site.path:
        return
    known = [ctx.source.times_run(site.path, line) for line in lines]
    runs = [r for r in known if r is not None]
    if len(runs) < len(lines) or not sum(runs):
        return
    span, reads = _statements_and_reads(ctx.source.tree(site.path), lines)
    ran = {line: min(r for other, r in zip(lines, runs) if span[other] == span[line]) for line in lines}
    weights = {line: ran[line] * max(1, reads[line]) for line in lines}
    total = sum(weights.values())
    if total:
        site.extra["line_share"] = {line: w / total for line, w in weights.items()}


def _statements_and_reads(tree, lines: list[int]) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Each line's innermost statement, as (first line, last line) (a line outside any is its own), and the
    host reads written on it."""
    spans: dict[int, tuple[int, int]] = {}
    reads = dict.fromkeys(lines, 0)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and node.lineno in reads and not node.args and \
                isinstance(node.func, ast.Attribute) and node.func.attr in HOST_READS:
            reads[node.lineno] += 1
        elif isinstance(node, ast.stmt):
            end = node.end_lineno or node.lineno
            for line in lines:
                known = spans.get(line)
                if node.lineno <= line <= end and (known is None or end - node.lineno < known[1] - known[0]):
                    spans[line] = (node.lineno, end)
    return {line: spans.get(line, (line, line)) for line in lines}, reads


@fact("sync.needed", "Host reads the program needs (a value passed to code outside torch, such as an "
                     "environment's step()), left out of sync.sites: where, and what needs them.",
      needs=("stacks",))
def sync_needed(ctx: Context) -> str | None:
    ctx.get("sync.sites")
    needed = ctx.__dict__.get("_sync_needed") or []
    if not needed:
        return None
    return "; ".join(f"{s.path}:{s.line} ({s.per_step(len(ctx.steps))['count_per_step']:.1f} per step) feeds "
                     f"`{s.extra['needed_by']}`" for s in needed)


def _for_module(item, att):
    """A sync torch (or the library that defines the module) makes inside a module the user called belongs to
    that call, said as such."""
    if att is None or att.module is None:
        return item
    anchor, counted, ms, detail = item
    library = att.reader.path.replace("\\", "/").split("/")[0] if att.reader is not None else "torch"
    return anchor, counted, ms, f"made by {library or 'torch'} inside {att.module}.forward for this call: {detail}"


GRAD_SCALER = "GradScaler's found-inf check in scaler.step()"


def _grad_scalers(att) -> bool:
    reader = att.reader.path.replace("\\", "/") if att is not None and att.reader else ""
    return reader.endswith("amp/grad_scaler.py")


def _for_grad_scaler(item, att):
    """GradScaler reads whether the unscaled gradients overflowed before it lets the optimizer step: a device
    read every step at the user's `scaler.step(optimizer)`."""
    if not _grad_scalers(att):
        return item
    anchor, counted, ms, _ = item
    return anchor, counted, ms, GRAD_SCALER


def _scaler_needed(ctx: Context, site) -> bool:
    """GradScaler's read is the price of float16 training (its range overflows; the check skips those
    steps): needed then. With bfloat16 autocast, or none, nothing needs loss scaling and the read can go."""
    if site.detail != GRAD_SCALER or autocast_dtype(ctx) != "float16":
        return False
    site.extra["needed_by"] = "scaler.step (float16 autocast needs GradScaler's inf check)"
    return True


def autocast_dtype(ctx: Context) -> str | None:
    """The 16-bit type the step's matrix math ran in: the emulated device's autocast, or on a GPU trace
    the precision of most of its GEMM kernels (None: neither, or not known)."""
    if emulated(ctx):
        used = [a.get("dtype") for a in (ctx.probes.get("cuda_emulation") or {}).get("autocast") or []
                if isinstance(a, dict) and a.get("enabled", True) and a.get("device_type") == "cuda"]
        return next((d for d in used if d in ("float16", "bfloat16")), None)
    if not ctx.is_gpu:
        return None
    from ...projection.model import kernel_precision
    counts = {"bf16": 0, "fp16": 0}
    for e in ctx.need_trace().device:
        precision = kernel_precision(e.name) if e.kind == "kernel" else None
        if precision in counts:
            counts[precision] += 1
    if not any(counts.values()):
        return None
    return "bfloat16" if counts["bf16"] >= counts["fp16"] else "float16"


def _for_framework(item, att):
    """A read a framework or torch makes every step for the user's call (calls.FRAMEWORK_READS, TORCH_READS),
    named with the option that turns it off (on a GPU trace: the emulated path names torch's from its records)."""
    reader = att.reader if att is not None else None
    if reader is None:
        return item
    path = reader.path.replace("\\", "/")
    known = next((v for (where, func), v in (*FRAMEWORK_READS.items(), *TORCH_READS.items())
                  if path.endswith(where) and reader.func == func), None)
    if known is None:
        return item
    anchor, counted, ms, detail = item
    return anchor, counted, ms, f"{known[0]}: {known[1]} removes it"


def _read_of_the_device(ctx: Context, att, lines: ReadLines) -> bool:
    """A read inside library code the step calls (a pooling function's `int(index.max())`) is a device sync
    when the emulated device saw the user's line that calls that function read a device value; a library's
    read of its own host tensors (an optimizer's step counters) is not, nor torch's own checks, except
    GradScaler's found-inf read, which a GPU run shows at `scaler.step(...)` every step."""
    if att is None or att.loading or not att.via or not lines:
        return False
    for where in (att.via_path or "", att.reader.path if att.reader else ""):  # through torch, or torch read
        where = where.replace("\\", "/")
        if (where.startswith("torch/") or "/torch/" in where) and not _grad_scalers(att):
            return False
    path = probe_path(lines, ctx.source.resolve(att.frame.path) or att.frame.path)
    call = f"{att.via.rsplit('.', 1)[-1]}("
    return any(call in ctx.source.line_text(path, line) for line in lines.get(path, ()))


def _user_read(att) -> bool:
    """On a CPU run, whether a host read would be a device sync on a GPU: the user's own read of a
    tensor, or torch's read on behalf of a module the user called (a mask check in
    nn.TransformerEncoder). A read inside other library code (a DataLoader sampler's `.tolist()`, an
    optimizer's step counter) is of a CPU tensor there too."""
    if att is None or att.via in _NOT_USER_READS or att.loading:  # a Dataset's items live on the host
        return False
    return att.module is not None or not att.library


# reads torch makes that the trace side reports itself (a module's on behalf of the user's call, GradScaler's
# inf check), and moves between devices torch makes because the emulated device's tensors live on the CPU
_TRACED_READERS = ("torch/nn/modules/module.py", "torch/amp/grad_scaler.py", "torch/cuda/amp/grad_scaler.py")


def torch_internal_reads(ctx: Context, covered: list[Site]) -> list[Site]:
    """Reads of a device value that torch's own functions made for the user's call in the measured steps (a
    gradient clip's non-finite check, torch.distributions' argument checks), one Site per line, at the line the
    emulated device saw call them: a CPU trace cannot tell them from torch's reads of its own host tensors (an
    optimizer's step counters), which the emulated device does not record. Lines `covered` already are left."""
    taken = {(s.path, line) for s in covered for line in s.extra.get("lines") or [s.line]}
    sites = []
    for read in ctx.probes["cuda_emulation"]["reads"]:
        inside = read.get("inside")
        by_step = in_measured_steps(ctx, read)
        kernel = read.get("kernel") is True  # an op's own read on a GPU (one_hot, bincount, unique): not traced here
        if not (isinstance(inside, dict) or kernel) or not by_step or not read.get("blocking") \
                or read.get("api") in NOT_READS:
            continue
        callee, reader = (str(inside.get("callee")), str(inside.get("reader"))) if isinstance(inside, dict) else ("", "")
        if not kernel and (not reader.startswith("torch/") or callee.startswith(_TRACED_READERS)
                           or reader.startswith(_TRACED_READERS)):
            continue
        where = read.get("site") or {}
        detail = str(read["api"]) if kernel else _read_detail(read["api"], callee, reader)
        site = site_from_probe(ctx, where, detail, emulated=True, lines=[where.get("line")])
        if site.path is None or (site.path, site.line) in taken:
            continue
        site.count, site.steps_seen = sum(by_step.values()), set(by_step)
        sites.append(site)
    return sites


def _read_detail(api: str, callee: str, reader: str) -> str:
    path, _, func = reader.rpartition(":")
    known = TORCH_READS.get((path, func))
    if known:
        return f"{known[0]}: {known[1]} removes it"
    return f"{api} inside torch's {callee.rpartition(':')[2]} ({reader})"
