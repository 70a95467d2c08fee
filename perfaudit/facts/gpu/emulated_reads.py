"""The emulated CUDA device's record of the script's reads of device values (collect/emulation/placement.py),
as the sync sites (sync.py) check a CPU trace's reads against it: which user lines read a device value, with
which call, and where a read the trace shows without a Python call of its own was made."""
from __future__ import annotations

from ..emulated import emulated, in_measured_steps
from ..registry import Context

# torch's own moves to the CPU, there only because the emulated device's tensors live on the CPU
NOT_READS = (".to(cpu)", ".cpu()", ".to(cpu, non_blocking=True)")
# reads that make no Python call a trace records (`if loss:`, `x[t]`, an f-string)
_CALLLESS = {"bool(tensor)", "index(tensor)", "int(tensor)", "float(tensor)", "format(tensor)"}

ReadLines = dict[str, dict[int, set[str]]]   # file -> line -> the read calls seen there (".cpu()", ...)


def device_read_lines(ctx: Context) -> ReadLines:
    """On the emulated CUDA path, the user's lines that read a value on the device in the window, directly or
    through library code they call, with the calls that read: the emulation saw each read, wherever it was made.
    Not torch's own moves to the CPU (a gradient clip's per-device groups)."""
    if not emulated(ctx):
        return {}
    lines: ReadLines = {}
    for r in (ctx.probes.get("cuda_emulation") or {}).get("reads") or []:
        site = r.get("site") if isinstance(r, dict) and r.get("window_calls") else None
        if site and r.get("api") in NOT_READS and str((r.get("inside") or {}).get("reader")).startswith("torch/"):
            continue
        if isinstance(site, dict) and isinstance(site.get("path"), str) and isinstance(site.get("line"), int):
            path = ctx.source.resolve(site["path"]) or site["path"]
            lines.setdefault(path, {}).setdefault(site["line"], set()).add(str(r.get("api")))
    return lines


def device_read_in(ctx: Context, att, lines: ReadLines, method: str | None = None) -> bool:
    """On the emulated CUDA path, whether a read a Python call made (which the emulated device sees, in the
    user's code or a module's) was of a device value: the device saw one in the user's function that made it
    (`method`: one made by that call, `.cpu()` say; the `.numpy()` after it reads a host tensor). None seen
    there: the call read a host tensor (a GRU's `int(batch_sizes[0])` of a packed sequence, whose batch sizes
    live on the CPU on a GPU too; `.cpu()` of a host tensor), which waits for nothing on a GPU."""
    if att is None:
        return True
    path = ctx.source.resolve(att.frame.path) or att.frame.path
    seen = {line: apis for line, apis in lines.get(probe_path(lines, path), {}).items()
            if method is None or f".{method}()" in apis}
    span = ctx.source.function_lines(path, att.frame.line, att.frame.func)
    if span is None:  # the source is not here (a trace analysed away from its script): the line itself
        return att.frame.line in seen
    return any(line in span for line in seen)


def probe_path(lines: dict, path: str) -> str:
    """`path` as the probe names it: a frame named by its file alone (the profiler's Python events) too."""
    if path in lines:
        return path
    tail = "/" + path.replace("\\", "/").lstrip("./")
    return next((k for k in lines if k.replace("\\", "/").endswith(tail)), path)


def callless_reads(ctx: Context, detail: str) -> dict[tuple[str, str, str], list[int]]:
    """(display path, function, `detail`: the scalar read's) -> the lines of the user's own reads of device values
    the emulated device saw there, of the kinds the trace shows as an op with no Python call: the trace alone
    can only guess their line (a `.item()` elsewhere in the function), the run knows it."""
    out: dict[tuple[str, str, str], set[int]] = {}
    for read in ctx.probes["cuda_emulation"]["reads"]:
        where = read.get("site") or {}
        if read.get("api") in _CALLLESS and not read.get("inside") and in_measured_steps(ctx, read) \
                and where.get("path") and where.get("func") and isinstance(where.get("line"), int):
            out.setdefault((ctx.source.display_path(where["path"]), where["func"], detail), set()).add(where["line"])
    return {key: sorted(lines) for key, lines in out.items()}
