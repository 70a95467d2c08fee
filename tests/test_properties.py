"""Property-based tests: random and mutated traces and rule files never escape as a crash."""
from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perfaudit.api import analyze
from perfaudit.engine.loader import load_rule, load_rules
from perfaudit.errors import RuleError, TraceError
from perfaudit.probe_schema import read_h2d_range

RULES = load_rules()
CATS = ["cpu_op", "Operator", "cuda_runtime", "Runtime", "kernel", "Kernel", "gpu_memcpy", "gpu_memset",
        "user_annotation", "python_function", "cpu_instant_event", "ac2g", "weird"]
NAMES = ["ProfilerStep#1", "ProfilerStep#2", "aten::_local_scalar_dense", "aten::zero_", "aten::to",
         "cudaStreamSynchronize", "cudaLaunchKernel", "Memcpy HtoD (Pageable -> Device)", "[memory]",
         "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad", "enumerate(DataLoader)#x.__next__",
         "ampere_sgemm_64x64", "train.py(3): main", "<built-in method item of Tensor object at 0x1>",
         "aten::convolution", "ncclKernel_AllReduce", "aten::add_", "aten::_foreach_zero_", "aten::fill_",
         "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "perfaudit::sync",
         "perfaudit::h2d sample pageable blocking 1024", "perfaudit::h2d made pinned async 99999999999999999999",
         "perfaudit::h2d loader pinned async ²"]
scalar = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**7), st.floats(allow_nan=True),
                   st.text(max_size=5))
event = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "i", "M", "f", "B"]) | st.text(max_size=2),
    "cat": st.sampled_from(CATS) | scalar,
    "name": st.sampled_from(NAMES) | scalar,
    "pid": st.integers(0, 3) | scalar, "tid": st.integers(0, 3) | scalar,
    "ts": st.integers(0, 10_000) | scalar, "dur": st.integers(0, 5_000) | scalar,
    "args": st.dictionaries(st.sampled_from(["correlation", "bytes", "Input Dims", "Device Type",
                                             "Total Allocated", "Total Reserved", "Device Id"]),
                            scalar | st.lists(st.lists(st.integers(0, 8) | st.lists(st.integers(0, 8) | scalar, max_size=2),
                                                       max_size=3), max_size=3), max_size=4) | scalar,
})
meta = st.fixed_dictionaries({}, optional={
    "deviceProperties": st.lists(st.dictionaries(st.sampled_from(["name", "totalGlobalMem", "computeMajor"]),
                                                 scalar, max_size=3), max_size=2) | scalar,
    "distributedInfo": st.dictionaries(st.sampled_from(["rank", "world_size"]), scalar, max_size=2) | scalar,
    "perfaudit": st.dictionaries(st.sampled_from(["window", "probes", "source_roots", "outcome"]),
                                 scalar | st.dictionaries(st.text(max_size=4), scalar, max_size=2), max_size=3),
})
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _analyze_bytes(data: bytes, suffix: str = ".json", target: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t{suffix}"
        path.write_bytes(data)
        try:
            analyze([str(path)], RULES, target=target)
        except TraceError:
            pass


@SETTINGS
@given(meta, st.lists(event, max_size=40))
def test_random_traces_analyse_or_fail_cleanly(top, events):
    _analyze_bytes(json.dumps({**top, "traceEvents": events}).encode())


@SETTINGS
@given(st.lists(event, max_size=40))
def test_random_traces_project_onto_a_named_gpu_or_fail_cleanly(events):
    """Projected (`--target`): the what-ifs read op shapes, copy marks and gradient fills from the trace."""
    steps = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 2_000 * i,
              "dur": 2_000} for i in range(1, 4)]
    _analyze_bytes(json.dumps({"traceEvents": steps + events}).encode(), target="H100 SXM")


@given(st.text(max_size=60) | st.builds(lambda parts: " ".join(["perfaudit::h2d", *parts]),
                                        st.lists(st.text(max_size=24), max_size=6)))
@example("perfaudit::h2d loader pinned async ²")
@example("perfaudit::h2d made pageable blocking " + "9" * 5000)
def test_a_copy_mark_of_any_name_is_read_or_refused(name):
    """A trace from elsewhere may carry any name: an emulated copy's mark is read as its four fields or refused."""
    read = read_h2d_range(name)
    assert read is None or (isinstance(read[3], int) and 0 <= read[3] < 10**18), read


SEED = json.dumps({"deviceProperties": [{"name": "g", "totalGlobalMem": 1 << 30, "computeMajor": 8}],
                   "traceEvents": [
                       {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
                       {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
                       {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 6,
                        "dur": 5, "args": {"correlation": 3}},
                       {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "pid": 0, "tid": 7, "ts": 20, "dur": 30,
                        "args": {"correlation": 4}}]}).encode()


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.booleans(), st.integers(0, len(SEED)))
def test_mutated_traces_analyse_or_fail_cleanly(flips, compress, cut):
    data = bytearray(SEED)
    for pos, value in flips:
        data[pos] = value
    data = bytes(data[:cut]) if cut < len(SEED) // 2 else bytes(data)
    _analyze_bytes(gzip.compress(data) if compress else data, ".json.gz" if compress else ".json")


PROBE_KEYS = ["optimizers", "loaders", "device_memory", "host_overhead", "flops", "cuda_emulation", "window"]
hostile = st.recursive(scalar | st.just(1e308) | st.just(-(2 ** 70)),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(PROBE_KEYS + ["path", "line"]),
                                                                           c, max_size=3), max_leaves=10)


@SETTINGS
@given(st.sampled_from(["deviceProperties", "distributedInfo", "perfaudit", "schemaVersion"]),
       st.dictionaries(st.sampled_from(PROBE_KEYS), hostile, max_size=4), st.integers(0, 30_000),
       st.booleans(), st.booleans())
def test_hostile_trace_metadata_is_read_or_named_never_a_crash(key, probes, depth, after, gzipped):
    """Metadata a trace carries (the GPU's properties, the rank, perfaudit's own probes) is input like
    any other: wrong types, huge numbers, nesting deeper than Python's decoder takes, before or after the
    events. The trace is analysed; a part that cannot be read is left out and named in the notes."""
    value = "[" * depth + json.dumps({"probes": probes}) + "]" * depth
    events = json.dumps(json.loads(SEED)["traceEvents"])
    text = (f'{{"traceEvents": {events}, "{key}": {value}}}' if after
            else f'{{"{key}": {value}, "traceEvents": {events}}}')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.json.gz" if gzipped else "t.json")
        path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
        report = analyze([str(path)], RULES)
    assert report.traces and report.traces[0].steps >= 1
    if depth >= 20_000:
        assert any("metadata" in n and "analysed without it" in n for n in report.notes), report.notes


SYNC = yaml.safe_load((Path(__file__).resolve().parent.parent / "rules" / "SYNC001.yaml").read_text())
keys = st.sampled_from(sorted(SYNC) + ["junk"])


@SETTINGS
@given(st.dictionaries(keys, st.recursive(scalar, lambda c: st.lists(c, max_size=3)
                                          | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8),
                       max_size=6), st.booleans())
def test_random_rule_files_load_or_fail_cleanly(mutation, from_valid):
    spec = {**SYNC, **mutation} if from_valid else mutation
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "R.yaml"
        path.write_text(yaml.safe_dump(spec))
        try:
            load_rule(path)
        except RuleError:
            pass


_literal = st.one_of(st.text(max_size=12), st.integers(), st.none(), st.sampled_from(["adamw_torch", "adamw_hf"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["optim", "lr", "opt", "optim_args"]), _literal), max_size=6),
       st.booleans())
def test_a_framework_option_is_found_only_where_the_source_sets_it(pairs, as_dict):
    """A user's source read for `optim="adamw_torch"`: any keyword names and literal values, in a call or a
    config dict, give exactly the lines that set the option to a non-fused name."""
    import ast

    from perfaudit.static.uses import option_literals
    wanted = {"adamw_torch", "adamw_hf"}
    unique = list(dict(pairs).items())  # a call takes each keyword once
    if as_dict:
        lines = ["cfg = {"] + [f"    {k!r}: {v!r}," for k, v in unique] + ["}"]
    else:
        lines = ["args = TrainingArguments("] + [f"    {k}={v!r}," for k, v in unique] + [")"]
    expected = [(n, v) for n, (k, v) in enumerate(unique, 2) if k == "optim" and v in wanted]
    assert option_literals(ast.parse("\n".join(lines)), "optim", wanted) == expected


def _busy_cpu_trace(waited: list, fetch_waited: list | None = None) -> dict:
    """Four steps of a small CPU run (a batch fetched in the training process, a matmul and a relu each, Python
    between them) recorded on a busy machine: the window's per-step waits for a CPU are `waited`, of which its
    fetches' `fetch_waited`, as hostile as a file can make them."""
    events, ts = [], 1000.0
    for n in range(4):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": ts, "dur": 900.0,
                       "pid": 1, "tid": 1})
        events.append({"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter"
                       ".__next__", "ts": ts + 10, "dur": 80.0, "pid": 1, "tid": 1})
        for k, (name, dims) in enumerate((("aten::mm", [[64, 64], [64, 64]]), ("aten::relu", [[64, 64]]))):
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": ts + 100 + 300 * k, "dur": 150.0,
                           "pid": 1, "tid": 1, "args": {"Input Dims": dims, "Input type": ["float"] * len(dims)}})
        ts += 1000.0
    window = {"warmup": 0, "steps": 4, "busy_steps_measured": 4, "step_waited_ms": waited}
    if fetch_waited is not None:
        window["step_fetch_waited_ms"] = fetch_waited
    return {"traceEvents": events, "perfaudit": {"window": window}}


_HOSTILE_WAITS = st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**12, 10**12) | st.booleans(),
                          min_size=0, max_size=6)


@SETTINGS
@given(_HOSTILE_WAITS, st.none() | _HOSTILE_WAITS)
def test_hostile_waits_for_a_cpu_give_finite_figures(waited, fetch_waited):
    """The per-step waits a busy run recorded (the step's, its fetches') come back from a trace file: NaN,
    infinite, negative or huge values, of any count, leave the step time, its phases and its projection
    finite and not negative."""
    import math
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(json.dumps(_busy_cpu_trace(waited, fetch_waited)))
        report = analyze([str(path)], RULES, target="H100 SXM")
    (summary,) = report.traces
    assert summary.step_ms is not None and math.isfinite(summary.step_ms) and summary.step_ms > 0
    assert all(math.isfinite(v) and v >= 0 for v in (summary.breakdown or {}).values()), summary.breakdown
    if summary.projection:
        assert all(math.isfinite(v) and v >= 0
                   for v in (summary.projection["step_ms"], *summary.projection["idle_ms"].values()))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40 << 20), st.integers(0, 1000)), max_size=120))
def test_the_caching_allocator_replay_keeps_its_books(ops):
    """Any sequence of requests and frees: allocated is the live blocks' sizes, reserved the segments
    taken and never less than allocated, and once everything is freed each segment is one free block again."""
    from perfaudit.collect.emulation.memory.caching_allocator import CachingAllocator, round_size
    a, live, taken = CachingAllocator(), [], 0
    for is_malloc, nbytes, pick in ops:
        if is_malloc or not live:
            before = a.reserved
            live.append((a.malloc(nbytes), round_size(nbytes)))
            taken += a.reserved - before
        else:
            block, _ = live.pop(pick % len(live))
            a.free(block)
        # torch counts whole blocks: a large one keeps up to 1 MiB beyond its request rather than split it off
        assert sum(size for _, size in live) <= a.allocated == sum(b.size for b, _ in live)
        assert a.allocated <= a.peak_allocated and a.allocated <= a.reserved == taken <= a.peak_reserved
    for block, _ in live:
        a.free(block)
    assert a.allocated == 0
    free_blocks = [b for pool in a._pools.values() for _, _, b in pool]
    assert sum(b.size for b in free_blocks) == a.reserved
    assert all(b.prev is None and b.next is None for b in free_blocks)  # merged back: one block per segment



_STATEMENTS = {  # a statement of a step function -> True: it indexes with a mask; a name: with that name, a mask
    # where the function assigns it one (the first six statements)
    "mask = idx == e": False, "keep = ~done": False, "sel = (a > 0) & (b < 1)": False, "m = x.isfinite()": False,
    "y = x[mask]": "mask", "out[mask] = v": "mask", "w = weight[mask, None]": "mask", "z = x[x > 0]": True,
    "u = x[~done]": True, "s = x[keep]": "keep", "t = x[sel]": "sel", "r = x[m]": "m",
    "p = x[idx]": False, "q = x[:, 0]": False, "c = (idx == e).float().mean()": False, "n = mask.int().sum()": False,
    "nf = torch.tensor(flags, dtype=torch.bool)": False, "bm = lab.to(torch.bool)": False,
    "g = x[nf]": "nf", "h = x[bm]": "bm", "f = float(loss)": False, "if mask.any():\n    pass": False, "y = x.float()": False,
}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(_STATEMENTS)), max_size=10), st.booleans())
def test_a_sync_with_no_call_of_its_own_is_placed_at_its_mask_or_read(statements, in_loop):
    """A device read made inside an op (a boolean mask's nonzero) is placed at the lines that index with a mask,
    whether the mask is written in the index or assigned to a name first, read or written; `.float()` and
    `.int()` are casts, never the `float(t)` read a scalar sync is placed at."""
    from perfaudit.calls import NONZERO_CALLS, SCALAR_READ_CALLS
    from perfaudit.source import SourceIndex
    indent = "        " if in_loop else "    "
    body = ["def step(x, idx, e, done, a, b, weight, v, loss, out):"] + (["    for _ in range(2):"] if in_loop else [])
    lines, at = {}, len(body) + 1
    for statement in statements:
        lines[at] = statement
        body.append(indent + statement.replace("\n", "\n" + indent))
        at += statement.count("\n") + 1
    assigned = {s.split(" = ")[0] for s in statements if _STATEMENTS[s] is False and " = " in s}
    with tempfile.TemporaryDirectory() as tmp:  # a file of its own: sources are parsed once per path
        path = Path(tmp) / "train.py"
        path.write_text("\n".join(body + [indent + "pass"]) + "\n")
        source = SourceIndex((tmp,))
        masks, exact = source.locate(str(path), 1, "step", None, NONZERO_CALLS, ("mask",))
        reads, _ = source.locate(str(path), 1, "step", None, SCALAR_READ_CALLS, ("branch",))
    kind = {n: _STATEMENTS[s] for n, s in lines.items()}
    wanted = {n for n, k in kind.items() if k is True or (isinstance(k, str) and k in assigned)}
    assert ({c.line for c in masks} == wanted) if wanted else (not exact and [c.line for c in masks] == [1])
    assert not {c.line for c in reads} & {n for n, s in lines.items() if ".float()" in s or ".int()" in s}


_BUILDS = {  # how a script builds its model -> whether `model(x)` in its loop is found as that module's call
    "model = nn.Sequential(nn.Linear(4, 4))": True,
    "model = nn.Sequential(nn.Linear(4, 4)).to(device).train()": True,
    "model = make_model()": True,            # its own factory returns one
    "model = make_model().to(device)": True,
    "model = make_other()": False,           # a factory that returns something else
    "model = load(path)": False,             # a call the file does not define
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_BUILDS)), st.booleans())
def test_a_module_built_by_the_scripts_own_factory_is_found_where_it_is_called(build, wrapped):
    """A module-level training loop's forward (`loss = crit(model(x), y)`) is placed at its line when `model` was
    built as the trace's module class, directly or by a function of the file that returns one (AMP002 and other
    rules placed it at the loop's own line, not exact)."""
    from perfaudit.source import SourceIndex
    code = ["import torch.nn as nn", "def make_model():", "    return nn.Sequential(nn.Linear(4, 4))",
            "def make_other():", "    return nn.Linear(4, 4)", build]
    if wrapped:  # rebound by a wrap the emulated device leaves out on one GPU
        code.append("model = model.to(device)")
    code += ["for x, y in loader:", "    loss = crit(model(x), y)", "    loss.backward()"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.py"
        path.write_text("\n".join(code) + "\n")
        sites, exact = SourceIndex((tmp,)).locate(str(path), len(code) - 2, "<module>", "module:Sequential")
    assert exact == _BUILDS[build], (build, [s.line for s in sites])
    if exact:
        assert [s.line for s in sites] == [len(code) - 1]


_DIMS = st.recursive(st.integers(0, 8) | st.none() | st.text(max_size=2), lambda c: st.lists(c, max_size=3), max_leaves=8)


@SETTINGS
@given(_DIMS, _DIMS)
def test_gradient_fills_with_any_recorded_shapes_are_matched_or_left_alone(fill_dims, add_dims):
    """GRAD001's what-if matches each accumulation to a zeroed gradient by the shapes the trace recorded: whatever
    a trace from elsewhere holds there, the spans come back (a shape it cannot read matches none)."""
    from perfaudit.facts import Context
    from perfaudit.facts.training.grads import ACCUMULATE, fill_spans
    from perfaudit.trace.parser import load_trace
    events = [("user_annotation", "ProfilerStep#1", 0, 500, None), ("user_annotation", "Optimizer.zero_grad#SGD.zero_grad",
              10, 50, None), ("cpu_op", "aten::zero_", 20, 10, fill_dims), ("cpu_op", ACCUMULATE, 100, 30, None),
              ("cpu_op", "aten::add_", 110, 10, add_dims)]
    trace = {"traceEvents": [{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                              "args": {} if dims is None else {"Input Dims": dims}} for cat, name, ts, dur, dims in events]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(json.dumps(trace))
        spans = fill_spans(Context(load_trace(str(path), op_shapes=True), None, ()))
    assert (20, 30) in spans and len(spans) <= 2, spans


def _sweep(containers, q):
    """The stack a sweep over `containers` (sorted by start, then longest first) holds at q's start: each
    container pushed once it starts, closed ones popped from the top only (nesting.enclosing's contract)."""
    stack = []
    for e in containers:
        if e.ts > q.ts:
            break
        while stack and stack[-1].end < e.ts:
            stack.pop()
        stack.append(e)
    while stack and stack[-1].end < q.ts:
        stack.pop()
    return [e for e in stack if e is not q]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 30)), max_size=40),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 90)), max_size=20), st.booleans())
def test_the_frames_around_an_op_are_those_a_sweep_holds(frames, ops, nested):
    """Attribution's one-sweep nesting (parents, then a walk up from the last frame started) gives each op the
    frames a full sweep holds at its start, on any intervals: properly nested ones (a Python stack) or
    overlapping ones (clock rounding in a recorded trace); and every op inside one frame shares it."""
    from perfaudit.trace.frames import FrameIndex
    from perfaudit.trace.model import Event, Trace
    from perfaudit.trace.nesting import Nesting, by_thread, enclosing
    if nested:  # cut each frame to end inside the one it started in, as a call stack does
        frames = sorted(frames, key=lambda f: (f[0], f[1], -f[2]))
        cut, open_ = [], {}
        for tid, ts, dur in frames:
            parents = [p for p in open_.get(tid, []) if p[0] <= ts <= p[0] + p[1]]
            end = min([ts + dur] + [p[0] + p[1] for p in parents])
            open_[tid] = parents + [(ts, end - ts)]
            cut.append((tid, ts, end - ts))
        frames = cut
    containers = sorted((Event("python", f"/home/u/train{i % 3}.py({i}): step", ts, dur, 0, tid, {})
                         for i, (tid, ts, dur) in enumerate(frames)),
                        key=lambda e: (e.ts, -e.dur))
    queries = [Event("op", "aten::add", ts, 1, 0, tid, {}) for tid, ts in ops] + containers[::3]
    nesting = Nesting(by_thread(containers))
    for q in queries:
        expected = _sweep([e for e in containers if e.tid == q.tid], q)
        assert nesting.stack_at(q) == expected
        if nested and q.kind == "op":
            assert expected == [e for e in containers if e.tid == q.tid and e.ts <= q.ts <= e.end]
    assert {id(q): s for q, s in enclosing(containers, queries)} == {id(q): nesting.stack_at(q) for q in queries}
    index = FrameIndex(Trace("t.json", {}, python=containers))
    expected = {id(q): a for q in queries if (a := index._attribution(nesting.stack_at(q))) is not None}
    assert index.attribute_all(queries) == expected and index.attribute_all(queries[::-1]) == expected
