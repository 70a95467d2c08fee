"""What the live-process probes record, described once: `Probes.snapshot()` writes this shape into
`result.json` and the trace (under `perfaudit.probes`), and the facts read it back through
`checked_probes`, which drops any part that does not match (a trace file is input like any other).
Imports no torch."""
from __future__ import annotations

_SITE = {"oneOf": [{"type": "null"}, {"type": "object", "required": ["path", "line"], "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "func": {"type": ["string", "null"]}}}]}
_INT = {"type": "integer", "minimum": 0}
_OPT_NUM = {"type": ["number", "null"]}
_OPT_INT = {"type": ["integer", "null"]}
_SHAPE = {"oneOf": [{"type": "null"}, {"type": "array", "maxItems": 16, "items": _INT}]}  # a tensor's sizes


def _list_of(required: dict, optional: dict | None = None) -> dict:
    return {"type": "array", "items": {"type": "object", "required": list(required),
                                       "properties": {**required, **(optional or {})}}}


PROBE_FIELDS: dict[str, dict] = {
    "optimizers": _list_of({"class": {"type": "string"}, "site": _SITE},
                           {"options": {"type": "object"}, "param_tensors": _INT, "param_numel": _INT, "param_bytes": _INT,
                            "on_emulated_device": {"type": "boolean"},
                            # the installed package whose code built it (a Trainer), else null
                            "built_in": {"type": ["string", "null"]}}),
    "dataloaders": _list_of({"site": _SITE, "num_workers": _INT, "pin_memory": {"type": "boolean"},
                             "batches_seen": _INT},
                            {"persistent_workers": {"type": "boolean"}, "prefetch_factor": _OPT_INT,
                             "window_batches": _INT, "window_batches_by_step": {"type": "object"},
                             "batch_size": _OPT_INT, "dataset_len": _OPT_INT, "batch_bytes": _INT,
                             "batch_pinned": {"type": "boolean"},
                             "worker_ms_per_batch": _OPT_NUM, "worker_wall_ms_per_batch": _OPT_NUM,
                             "worker_cpu_ms_per_batch": _OPT_NUM, "batches_on_device": {"type": "boolean"}}),
    "debug_apis": _list_of({"api": {"type": "string"}, "enabled": {"type": "boolean"}, "site": _SITE}),
    "anomaly_enabled_in_window": {"type": "boolean"},
    "memory_history_in_window": {"type": "boolean"},
    "empty_cache": _list_of({"site": _SITE, "calls": _INT, "window_calls": _INT},
                            {"by_step": {"type": "object", "additionalProperties": _INT}}),
    "bias_before_norm": _list_of({"layer": {"type": "string"}, "norm": {"type": "string"}, "site": _SITE},
                                 {"bias_params": _INT, "input_shape": _SHAPE, "weight_shape": _SHAPE,
                                  "output_shape": _SHAPE}),
    # Conv/Linear layers with a bias that ran with no BatchNorm after them, by the line that built them
    "bias_without_norm": _list_of({"layer": {"type": "string"}, "site": _SITE, "count": _INT}),
    "data_parallel": _list_of({"site": _SITE, "class": {"type": "string"}}),
    "spawned_inline": _list_of({"api": {"type": "string"}, "site": _SITE}),
    "schedulers": _list_of({"site": _SITE, "class": {"type": "string"}}),
    "user_files": {"type": "array", "items": {"type": "string"}},
    "flag_sets": _list_of({"flag": {"type": "string"}, "value": {"type": "boolean"}, "site": _SITE}),
    "sync_debug": _list_of({"path": {"type": "string"}, "line": {"type": "integer"}, "count": _INT}),
    "module_order": {"type": "array", "items": {"type": "string"}},
    "startup": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["seconds", "lines"], "properties": {
        "seconds": {"type": "number"}, "cpu_seconds": {"type": "number"}, "samples": _INT, "model_samples": _INT,
        "import_samples": _INT, "process_cpu_seconds": {"type": "number"}, "ended_by": {"type": "string"},
        "lines": _list_of({"path": {"type": "string"}, "line": {"type": "integer"}, "samples": _INT},
                          {"func": {"type": "string"}})}}]},
    "compile": {"oneOf": [{"type": "null"}, {"type": "object", "properties": {
        "compiles": _list_of({"phase": {"type": "string"}, "seconds": {"type": "number"}},
                             {"id": {"type": "string"}, "step": _OPT_INT, "trigger": {"type": ["string", "null"]}}),
        "frames": _list_of({"id": {"type": "string"}, "phase": {"type": "string"}},
                           {"func": {"type": ["string", "null"]}, "path": {"type": ["string", "null"]},
                            "line": _OPT_INT, "step": _OPT_INT, "seconds": {"type": ["number", "null"]},
                            "fail_reason": {"type": ["string", "null"]}, "fell_back": {"type": "boolean"},
                            "restart_reasons": {"type": "array", "items": {"type": "string"}},
                            "recompile_reason": {"oneOf": [{"type": "null"}, {"type": "object", "properties": {
                                "guard": {"type": "string"}, "line": {"type": "integer"}}}]},
                            "resume": _SITE}),
        "graph_breaks": _list_of({"site": _SITE}, {"reason": {"type": "string"},
                                                   "compile_id": {"type": ["string", "null"]}}),
        "limit_hits": _list_of({"message": {"type": "string"}}, {"compile_id": {"type": ["string", "null"]}}),
        "timed_by_callbacks": {"type": "boolean"}}}]},
    "ddp": _list_of({"site": _SITE, "sync_forwards": _INT, "window_sync_forwards": _INT},
                    {"nosync_forwards": _INT, "window_nosync_forwards": _INT,
                     "find_unused_parameters": {"type": "boolean"}, "gradient_as_bucket_view": {"type": "boolean"},
                     "backend": {"type": "string"}, "unused_parameter_size": _OPT_INT,
                     "param_device": {"type": ["string", "null"]}, "param_bytes": _INT, "params_without_grad": _INT}),
    "executed_lines": _list_of({"path": {"type": "string"}, "line": {"type": "integer"}, "count": _INT}),
    "environment": {"type": "object", "properties": {
        "torch": {"type": ["string", "null"]}, "cpu_count": _OPT_INT, "cuda_available": {"type": "boolean"},
        "device": {"type": "string"}, "device_name": {"type": "string"}, "capability": {"type": "string"},
        "device_memory": _INT, "cudnn_benchmark": {"type": "boolean"},
        "max_memory_allocated": _INT, "max_memory_reserved": _INT, "emulated_cuda": {"type": "boolean"}}},
    # the emulated CUDA device's records (collect/emulation/placement.py), only when the run emulated one
    "cuda_emulation": {"type": "object", "required": ["copies", "reads", "calls", "autocast"], "properties": {
        "copies": _list_of({"site": _SITE, "origin": {"enum": ["loader", "sample", "made", "host", "data", "thread"]},
                            "calls": _INT, "window_calls": _INT, "bytes": _INT},
                           {"by_step": {"type": "object"}, "window_bytes": _INT, "pinned": {"type": "boolean"},
                            "non_blocking": {"type": "boolean"}, "api": {"type": "string"}, "made_at": _SITE}),
        "reads": _list_of({"site": _SITE, "api": {"type": "string"}, "calls": _INT, "window_calls": _INT},
                          {"by_step": {"type": "object", "additionalProperties": _INT}, "blocking": {"type": "boolean"},
                           # a read a torch op's GPU kernel makes for its own use (one_hot, bincount, unique)
                           "kernel": {"type": "boolean"},
                           # the library function the user's line called, and the one that read (userframes.py)
                           "inside": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["callee", "reader"],
                                      "properties": {"callee": {"type": "string"}, "reader": {"type": "string"}}}]}}),
        "calls": _list_of({"site": _SITE, "api": {"type": "string"}, "calls": _INT, "window_calls": _INT}),
        "autocast": _list_of({"site": _SITE, "device_type": {"type": "string"}, "calls": _INT,
                              "window_calls": _INT}, {"enabled": {"type": "boolean"},
                                                      "dtype": {"type": ["string", "null"]}}),
        "params_on_device": _INT, "placements": _INT, "device_ops": _INT}},
    # the device's memory over two warm-up steps: emulated (collect/emulation/memory/device_memory.py) or measured on a
    # GPU (collect/probes/gpu_memory.py), when it was tracked
    "device_memory": {"oneOf": [{"type": "null"}, {
        "type": "object", "required": ["peak_allocated_bytes", "peak_reserved_bytes", "by_category", "top_sites"],
        "properties": {"peak_allocated_bytes": _INT, "peak_reserved_bytes": _INT, "start_bytes": _INT,
                       "allocations": _INT, "cublas_workspaces": _INT, "measured": {"type": "boolean"},
                       "device_total_bytes": _INT, "outside_pool_bytes": _INT, "history": {"type": "string"},
                       "peak_scope": {"type": "string"},
                       # the tracked steps' empty_cache() calls and the cached segments they gave back
                       "empty_cache": {"type": "object", "required": ["calls", "segments", "bytes"],
                                       "properties": {"calls": _INT, "segments": _INT, "bytes": _INT}},
                       "cudnn": {"type": "array", "items": {"type": "string"}},
                       "by_category": {"type": "object", "additionalProperties": _INT},
                       "top_sites": _list_of({"path": {"type": "string"}, "line": _INT, "bytes": _INT},
                                             {"categories": {"type": "object"}})}}]},
    # FlopCounterMode over one step after the window (collect/probes/flops.py), or why it did not count
    "flops": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["skipped"],
                                           "properties": {"skipped": {"type": ["string", "null"]}}},
                        {"type": "object", "required": ["flops", "forward_flops"], "properties": {
                            "flops": _INT, "forward_flops": _INT, "backward": {"type": "boolean"},
                            "model": {"type": "string"}, "compiled": {"type": "boolean"}, "calls": _INT,
                            "modules": _list_of({"name": {"type": "string"}, "flops": _INT})}}]},
    # perfaudit's own cost on the host (collect/probes/host_overhead.py): a loop of tiny torch calls timed bare and
    # under the profiler, in the trace's `perfaudit#calibration` range
    "host_overhead": {"type": "object", "required": ["iterations", "bare_s", "instrumented_s"], "properties": {
        "iterations": _INT, "rounds": _INT, "bare_s": {"type": ["number", "null"]},
        "instrumented_s": {"type": ["number", "null"]}, "free_us_per_mib": {"type": ["number", "null"]},
        "python_iterations": _INT, "python_bare_s": {"type": ["number", "null"]},
        "python_instrumented_s": {"type": ["number", "null"]}}},
}
OPTIONAL_FIELDS = {"cuda_emulation", "flops", "device_memory", "host_overhead", "bias_without_norm"}
SNAPSHOT_SCHEMA = {"type": "object", "required": [k for k in PROBE_FIELDS if k not in OPTIONAL_FIELDS],
                   "properties": PROBE_FIELDS}
_VALIDATORS: dict = {}


def _validator(key: str):
    """Built on first use: a trace recorded elsewhere has no probes and needs no jsonschema."""
    if not _VALIDATORS:
        import jsonschema
        _VALIDATORS.update({k: jsonschema.Draft7Validator(schema) for k, schema in PROBE_FIELDS.items()})
    return _VALIDATORS.get(key)


def checked_probes(probes) -> tuple[dict, list[str]]:
    """The parts of a probe snapshot that match their description, and the names of those that did
    not (they are left out: the rules that need them are skipped, with the reason)."""
    if not isinstance(probes, dict):
        return {}, ([] if probes is None else ["probes"])
    out, bad = {}, []
    for key, value in probes.items():
        if key not in PROBE_FIELDS:
            continue  # a newer perfaudit's field, or noise: not read by any fact
        if _validator(key).is_valid(value):
            out[key] = value
        else:
            bad.append(key)
    return out, bad

# Ranges the emulated device writes into the trace around a 16-bit matrix op it computed in float32 (a CPU without
# fast 16-bit products: collect/emulation/precision/half_math.py), named "perfaudit::half(torch.bfloat16)", and
# inside it around what a GPU would not do (the float32 copies, the op run again in backward): the projection
# counts the first's matrix ops as 16-bit and leaves the second's out.
HALF_MATH_RANGE = "perfaudit::half"
ASIDE_RANGE = "perfaudit::aside"
# An empty range the emulated device writes where the host would wait for the GPU: a read of a value on the
# device, a blocking copy back, a synchronize() (collect/emulation/placement.py). A CPU trace cannot tell such a
# read from torch's reads of its own host tensors (an optimizer's step counters): the projection counts only these.
SYNC_RANGE = "perfaudit::sync"
# A range around each replay of a CUDA graph on the emulated device (collect/emulation/opaque/graphs.py): its ops'
# kernels, launched by the host at once.
GRAPH_RANGE = "perfaudit::cuda_graph"
# An empty range the emulated device writes at each host-to-device copy a GPU would make, named with what the
# projection times it by: "perfaudit::h2d <origin> <pinned|pageable> <async|blocking> <bytes>" (origin: loader,
# sample, made, host, data, thread, as placement.py's copy records). These ranges, SYNC_RANGE's and the other
# "perfaudit::" ones are recorded as ops (a fast record function) and read as annotations (trace/parser.py).
H2D_RANGE = "perfaudit::h2d"
# torch.cuda.empty_cache() on the emulated device: where a GPU gives its free cached segments back
EMPTY_CACHE_MARK = "perfaudit::empty_cache"


def h2d_range(origin: str, pinned: bool, non_blocking: bool, nbytes: int) -> str:
    return f"{H2D_RANGE} {origin} {'pinned' if pinned else 'pageable'} {'async' if non_blocking else 'blocking'} {nbytes}"


def read_h2d_range(name: str) -> tuple[str, bool, bool, int] | None:
    """(origin, pinned, non_blocking, bytes) of an H2D_RANGE's name; None for another name or a malformed one."""
    parts = name.split(" ")
    if len(parts) != 5 or parts[0] != H2D_RANGE or not (parts[4].isascii() and parts[4].isdigit()) \
            or len(parts[4]) > 18:  # a trace from elsewhere may name anything so: bytes below 10**18
        return None
    return parts[1], parts[2] == "pinned", parts[3] == "async", int(parts[4])


# A convolution's first call with its shapes on the emulated device while torch.backends.cudnn.benchmark is on:
# where a GPU's cuDNN times its algorithms for them (collect/emulation/precision/cudnn_search.py), named
# "perfaudit::cudnn_search <backward searches, 0-2> <the convolution's FLOPs> <its bytes> <its precision>".
CUDNN_SEARCH_MARK = "perfaudit::cudnn_search"
_SEARCH_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def cudnn_search_mark(backward: int, flops: int, nbytes: int, precision: str) -> str:
    return f"{CUDNN_SEARCH_MARK} {backward} {flops} {nbytes} {precision}"


def read_cudnn_search_mark(name: str) -> tuple[int, int, int, str] | None:
    """(backward searches, FLOPs, bytes, precision) of a CUDNN_SEARCH_MARK's name; None for another name or a
    malformed one (a trace from elsewhere may name anything so)."""
    parts = name.split(" ")
    if len(parts) != 5 or parts[0] != CUDNN_SEARCH_MARK or parts[1] not in ("0", "1", "2") \
            or parts[4] not in _SEARCH_PRECISIONS:
        return None
    if not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts[2:4]):
        return None
    return int(parts[1]), int(parts[2]), int(parts[3]), parts[4]
