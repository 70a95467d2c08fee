"""Model FLOPs and MFU (tip T31): FLOPs counted in the live process and from the trace's shapes agree with a
GPT's closed form; on real GPU traces MFU comes with its peak and a ledger that adds up to the step; a CPU
run and an unknown GPU say why there is no MFU."""
from __future__ import annotations

import gzip
import json
import re
import runpy

import pytest

from conftest import ROOT, needs_shared, perfaudit
from perfaudit.facts.flops.counted import device_peak, peak_table
from perfaudit.facts.registry import Context, Missing
from perfaudit.trace.parser import load_trace

SHARED = ROOT / "tests" / "data" / "gpu_traces"


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
    # counted live (FlopCounterMode over one step after the window) and from the trace's op shapes
    assert mfu["flops_source"] == "counted live (FlopCounterMode, one step of the eager model)"
    assert abs(mfu["flops_per_step"] / expected - 1) < 0.05
    assert abs(mfu["flops_from_shapes"] / expected - 1) < 0.05
    assert mfu["mfu"] is None and "need a GPU run or trace" in mfu["why_no_mfu"] and mfu["achieved_tflops"] > 0
    assert "GFLOP/step (counted live" in proc.stdout and "no MFU: a CPU run" in proc.stdout
    # per module: the blocks' forward FLOPs (the nn.Sequential holding them looked through) and the head's
    cfg = runpy.run_path(str(script), run_name="tiny_gpt")["CONFIG"]
    tokens, d = cfg["batch"] * cfg["block"], cfg["dim"]
    modules = {m["name"]: m for m in mfu["modules"]}
    assert modules["Block"]["instances"] == cfg["layers"]
    assert abs(modules["Block"]["forward_flops"] / (tokens * cfg["layers"] * (24 * d * d + 4 * cfg["block"] * d)) - 1) < 0.01
    assert abs(modules["Linear"]["forward_flops"] / (tokens * 2 * d * cfg["vocab"]) - 1) < 0.01
    assert abs(sum(m["time_share_pct"] for m in mfu["modules"]) - 100) < 0.1 and modules["Block"]["forward_ms"] > 0
    assert "by module" in proc.stdout and "Block ×2" in proc.stdout
    # the op shapes with the most compute time, with the rate they reached (no peak on a CPU)
    assert mfu["worst_ops"] and all(o["achieved_tflops"] > 0 and o["share_of_peak"] is None for o in mfu["worst_ops"])
    times = [o["ms_per_step"] for o in mfu["worst_ops"]]
    assert times == sorted(times, reverse=True)


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
    # the slowest op shapes: none beats the peak, and none loses more than the kernel-efficiency bar holds
    # beside the other kernel time
    kernel_ms = sum(bars[n] for n in ("ideal at peak", "exposed communication", "precision (FP32/TF32 matrix work)",
                                      "small kernels", "kernel efficiency"))
    assert mfu["worst_ops"] and all(0 < o["share_of_peak"] <= 1 for o in mfu["worst_ops"])
    assert sum(o["lost_ms_per_step"] for o in mfu["worst_ops"]) <= kernel_ms * 1.02


def test_a_transformers_decoder_layers_carry_its_flops():
    """Qwen2-0.5B's trace (with Python stacks): the 24 decoder layers hold the forward FLOPs and time."""
    trace = load_trace(str(needs_shared(SHARED / "tracelens_h100/qwen_0.5b_inference_h100.json.gz")))
    top = Context(trace, None, ()).get("mfu")["modules"][0]
    assert (top["name"], top["instances"]) == ("Qwen2DecoderLayer", 24)
    assert top["flops_share_pct"] > 99 and top["time_share_pct"] > 95


def test_the_html_report_draws_the_ledger_as_a_waterfall_to_the_measured_step():
    """Each bar starts where the one before ended; the last ends where the measured step's bar does."""
    from perfaudit import api
    from perfaudit.engine.loader import load_rules
    from perfaudit.report import html
    report = api.analyze([str(needs_shared(SHARED / "hta/trace_diff_control_a100_rank3.json.gz"))])
    page = html.render(report, load_rules())
    svg = page.split('aria-label="MFU ledger"')[1].split("</svg>")[0]
    bars = [(float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]
    *ledger, (total_x, total_w) = bars
    assert len(ledger) >= 4 and ledger[0][0] == total_x
    assert all(abs(a[0] + a[1] - b[0]) < 0.15 or a[1] == 1.0 for a, b in zip(ledger, ledger[1:]))
    assert abs(ledger[-1][0] + ledger[-1][1] - (total_x + total_w)) < 1.5
    assert "ideal at peak" in svg and "exposed communication (COMM001)" in svg and "<script" not in page
    assert "MFU 2.9 %" in page and "aten::bmm" in page


def test_a_trace_without_shapes_or_of_an_unknown_gpu_says_why():
    no_shapes = Context(load_trace(str(needs_shared(SHARED / "hta/alexnet_a100.json.gz"))), None, ())
    with pytest.raises(Missing, match="no input shapes"):
        no_shapes.get("mfu")


def test_an_amd_gpu_is_known_by_its_architecture_and_an_unknown_gpu_still_gets_its_ledger(tmp_path):
    """A ROCm trace names every GPU "AMD Radeon Graphics": its deviceProperties (HIP's 9.0 with a 64-wide
    wavefront, 104 compute units: gfx90a, one of an MI250's two dies) say which part it is, and its peak is
    half the package's. A GPU that nothing identifies still gets the ledger's causes (idle, data, syncs,
    copies, communication, small kernels); only the ideal is left out, and the report says why."""
    path = needs_shared(SHARED / "hta/amd_mi250_minitoy_train.json.gz")
    mfu = Context(load_trace(str(path)), None, ()).get("mfu")
    assert mfu["device"] == "MI250 (one of its 2 dies, gfx90a)" and mfu["precision"] == "fp32"
    assert mfu["peak_tflops"] == pytest.approx(90.5 / 2) and mfu["mfu"] is not None
    data = json.loads(gzip.open(path).read())
    for props in data["deviceProperties"]:
        props.pop("numSms")
    unknown_gpu = tmp_path / "unknown.json"
    unknown_gpu.write_text(json.dumps(data))
    mfu = Context(load_trace(str(unknown_gpu)), None, ()).get("mfu")
    assert mfu["mfu"] is None and "'AMD Radeon Graphics' is not in perfaudit's table" in mfu["why_no_mfu"]
    assert "the ledger without its ideal" in mfu["why_no_mfu"]
    bars = {b["name"]: b["ms_per_step"] for b in mfu["ledger"]}
    assert "ideal at peak" not in bars and bars["host-bound idle"] > 0 and all(ms >= 0 for ms in bars.values())
    assert abs(sum(bars.values()) / mfu["step_ms"] - 1) < 0.02


def test_device_names_find_their_peaks_and_every_entry_has_a_source():
    assert device_peak("NVIDIA H100 80GB HBM3")["name"] == "H100 SXM"
    assert device_peak("NVIDIA H100 PCIe")["name"] == "H100 PCIe"
    assert device_peak("NVIDIA A100-SXM4-80GB")["tflops"]["bf16"] == 312
    assert device_peak("Tesla V100-SXM2-32GB")["name"] == "V100 SXM2"
    assert device_peak("AMD Instinct MI250X / MI250")["name"] == "MI250X"
    assert device_peak("NVIDIA A10G") is None and device_peak("NVIDIA GeForce RTX 2080 Ti")["name"] == "RTX 2080 Ti"
    assert all(e["source"].startswith("https://") and e["tflops"] for e in peak_table())


@pytest.mark.parametrize("name", ["gan.py", "vae.py", "transformer_mask.py", "compiled_trainer.py"])
def test_the_live_count_covers_every_outermost_call_of_a_step(name, realistic_reports):
    """A GAN's generator and critic (the critic also on the generator's output, its input's gradient
    included), a loss module called on the logits, a compiled model: counted live, each call in turn,
    they give what the recorded op shapes give, within 5 %."""
    mfu = realistic_reports[name]["run"]["mfu"]
    assert mfu["flops_source"].startswith("counted live"), mfu["flops_source"]
    assert abs(mfu["flops_per_step"] / mfu["flops_from_shapes"] - 1) < 0.05
