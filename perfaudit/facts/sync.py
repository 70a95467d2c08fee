"""Host-device synchronisation points inside the step (tip T01)."""
from __future__ import annotations

from ..trace.nesting import innermost
from .registry import Context, fact
from .sites import SiteCollector

# Ops that read a device value back to the host: they block until the GPU has caught up.
SCALAR_OPS = {"aten::_local_scalar_dense"}
NONZERO_OPS = {"aten::nonzero"}
SYNC_RUNTIME = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
}
# Calls in the user's code that produce each kind of sync, used to find the line.
SCALAR_CALLS = {"item", "float", "int", "bool", "tolist", "print", "<f-string>", "format", "str"}
NONZERO_CALLS = {"nonzero", "where", "argwhere", "masked_select", "unique", "nonzero_static"}
COPY_CALLS = {"cpu", "numpy", "to", "tolist", "item", "synchronize"}

# On a CPU run a scalar read inside library code (an optimizer's CPU step counter, autograd's anomaly
# checks) is not a device sync on a GPU; only reads the user's code makes on a tensor count.
_TENSOR_METHOD_FILES = ("torch/_tensor.py", "torch/_tensor_str.py")
_NOT_USER_READS = {"backward"}

DETAIL = {"aten::_local_scalar_dense": "scalar read (.item(), float(), print or `if` on a tensor)",
          "aten::nonzero": "nonzero / boolean-mask indexing (output size needs the device)"}


def _sync_items(ctx: Context):
    """(anchor, counted, ms, detail) for every sync point in the measured steps."""
    trace = ctx.trace
    host_ops = [e for e in trace.host if e.kind == "op"]
    items = []
    if ctx.is_gpu:
        runtime = [e for e in trace.host if e.kind == "runtime" and e.name in SYNC_RUNTIME]
        owners = innermost(host_ops, runtime)
        for rt in runtime:
            op = owners.get(id(rt))
            detail = DETAIL.get(op.name, f"{op.name} ({rt.name})") if op else f"{rt.name} called directly"
            items.append((op or rt, rt, rt.dur / 1000.0, detail))
    else:
        nested = innermost([e for e in host_ops if e.name in SCALAR_OPS | NONZERO_OPS],
                           [e for e in host_ops if e.name in SCALAR_OPS | NONZERO_OPS])
        for op in host_ops:
            if op.name in SCALAR_OPS | NONZERO_OPS and id(op) not in nested:
                items.append((op, op, op.dur / 1000.0, DETAIL[op.name]))
    return items


@fact("sync.sites", "Host-device sync points in the measured steps, grouped by the user line that "
                    "caused them; on a GPU trace ms is the host's wait in the sync runtime call.")
def sync_sites(ctx: Context):
    ctx.need_trace()
    ctx.steps
    items = _sync_items(ctx)
    calls = SCALAR_CALLS | NONZERO_CALLS | COPY_CALLS
    if not ctx.is_gpu and ctx.frames:
        attributions = ctx.frames.attribute_all([anchor for anchor, _, _, _ in items])
        items = [item for item in items if _user_read(attributions.get(id(item[0])))]
    collector = SiteCollector(ctx, fallback_calls=calls, branches=True)
    collector.add_all(items)
    return collector.result()


def _user_read(att) -> bool:
    if att is None or att.via in _NOT_USER_READS:
        return False
    return att.via_path is None or att.via_path.replace("\\", "/").endswith(_TENSOR_METHOD_FILES)
