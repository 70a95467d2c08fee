"""Right on every GPU trace: each class of defect found on real traces from public repositories has a
test here, on a shared trace where one shows it, else on a small trace derived from a shared one
(tests/data/derive_fixtures.py says how each was made)."""
from __future__ import annotations

import json

from conftest import ROOT, TRACES, needs_shared, perfaudit
from perfaudit.facts import Context
from perfaudit.facts.gpu.kernels import architecture, is_collective, kernel_class
from perfaudit.trace import load_trace

DERIVED = ROOT / "tests" / "data" / "derived"


def _report(path) -> dict:
    proc = perfaudit("analyze", str(path), "-f", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _rules(report) -> dict[str, dict]:
    return {f["rule"]: f for f in report["findings"]}


def test_a_sync_the_device_was_idle_for_costs_nothing():
    """hta/cuda_event_sync_a100: the syncs wait on a device that has no work queued (or at the step's end):
    the idle that follows is not theirs (it was charged 10 ms "measured" per sync before)."""
    sync = _rules(_report(needs_shared(TRACES / "hta" / "cuda_event_sync_a100.json.gz")))["SYNC001"]
    assert sync["severity"] == "info" and sync["cost"]["ms_per_step"] < 0.05 and sync["cost"]["estimated"]


def test_steps_without_profilerstep_come_from_iterations_and_leave_warm_up_out():
    """5 s of cudnn autotuning in the first iteration of a trace without ProfilerStep: the steps are the
    optimizer's iterations, and the autotuning is in none of them."""
    report = _report(DERIVED / "no_profilerstep_autotune_v100.json.gz")
    assert report["run"]["step_source"] == "optimizer" and report["run"]["steps"] >= 2
    assert report["run"]["step_ms"] < 500  # the iterations of this model take ~90 ms; the autotune took 5 s
    assert "UTIL001" not in _rules(report)


def test_metadata_written_after_the_events_is_read():
    """tracelens_h100: deviceProperties come after traceEvents (a re-saved trace)."""
    for name in ("bert_small_inference_h100", "qwen_0.5b_inference_h100"):
        trace = load_trace(str(needs_shared(TRACES / "tracelens_h100" / f"{name}.json.gz")))
        assert trace.device_properties.get("name") == "NVIDIA H100 80GB HBM3"
        for fast_path in (True, False):
            assert load_trace(trace.path, fast_path=fast_path).device_properties["computeMajor"] == 9


def test_tensor_cores_are_known_from_kernel_names_without_device_properties():
    """A V100 trace stripped of deviceProperties: its volta_* kernels say it has tensor cores, so fp32
    convolutions are still reported (AMP001 was skipped before)."""
    report = _report(DERIVED / "no_device_props_v100.json.gz")
    assert "AMP001" in _rules(report)
    assert architecture("volta_sgemm_128x64_nn") == 7.0 and architecture("sm90_xmma_gemm_bf16bf16") == 9.0
    assert architecture("Cijk_Ailk_Bljk_SB_MT64x16x32") == 9.0 and architecture("void at::native::fill") is None


def test_allocator_churn_is_its_own_rule_and_not_host_bound_idle():
    report = _report(DERIVED / "alloc_churn_mi250.json.gz")
    churn = _rules(report)["MEM003"]
    assert churn["severity"] == "error" and "allocations and frees per step" in churn["message"]
    assert "hipFree under aten::empty" in churn["message"]
    assert report["run"]["gpu_breakdown_ms"]["alloc_wait"] > 0
    clean = _report(needs_shared(TRACES / "hta" / "amd_mi250_minitoy_train.json.gz"))
    assert "MEM003" not in _rules(clean)


def test_a_flood_of_tiny_kernels_is_reported_on_launch_time_and_idle():
    """The tiny kernels are under 30 % of all kernels, but launching them takes a real share of the step
    while the GPU idles: FUSE001 reports them (it looked only at the share before)."""
    flood = _rules(_report(DERIVED / "small_kernel_flood_a100.json.gz"))
    assert "FUSE001" in flood
    base = Context(load_trace(str(needs_shared(TRACES / "hta" / "nccl_data_a100_rank0.json.gz"))))
    assert base.get("gpu.small_kernels")["share_pct"] < 30


def test_collectives_of_other_libraries_are_communication():
    report = _report(DERIVED / "deepep_ampere.json.gz")
    assert "COMM001" in _rules(report)
    for name in ("void deep_ep::internode::combine<bf16>", "rcclKernel_AllReduce", "ncclDevKernel_ReduceScatter_Sum",
                 "all_to_all_kernel", "c10d::allgather_"):
        assert is_collective(name), name
    assert not is_collective("void at::native::vectorized_elementwise_kernel") and kernel_class("ncclKernel_x") is None


def test_labels_for_unnamed_and_kernel_less_gpu_traces(tmp_path):
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1, "tid": 1}]
    kernelless = tmp_path / "kernelless.json"
    kernelless.write_text(json.dumps({"traceEvents": events}))
    assert _report(kernelless)["run"]["device"] == "GPU (no GPU kernels or copies recorded)"
    unnamed = tmp_path / "unnamed.json"
    kernel = {"ph": "X", "cat": "kernel", "name": "volta_sgemm", "ts": 1, "dur": 5, "pid": 0, "tid": 7}
    unnamed.write_text(json.dumps({"deviceProperties": [{"name": ""}], "traceEvents": events + [kernel]}))
    assert _report(unnamed)["run"]["device"] == "GPU (unnamed in the trace)"


def test_inference_traces_get_no_training_advice():
    report = _report(needs_shared(TRACES / "tracelens_h100" / "owlv2_inference_h100.json.gz"))
    proc = perfaudit("analyze", str(TRACES / "tracelens_h100" / "owlv2_inference_h100.json.gz"))
    assert "inference: no backward" in proc.stdout.replace("\n", " ")
    assert not {"GRAD001", "OPT001", "OPT002", "DATA001", "DATA002"} & set(_rules(report))
