"""A distributed job's collectives projected onto the target from a CPU run (docs/projection.md, "Collectives"):
each rank's all-reduces on the communication stream at the target's bus bandwidth, and the training thread's wait
for gloo, which a GPU's host does not make, out of the host's time. On small traces of an emulated rank written
here, read by `analyze` as a user's would be; a 2-rank emulated DDP job end to end (test_distributed.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfaudit.api import analyze
from perfaudit.projection.devices import target
from perfaudit.projection.kernels import calibration
from perfaudit.projection.transfers.collectives import bus_factor, bus_gbs, collective_timer, payload_bytes
from perfaudit.trace.model import Event

BUCKET = 5_000_000  # float32 gradients in DDP's bucket: 20 MB


def _rank_trace(steps=4, world=2, wait_us=40_000, python_in_wait=False):
    """One rank of an emulated DDP job: each step a forward addmm, a backward node whose gradient hook launches
    the bucket's all-reduce (c10d::allreduce_, gloo running it on its own thread for `wait_us`), the training
    thread idle inside backward until it is done, then the optimizer's op."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "perfaudit#calibration", "pid": 1, "tid": 1,
               "ts": -5000, "dur": 100}]
    for i in range(steps):
        t0 = i * (10_000 + wait_us)
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 10_000 + wait_us},
            {"ph": "X", "cat": "python_function", "name": "train.py(30): forward", "pid": 1, "tid": 1, "ts": t0 + 10,
             "dur": 990},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t0 + 1000, "dur": 3000,
             "args": {"Input Dims": [[2048], [64, 2048], [2048, 2048]], "Input type": ["float", "float", "float"]}},
            {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 1,
             "tid": 1, "ts": t0 + 5000, "dur": 4000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 5100, "dur": 3000,
             "args": {"Input Dims": [[2048, 64], [64, 2048]], "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": t0 + 8500, "dur": 300,
             "args": {"Input Dims": [[[BUCKET]], [], [], [], [], []],
                      "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"]}},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": t0 + 8800,
             "dur": wait_us, "args": {"Input Dims": [[BUCKET]]}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": t0 + 9000 + wait_us, "dur": 500,
             "args": {"Input Dims": [[2048, 2048], [2048, 2048]], "Input type": ["float", "float"]}},
            {"ph": "X", "cat": "python_function", "name": "train.py(40): log", "pid": 1, "tid": 1,
             "ts": t0 + 9600 + wait_us, "dur": 200},
        ]
        if python_in_wait:  # the training thread ran the script's Python there: its own work, not a wait
            events.append({"ph": "X", "cat": "python_function", "name": "train.py(35): hook", "pid": 1, "tid": 1,
                           "ts": t0 + 9100, "dur": wait_us - 200})
    calibration_record = {"iterations": 100, "rounds": 5, "bare_s": 0.001, "instrumented_s": 0.001}
    return {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": world},
            "perfaudit": {"probes": {"host_overhead": calibration_record, "environment": {"emulated_cuda": True},
                                     "cuda_emulation": {"copies": [], "reads": [], "calls": [], "autocast": []}}},
            "traceEvents": events}


def _projected(tmp_path, name, trace, target_name="H100 SXM"):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(trace))
    return analyze([str(path)], target=target_name).traces[0].projection


def test_the_wait_for_gloo_is_not_host_time_on_the_target_and_the_all_reduce_is_communication(tmp_path):
    """The training thread sat 40 ms in backward while gloo all-reduced 20 MB: on an H100 node NCCL does it in
    about 20 + 20 MB / 470 GB/s = 63 µs on its own stream, and the host runs on. Before, that wait was the host's
    Python: the step projected host-bound at over 40 ms."""
    job = _projected(tmp_path, "job", _rank_trace())
    assert job["busy_ms"]["communication"] == pytest.approx((20 + BUCKET * 4 / 470e3) / 1e3, rel=0.01)
    assert job["step_ms"] < 10, job
    assert job["idle_ms"]["host"] < 10
    longer = _projected(tmp_path, "longer", _rank_trace(wait_us=80_000))  # a slower CPU's gloo: nothing changes
    assert longer["step_ms"] == pytest.approx(job["step_ms"], rel=0.01)


def test_python_the_training_thread_ran_beside_a_collective_stays_its_own_time(tmp_path):
    """A stretch inside gloo's all-reduce where the training thread ran the script's Python is host work."""
    busy = _projected(tmp_path, "busy", _rank_trace(python_in_wait=True))
    idle = _projected(tmp_path, "idle", _rank_trace())
    assert busy["step_ms"] - idle["step_ms"] > 30


def test_a_larger_job_moves_more_of_each_bucket_and_a_gpu_without_nvlink_moves_it_slower():
    cal = calibration()
    op = Event("op", "c10d::allreduce_", 0.0, 1.0, 1, 1, {"Input Dims": [[[BUCKET]], []]})
    h100 = target("H100 SXM")
    two, eight = (collective_timer(h100, cal, n, 13.0)(op) for n in (2, 8))
    assert two is not None and eight is not None and two.stream == eight.stream == "comm"
    assert eight.gpu_us - 20 == pytest.approx((two.gpu_us - 20) * 1.75)  # 2(n-1)/n: 1 for 2 GPUs, 1.75 for 8
    assert bus_gbs(target("L4"), cal) == 20.0  # PCIe Gen 4, no NVLink
    assert bus_gbs(target("B200"), cal) == pytest.approx(900 * 0.8)  # NVLink 5, no published busbw
    assert bus_factor("gather", 4) == 0.75 and bus_factor("allreduce", 1) == 0.0
    gather = Event("op", "c10d::_allgather_base_", 0.0, 1.0, 1, 1, {"Input Dims": [[1000], [250]]})
    scatter = Event("op", "c10d::_reduce_scatter_base_", 0.0, 1.0, 1, 1, {"Input Dims": [[250], [1000]]})
    assert payload_bytes(gather, "gather", 4) == payload_bytes(scatter, "scatter", 4) == 4000  # the whole, either way
    assert collective_timer(h100, cal, 2, 13.0)(Event("op", "aten::mm", 0.0, 1.0, 1, 1, {})) is None


_DIMS = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 1 << 62), st.floats(), st.text(max_size=3)),
                     lambda inner: st.lists(inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(dims=_DIMS, ranks=st.integers(1, 1 << 16))
def test_hostile_collective_records_give_a_finite_time(dims, ranks):
    """A collective's record from a user's trace, whatever its Input Dims hold: a time, finite, never a crash."""
    op = Event("op", "c10d::allreduce_", 0.0, 1.0, 1, 1, {"Input Dims": dims})
    item = collective_timer(target("H100 SXM"), calibration(), ranks, 13.0)(op)
    assert item is not None and 0 < item.gpu_us < float("inf")


def test_accumulating_under_no_sync_keeps_one_round_of_all_reduces_per_step():
    """DDP002's what-if: four synchronised backwards a step queued four rounds of two buckets' all-reduces; under
    no_sync() only the last round stays, in its place, with its launches' host time. A communication-bound step
    saves the three rounds' time."""
    from perfaudit.projection.plans import Item, StepPlan
    from perfaudit.projection.simulate import simulate
    from perfaudit.projection.whatifs.no_sync import any_collective, one_sync_per_step

    def micro_batch(n):
        return [Item("launch", host_us=50, gpu_us=100, kernels=1, source=("fwd", n)),
                Item("launch", host_us=10, gpu_us=1000, stream="comm", kernels=1, source=("bucket", n, 0)),
                Item("launch", host_us=10, gpu_us=1000, stream="comm", kernels=1, source=("bucket", n, 1)),
                Item("join")]
    plans = [StepPlan(s, 10_000.0, [it for n in range(4) for it in micro_batch(n)] + [Item("host", host_us=20)])
             for s in range(3)]
    once = one_sync_per_step(plans, 4.0)
    kept = [it.source for it in once[0].items if it.stream == "comm"]
    assert kept == [("bucket", 3, 0), ("bucket", 3, 1)]
    assert [it.source for it in once[0].items if it.stream == "compute" and it.kind == "launch"] == \
        [("fwd", n) for n in range(4)]
    before, after = simulate(plans).step_us, simulate(once).step_us
    assert before == pytest.approx(8 * 1000 + 50 + 20, rel=0.05)  # the all-reduces back to back, joins between
    assert before - after == pytest.approx(6 * 1000, rel=0.05)
    assert one_sync_per_step(plans, 1.0) is plans
    assert sum(it.stream == "comm" for it in one_sync_per_step(plans, 2.0)[0].items) == 4  # two of four rounds
    assert any_collective(plans) and not any_collective([StepPlan(0, 1.0, [Item("host", host_us=5)])])


def test_ddp_copying_its_buckets_back_is_saved_by_views_on_real_ddp_traces():
    """DDP003's what-if on HTA's DDP traces (tests/data/gpu_traces/hta, MIT): each step the reducer copies the
    all-reduced buckets back into 161 gradients (`copy_bucket_to_grad`, a DtoD memcpy each), which
    gradient_as_bucket_view=True has no need of. A DtoD copy does not hold the host (CUDA's memcpy docs: no
    host-side synchronisation), so on the GPU-bound V100 step the saving is the copies' device time; on the
    host-bound A100 step, the host's time in those ranges."""
    from conftest import ROOT
    from perfaudit.facts import Context
    from perfaudit.facts.distributed.ddp import bucket_copy_spans
    from perfaudit.facts.gpu.projection import projector
    from perfaudit.projection.plans import item_op
    from perfaudit.trace.parser import load_trace
    saved = {}
    for name in ("ns_resolution_v100_rank0", "nccl_data_a100_rank0"):
        ctx = Context(load_trace(str(ROOT / "tests" / "data" / "gpu_traces" / "hta" / f"{name}.json.gz")), None, ())
        spans, n = bucket_copy_spans(ctx), len(ctx.steps)
        assert len(spans) == 161 * n, (name, len(spans), n)
        p = projector(ctx)
        copies = [it for plan in p.plans for it in plan.items if it.kind == "copy" and item_op(it) is not None
                  and any(s <= it.source[1].ts < e for s, e in spans)]
        assert len(copies) == 161 * len(p.plans) and not any(it.blocking for it in copies), name
        device_ms = sum(it.gpu_us for it in copies) / len(p.plans) / 1e3
        host_ms = sum(e - s for s, e in spans) / n / 1e3
        saved[name] = (p.run().projection.step_us - p.what_if("bucket_view").step_us) / 1e3, device_ms, host_ms
    saving, device_ms, _ = saved["ns_resolution_v100_rank0"]
    assert 0.9 * device_ms < saving < 1.3 * device_ms, saved
    saving, device_ms, host_ms = saved["nccl_data_a100_rank0"]
    assert 0.5 * host_ms < saving <= host_ms + device_ms, saved
