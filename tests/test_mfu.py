"""Model FLOPs and MFU (tip T31): FLOPs counted in the live process and from the trace's shapes agree with a
GPT's closed form; on real GPU traces MFU comes with its peak and a ledger that adds up to the step; a CPU
run and an unknown GPU say why there is no MFU."""
from __future__ import annotations

import json
import runpy

import pytest

from conftest import ROOT, needs_shared, perfaudit
from perfaudit.facts.flops import device_peak, peak_table
from perfaudit.facts.registry import Context, Missing
from perfaudit.trace.parser import load_trace

SHARED = ROOT.parent / "shared" / "traces"


def gpt_flops(batch, block, layers, dim, vocab, **_) -> float:
    """Forward: 24·d² per token and layer (QKV, projection, MLP) + 4·T·d for attention (causality not
    discounted, as torch counts) + 2·d·V for the head; backward twice the matmuls and 2.5x attention."""
    matmuls = layers * 24 * dim * dim + 2 * dim * vocab
    attention = layers * 4 * block * dim
    return batch * block * (3 * matmuls + 3.5 * attention)


def test_a_gpts_flops_per_step_match_its_closed_form_counted_live_and_from_the_trace(tmp_path):
    script = ROOT / "tests" / "scripts" / "tiny_gpt.py"
    expected = gpt_flops(**runpy.run_path(str(script), run_name="tiny_gpt")["CONFIG"])
    report = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"),
                     "-f", f"json={report}")
    assert report.exists(), proc.stderr
    mfu = json.loads(report.read_text())["mfu"]
    assert mfu["flops_source"] == "from the recorded op shapes"
    assert abs(mfu["flops_per_step"] / expected - 1) < 0.05
    assert mfu["mfu"] is None and "need a GPU run or trace" in mfu["why_no_mfu"] and mfu["achieved_tflops"] > 0
    assert "GFLOP/step (from the recorded op shapes)" in proc.stdout and "no MFU: a CPU run" in proc.stdout


SHAPED_GPU_TRACES = ["hta/trace_diff_control_a100_rank3.json.gz", "hta/trace_diff_test_v100_rank1.json.gz",
                     "hta/negative_queue_a100_rank0.json.gz", "tracelens_h100/bert_small_inference_h100.json.gz",
                     "tracelens_h100/qwen_0.5b_inference_h100.json.gz"]


@pytest.mark.parametrize("rel", SHAPED_GPU_TRACES)
def test_the_ledger_of_a_real_gpu_trace_adds_up_to_its_step(rel):
    trace = load_trace(str(needs_shared(SHARED / rel)))
    mfu = Context(trace, None, ()).get("mfu")
    assert mfu["peak_tflops"] and 0 < mfu["mfu"] < 1 and mfu["peak_source"].startswith("https://")
    bars = {b["name"]: b["ms_per_step"] for b in mfu["ledger"]}
    assert all(ms >= 0 for ms in bars.values()) and bars["ideal at peak"] > 0
    assert abs(sum(bars.values()) / mfu["step_ms"] - 1) < 0.02
    assert all(b["rule"] for b in mfu["ledger"] if b["name"] not in ("ideal at peak", "kernel efficiency"))


def test_a_trace_without_shapes_or_of_an_unknown_gpu_says_why():
    no_shapes = Context(load_trace(str(needs_shared(SHARED / "hta/alexnet_a100.json.gz"))), None, ())
    with pytest.raises(Missing, match="no input shapes"):
        no_shapes.get("mfu")
    unknown = Context(load_trace(str(needs_shared(SHARED / "hta/amd_mi250_minitoy_train.json.gz"))), None, ())
    mfu = unknown.get("mfu")
    assert mfu["mfu"] is None and "'AMD Radeon Graphics' is not in perfaudit's table" in mfu["why_no_mfu"]


def test_device_names_find_their_peaks_and_every_entry_has_a_source():
    assert device_peak("NVIDIA H100 80GB HBM3")["name"] == "H100 SXM"
    assert device_peak("NVIDIA H100 PCIe")["name"] == "H100 PCIe"
    assert device_peak("NVIDIA A100-SXM4-80GB")["tflops"]["bf16"] == 312
    assert device_peak("Tesla V100-SXM2-32GB")["name"] == "V100 SXM2"
    assert device_peak("AMD Instinct MI250X / MI250")["name"] == "MI250X"
    assert device_peak("NVIDIA A10G") is None and device_peak("NVIDIA GeForce RTX 2080 Ti") is None
    assert all(e["source"].startswith("https://") and e["tflops"] for e in peak_table())
