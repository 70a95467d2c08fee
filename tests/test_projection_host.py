"""The host's time in a CPU run's projection (docs/projection.md, "Host"): what the CPU spent that a GPU machine
would not (freeing the emulated device's large blocks), and what the machine did to a step rather than the
script (an interruption in one step of several alike). On small emulated-run traces written here, read by
`analyze` as a user's trace would be; the realistic scripts' runs check the same end to end
(test_realistic.py: device_built_lm's DATA001)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfaudit.api import analyze

MIB = 1 << 20
STEP_US = 10_000


def _trace(steps=4, free=None, block=32 * MIB, fetch_allocates=False, interrupted=None, per_mib=60.0, python=True):
    """An emulated run's trace: each step fetches a batch in the main process, runs an addmm that writes a
    `block`-byte output and a relu, with Python calls between. `free`: where the output is freed, µs into the
    step (None: not recorded); `fetch_allocates`: the block was the fetch's (a host batch); `interrupted`: a
    step whose 90 µs gap between the fetch and the addmm is 5 ms longer."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "perfaudit#calibration", "pid": 1, "tid": 1,
               "ts": -5000, "dur": 100}]
    t0 = -STEP_US
    for i in range(steps):
        t0 += STEP_US + (5000 if interrupted == i - 1 else 0)
        extra = 5000 if interrupted == i else 0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t0,
             "dur": STEP_US + extra},
            {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 300},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t0 + 400 + extra, "dur": 500,
             "args": {"Input Dims": [[4096], [256, 256], [256, 4096]], "Input type": ["float", "float", "float"]}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": t0 + 5000 + extra, "dur": 100,
             "args": {"Input Dims": [[256, 4096]], "Input type": ["float"]}},
        ]
        if python:
            events += [{"ph": "X", "cat": "python_function", "name": "train.py(20): log", "pid": 1, "tid": 1,
                        "ts": t0 + 1000 + extra, "dur": 200},
                       {"ph": "X", "cat": "python_function", "name": "train.py(30): forward", "pid": 1, "tid": 1,
                        "ts": t0 + 4990 + extra, "dur": 5}]
        if free is not None:
            addr = 1000 + i
            at = t0 + (100 if fetch_allocates else 600)
            events += [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                        "ts": at, "args": {"Bytes": block, "Addr": addr, "Device Type": 0, "Device Id": -1,
                                           "Total Allocated": block, "Total Reserved": 0}},
                       {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                        "ts": t0 + free, "args": {"Bytes": -block, "Addr": addr, "Device Type": 0,
                                                  "Device Id": -1, "Total Allocated": 0, "Total Reserved": 0}}]
    calibration = {"iterations": 100, "rounds": 5, "bare_s": 0.001, "instrumented_s": 0.001, "free_us_per_mib": per_mib}
    return {"perfaudit": {"probes": {"host_overhead": calibration, "environment": {"emulated_cuda": True},
                                     "cuda_emulation": {"copies": [], "reads": [], "calls": [], "autocast": []}}},
            "traceEvents": events}


def _projected(tmp_path, name, trace, target="H100 SXM"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(trace))
    report = analyze([str(path)], target=target)
    return report.traces[0].projection


def test_freeing_the_devices_large_block_between_ops_is_not_projected_onto_the_gpu(tmp_path):
    """An LM's logits freed as the step's function returns: glibc hands the 32 MiB back to the OS (3.8 ms
    here between two traced calls), a GPU's caching allocator keeps it. The projected step loses that
    stretch; without the [memory] events (a run recorded without them) it is the host's."""
    kept = _projected(tmp_path, "kept", _trace(free=None))
    freed = _projected(tmp_path, "freed", _trace(free=1205))
    assert kept["step_ms"] - freed["step_ms"] == pytest.approx(3.79, abs=0.05)


def test_a_free_is_taken_out_no_further_than_the_calibration_allows(tmp_path):
    """The stretch around a free is bounded by twice what the run measured a free of its size to cost: the
    rest of a long untraced stretch is the script's. A 2 MiB block (not handed back by glibc, and cheap
    by the calibration) barely moves the step."""
    kept = _projected(tmp_path, "kept", _trace(free=None))
    slow_free = _projected(tmp_path, "cheap", _trace(free=1205, per_mib=20.0))   # 32 MiB at 20 µs: 1.28 ms at most
    assert kept["step_ms"] - slow_free["step_ms"] == pytest.approx(1.28, abs=0.05)
    small = _projected(tmp_path, "small", _trace(free=1205, block=2 * MIB))
    assert kept["step_ms"] - small["step_ms"] == pytest.approx(0.24, abs=0.05)


def test_a_batch_the_dataloader_allocated_is_the_hosts_to_free_on_a_gpu_machine_too(tmp_path):
    kept = _projected(tmp_path, "kept", _trace(free=None))
    batch = _projected(tmp_path, "batch", _trace(free=1205, fetch_allocates=True))
    assert batch["step_ms"] == pytest.approx(kept["step_ms"], rel=1e-6)


def test_without_python_calls_a_free_costs_what_the_calibration_says(tmp_path):
    kept = _projected(tmp_path, "kept", _trace(free=None, python=False))
    freed = _projected(tmp_path, "freed", _trace(free=1205, python=False))
    assert kept["step_ms"] - freed["step_ms"] == pytest.approx(32 * 60 / 1e3, abs=0.05)


def _calibrated(trace, python_us=1.0, op_us=2.0, n=10):
    """The run's calibration: n Python calls and n ops in the torch loop's range, n calls in the Python loop's,
    timed so that a recorded call costs `python_us` and a recorded op `op_us`."""
    events = trace["traceEvents"]
    events += [{"ph": "X", "cat": "user_annotation", "name": "perfaudit#calibration:python", "pid": 1, "tid": 1,
                "ts": -3000, "dur": 100}]
    for k in range(n):
        events += [{"ph": "X", "cat": "python_function", "name": "host_overhead.py(40): _layer", "pid": 1, "tid": 1,
                    "ts": -5000 + 2 * k, "dur": 1},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": -4999 + 2 * k, "dur": 1},
                   {"ph": "X", "cat": "python_function", "name": "host_overhead.py(60): _python_step", "pid": 1,
                    "tid": 1, "ts": -3000 + 2 * k, "dur": 1}]
    trace["perfaudit"]["probes"]["host_overhead"].update(
        rounds=1, bare_s=0.0, instrumented_s=n * (python_us + op_us) / 1e6, python_bare_s=0.0,
        python_instrumented_s=n * python_us / 1e6)
    return trace


def _with_busy_fetch(trace, calls=50, ops=25):
    """Each step's fetch (300 µs) records `calls` Python calls and `ops` ops: a Dataset's __getitem__ per sample."""
    steps = [e for e in trace["traceEvents"] if e["name"].startswith("enumerate(DataLoader)")]
    for fetch in steps:
        for k in range(calls):
            trace["traceEvents"].append({"ph": "X", "cat": "python_function", "name": "train.py(12): __getitem__",
                                         "pid": 1, "tid": 1, "ts": fetch["ts"] + 1 + 5 * k, "dur": 2})
        for k in range(ops):
            trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::select", "pid": 1, "tid": 1,
                                         "ts": fetch["ts"] + 3 + 10 * k, "dur": 1})
    return trace


def test_what_recording_a_fetch_cost_comes_out_of_the_fetch_and_not_the_steps_python(tmp_path):
    """A DataLoader fetch in the training process records a call per sample and its ops: in a small model's step
    they are most of the calls. What recording them cost (here 50 × 1 µs + 25 × 2 µs) comes out of the fetch's
    time, so the projected wait for data is the fetch's own; the Python between the ops keeps its time."""
    plain = _projected(tmp_path, "plain", _calibrated(_trace()))
    busy = _projected(tmp_path, "busy", _with_busy_fetch(_calibrated(_trace())))
    assert plain["data_wait_ms"] == pytest.approx(0.3, abs=0.01)
    assert busy["data_wait_ms"] == pytest.approx(0.2, abs=0.01)
    assert busy["idle_ms"]["host"] == pytest.approx(plain["idle_ms"]["host"], abs=0.005)


def test_perfaudits_own_hooks_between_ops_are_not_the_scripts_python(tmp_path):
    """perfaudit's step hooks and probes run in the script's steps (150 µs of the 3.8 ms of Python before the relu
    are a hook here): their time is perfaudit's, not the script's, and a GPU machine without perfaudit would not
    spend it."""
    def hooked(trace):
        for step in [e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]:
            trace["traceEvents"].append({"ph": "X", "cat": "python_function", "pid": 1, "tid": 1,
                                         "name": "perfaudit/collect/window/step_hooks.py(113): zero_grad",
                                         "ts": step["ts"] + 1300, "dur": 150})
        return trace
    plain = _projected(tmp_path, "plain", _calibrated(_trace()))
    hooks = _projected(tmp_path, "hooks", hooked(_calibrated(_trace())))
    assert plain["step_ms"] - hooks["step_ms"] == pytest.approx(0.15, abs=0.005)


def _hooked(trace, hook_us=150):
    """perfaudit's step hook in each step's Python between the addmm and the relu."""
    for step in [e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]:
        trace["traceEvents"].append({"ph": "X", "cat": "python_function", "pid": 1, "tid": 1,
                                     "name": "perfaudit/collect/window/step_hooks.py(113): zero_grad",
                                     "ts": step["ts"] + 1300, "dur": hook_us})
    return trace


def _stalled(trace, step, into_us, lost_us, measured):
    """The CPU taken away for `lost_us` at `into_us` into step `step` (what ran across that point lasts longer,
    what came after starts later); `measured`: the window measured it as the step's wait for a CPU."""
    at = next(e["ts"] for e in trace["traceEvents"] if e["name"] == f"ProfilerStep#{step}") + into_us
    for e in trace["traceEvents"]:
        if e["ts"] >= at:
            e["ts"] += lost_us
        elif e["ts"] + e.get("dur", 0) > at:
            e["dur"] += lost_us
    if measured:
        steps = sum(1 for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#"))
        trace["perfaudit"]["window"] = {"step_waited_ms": [lost_us / 1e3 if n == step else 0.0 for n in range(steps)]}
    return trace


@pytest.mark.parametrize("measured", [True, False], ids=["wait measured", "no wait shows"])
def test_a_stall_inside_perfaudits_own_hook_is_taken_out_once(tmp_path, measured):
    """The scheduler (or a page reclaim) takes the CPU away while perfaudit's own step hook runs, in one step of
    five: that time is neither the script's nor perfaudit's usual cost. Whether the window measured it as a
    wait for a CPU or nothing shows it, the step projects as the others, the stall taken out once."""
    calm = _projected(tmp_path, "calm", _hooked(_calibrated(_trace(steps=5))))
    stalled = _projected(tmp_path, "stalled",
                         _stalled(_hooked(_calibrated(_trace(steps=5))), 2, 1375, 10_000, measured))
    assert stalled["step_ms"] == pytest.approx(calm["step_ms"], rel=0.02)
    assert stalled["idle_ms"]["host"] == pytest.approx(calm["idle_ms"]["host"], rel=0.03)


def test_a_wait_in_a_rarer_steps_fetch_comes_out_of_that_fetch(tmp_path):
    """An epoch's last step fetches twice (the iterator ends, a new one starts): its shape is its own. The CPU
    taken away in its first fetch, as the window measured it, comes out of that fetch, not out of the step's
    other parts in proportion: its projected wait for data is the calm run's."""
    def epoch_end(trace):
        step = next(e for e in trace["traceEvents"] if e["name"] == "ProfilerStep#3")
        trace["traceEvents"].append({"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "dur": 300,
                                     "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                                     "ts": step["ts"] + 950})
        return trace
    calm = _projected(tmp_path, "calm", epoch_end(_calibrated(_trace(steps=6))))
    waited = _projected(tmp_path, "waited",
                        _stalled(epoch_end(_calibrated(_trace(steps=6))), 3, 150, 8000, measured=True))
    assert waited["step_ms"] == pytest.approx(calm["step_ms"], rel=0.02)
    assert waited["data_wait_ms"] == pytest.approx(calm["data_wait_ms"], rel=0.05)


def test_one_interrupted_step_among_alike_ones_projects_as_the_others(tmp_path):
    """A 5 ms stall between two ops in one step of four (a hypervisor's steal, a page reclaim: no run-queue
    wait shows it) is the machine, not the script: the projection is the uninterrupted steps'."""
    calm = _projected(tmp_path, "calm", _trace())
    stalled = _projected(tmp_path, "stalled", _trace(interrupted=2))
    assert stalled["step_ms"] == pytest.approx(calm["step_ms"], rel=0.05)


_value = st.one_of(st.integers(-(1 << 62), 1 << 62), st.floats(allow_nan=True, allow_infinity=True), st.none(),
                   st.text(max_size=3), st.booleans(), st.lists(st.integers(), max_size=2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({"ts": _value, "Bytes": _value, "Addr": _value, "Device Type": _value}),
                max_size=12), _value, _value)
def test_hostile_memory_events_and_free_costs_give_a_finite_projection(tmp_path, blocks, per_mib, rounds):
    """[memory] events and the calibration are the user's file: any value, a free of what was never
    allocated, two frees of one address. The projection stays finite and non-negative, or is absent."""
    trace = _trace(free=1205)
    trace["perfaudit"]["probes"]["host_overhead"].update(free_us_per_mib=per_mib, rounds=rounds)
    trace["traceEvents"] += [{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                              "ts": b.pop("ts"), "args": b} for b in blocks]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(trace))
    try:
        report = analyze([str(path)], target="H100 SXM")
    except Exception as exc:  # noqa: BLE001 - only perfaudit's one-line errors are allowed
        from perfaudit.errors import TraceError
        assert isinstance(exc, TraceError), exc
        return
    p = report.traces[0].projection if report.traces else None
    if p is not None:
        assert math.isfinite(p["step_ms"]) and p["step_ms"] >= 0


def _half_trace(autocast_rows):
    """An emulated run whose matrix math ran in bfloat16 (a CUDA autocast region on the emulated device), its
    autocast regions as recorded."""
    trace = _trace(python=False)
    for e in trace["traceEvents"]:
        if e["name"] == "aten::addmm":
            e["args"]["Input Dims"] = [[4096], [4096, 4096], [4096, 4096]]
            e["args"]["Input type"] = ["c10::BFloat16"] * 3
    trace["perfaudit"]["probes"]["cuda_emulation"]["autocast"] = autocast_rows
    return trace


def test_a_float16_autocast_run_as_bfloat16_here_is_projected_as_float16(tmp_path):
    """The emulated device runs a float16 region in bfloat16 (a CPU's float16 math is slow); a V100 has float16
    tensor cores and no bfloat16 ones: projected as the float16 the script asked for, not as FP32."""
    def region(dtype):
        return [{"site": {"path": "train.py", "line": 30}, "device_type": "cuda", "dtype": dtype, "enabled": True,
                 "calls": 5, "window_calls": 4}]
    fp16 = _projected(tmp_path, "fp16", _half_trace(region("float16")), target="V100 PCIe")
    bf16 = _projected(tmp_path, "bf16", _half_trace(region("bfloat16")), target="V100 PCIe")
    assert fp16["step_ms"] < 0.5 * bf16["step_ms"], (fp16["step_ms"], bf16["step_ms"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.one_of(_value, st.lists(st.one_of(_value, st.fixed_dictionaries(
    {"device_type": _value, "dtype": _value, "enabled": _value, "site": st.just({"path": "train.py", "line": 3}),
     "calls": st.just(1), "window_calls": st.just(1)})), max_size=4)))
def test_hostile_autocast_rows_give_a_finite_projection(tmp_path, rows):
    trace = _half_trace(rows)
    path = tmp_path / "hostile_autocast.json"
    path.write_text(json.dumps(trace))
    p = analyze([str(path)], target="V100 PCIe").traces[0].projection
    assert p is not None and math.isfinite(p["step_ms"]) and p["step_ms"] > 0
