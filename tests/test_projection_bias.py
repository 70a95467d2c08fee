"""BN001's projected saving: the bias kernels a GPU runs beside a convolution (an elementwise add after cuDNN's
convolution, a sum of the output's gradient in backward) and a Linear layer's bias gradient, taken off the steps
for the layers that feed a BatchNorm."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_projection import _projector_of

from conftest import TRACES, needs_shared
from perfaudit.facts import Context
from perfaudit.facts.model import ADDMM_BACKWARD, bias_fix
from perfaudit.projection import devices
from perfaudit.projection.kernels import kernel_us
from perfaudit.projection.timeline import _Node, from_shapes
from perfaudit.projection.work import BIAS, conv_bias, conv_key, work_of
from perfaudit.trace.model import Event
from perfaudit.trace.parser import WHEN_EMULATED, load_trace


def _op(name: str, dims: list, types: list | None = None, concrete: list | None = None, ts: float = 0.0) -> Event:
    args: dict = {"Input Dims": dims, "Input type": types or ["float"] * len(dims)}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return Event("op", name, ts, 10.0, 1, 1, args)


CONV = ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]
BACKWARD = ["", "", "", "[16]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]


def test_a_convolution_with_a_bias_gets_the_bias_kernel_a_gpu_runs():
    """A CPU's oneDNN convolution folds its bias in, a GPU's does not: the model adds an elementwise kernel over the
    output after each convolution with a bias (read and written) and, in backward, a sum of the output's gradient
    when the bias's gradient is wanted; none without a bias. In a CPU run's plan each is a launch of its own."""
    x, w = [8, 3, 32, 32], [16, 3, 3, 3]
    fwd = _op("aten::convolution", [x, w, [16]], concrete=CONV)
    bias = conv_bias(fwd)
    assert bias is not None and bias.name == "aten::convolution" + BIAS
    out = 8 * 16 * 30 * 30   # stride 1, no padding: 32 - 3 + 1
    assert work_of(bias).kind == "memory" and work_of(bias).bytes == 2 * out * 4 + 16 * 4
    assert conv_bias(_op("aten::convolution", [x, w, []], concrete=CONV)) is None
    half = conv_bias(_op("aten::convolution", [x, w, [16]], ["c10::BFloat16"] * 3, CONV))
    assert work_of(half).bytes == 2 * out * 2 + 16 * 2
    grad = [8, 16, 30, 30]
    wants = _op("aten::convolution_backward", [grad, x, w], concrete=BACKWARD + ["[True, True, True]"])
    assert work_of(conv_bias(wants)).bytes == out * 4
    assert conv_bias(_op("aten::convolution_backward", [grad, x, w], concrete=BACKWARD + ["[True, True, False]"])) is None
    expand = from_shapes(lambda work: 5.0, host_us_per_launch=4.0)
    assert [i.kernels for i in expand(_Node(fwd))] == [1, 1]
    assert len(expand(_Node(_op("aten::convolution", [x, w, []], concrete=CONV)))) == 1


def test_the_bias_kernels_model_against_an_a100s_measured_ones():
    """HTA's AlexNet trace on an A100 (batch 128: the grid of each add kernel holds the output's elements) runs an
    elementwise add after each of its five convolutions' cuDNN kernels. The model times each from the output's
    bytes; the measured kernels (a broadcast add, a little under the bandwidth a contiguous one reaches) are within
    25 % of it."""
    path = needs_shared(TRACES / "hta" / "alexnet_a100.json.gz")
    events = json.load(gzip.open(path))["traceEvents"]
    kernels = {e["args"].get("correlation"): e for e in events if e.get("cat") == "kernel"}
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")]
    convs = [o for o in ops if o["name"] == "aten::_convolution"]
    # AlexNet's five convolutions: input and weight sizes, stride and padding (torchvision's)
    layers = [([128, 3, 224, 224], [64, 3, 11, 11], 4, 2), ([128, 64, 27, 27], [192, 64, 5, 5], 1, 2),
              ([128, 192, 13, 13], [384, 192, 3, 3], 1, 1), ([128, 384, 13, 13], [256, 384, 3, 3], 1, 1),
              ([128, 256, 13, 13], [256, 256, 3, 3], 1, 1)]
    a100 = devices.target("A100")
    checked = 0
    for conv, (x, w, stride, pad) in zip(convs, layers * 2):
        adds = [a for a in ops if a["name"] == "aten::add_" and conv["ts"] <= a["ts"] <= conv["ts"] + conv["dur"]]
        measured = [kernels[r["args"]["correlation"]] for a in adds for r in launches
                    if a["ts"] <= r["ts"] <= a["ts"] + a["dur"] and r["args"].get("correlation") in kernels]
        assert len(measured) == 1, measured
        op = _op("aten::convolution", [x, w, [w[0]]], concrete=["", "", "", f"[{stride}, {stride}]", f"[{pad}, {pad}]",
                                                                "[1, 1]", "False", "[0, 0]", "1"])
        modelled = kernel_us(work_of(conv_bias(op)), a100)
        elements = measured[0]["args"]["grid"][0] * 256   # elementwise_kernel<128, 2>: 256 elements a block
        assert elements == work_of(conv_bias(op)).bytes // 8 - w[0] // 2, (elements, x, w)
        assert abs(measured[0]["dur"] - modelled) / measured[0]["dur"] < 0.25, (measured[0]["dur"], modelled)
        checked += 1
    assert checked == 10


def _gpu_trace(tmp_path: Path, probe: list, gpu: bool = True) -> Path:
    """A trace's ops around bias kernels: a convolution with its add_, its backward with its sum, a Linear layer's
    backward with its bias gradient's sum, and a kernel (a GPU trace; else an emulated CUDA run's, which keeps every
    op's shapes)."""
    x, w, g = [8, 3, 32, 32], [16, 3, 3, 3], [8, 16, 30, 30]

    def op(name, ts, dur, dims=None):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"Input Dims": dims or [], "Input type": ["float"] * len(dims or [])}}
    events = [op("aten::_convolution", 100, 50, [x, w, [16]]), op("aten::cudnn_convolution", 101, 30, [x, w]),
              op("aten::add_", 135, 10, [g, [1, 16, 1, 1]]),
              op("aten::convolution_backward", 300, 60, [g, x, w]), op("aten::sum", 350, 8, [g]),
              op(ADDMM_BACKWARD, 500, 40), op("aten::mm", 502, 10, [[4, 32], [32, 64]]),
              op("aten::sum", 520, 8, [[4, 32]]), op("aten::sum", 600, 8, [[4, 32]]),
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 140, "dur": 3,
               "args": {"device": 0, "stream": 7, "correlation": 1}}][:None if gpu else -1]
    path = tmp_path / "t.json"
    probes = {"bias_before_norm": probe, "environment": {"emulated_cuda": not gpu}}
    path.write_text(json.dumps({"perfaudit": {"probes": probes}, "traceEvents": events}))
    return path


def test_the_bias_ops_of_the_layers_that_feed_a_batchnorm_are_found_in_a_gpu_trace(tmp_path):
    """On a GPU trace a convolution's bias kernels are ops of their own, the `add_` in it and the `sum` in its
    backward: BN001's what-if takes those of the layers the live process saw feeding a BatchNorm, matched by their
    sizes. A Linear layer's bias gradient is a `sum` in AddmmBackward0, matched by the output's size where the trace
    kept the sums' shapes (an emulated CUDA run's; a GPU trace keeps those of matrix and convolution ops alone); a
    sum of that size elsewhere stays."""
    conv = {"layer": "Conv2d", "norm": "BatchNorm2d", "site": None, "bias_params": 16,
            "input_shape": [8, 3, 32, 32], "weight_shape": [16, 3, 3, 3], "output_shape": [8, 16, 30, 30]}
    linear = {"layer": "Linear", "norm": "BatchNorm1d", "site": None, "bias_params": 32,
              "input_shape": [4, 64], "weight_shape": [32, 64], "output_shape": [4, 32]}
    convs, spans = bias_fix(Context(load_trace(str(_gpu_trace(tmp_path, [conv, linear]))), None, ()))
    assert convs == {((8, 3, 32, 32), (16, 3, 3, 3))}
    assert spans == [(135.0, 145.0), (350.0, 358.0)], spans
    emulated = load_trace(str(_gpu_trace(tmp_path, [conv, linear], gpu=False)), op_shapes=WHEN_EMULATED)
    convs, spans = bias_fix(Context(emulated, None, ()))
    assert convs == {((8, 3, 32, 32), (16, 3, 3, 3))} and spans == [(520.0, 528.0)], spans  # convs: modelled
    other = {**conv, "input_shape": [8, 3, 64, 64]}
    assert bias_fix(Context(load_trace(str(_gpu_trace(tmp_path, [other]))), None, ()))[1] == []


def test_bn001_is_ranked_by_what_its_bias_kernels_cost_on_the_target(sample_report):
    """BN001 had no cost anywhere (a CPU's convolution folds its bias in). On the emulated CUDA path it is now
    projected: bias_bn_bad.py's two convolutions feed BatchNorms, and each step on a GPU runs four bias kernels for
    them (two adds, two gradient sums), each a launch; the replay without them saves their launches and kernels."""
    report = sample_report("bias_bn_bad.py")
    bn = next(f for f in report["findings"] if f["rule"] == "BN001")
    projector = _projector_of(Path(report["run"]["run_dir"]) / "trace.json.gz")
    for plan in projector.plans:
        assert sum(1 for i in plan.items if i.kind == "launch" and getattr(i.source, "name", "").endswith(BIAS)) == 4
    host_us = projector.cal["host_us_per_kernel"]
    assert 2 * host_us / 1e3 < bn["projected_ms_per_step"] < 6 * host_us / 1e3, (bn, host_us)
    assert all(f["rule"] != "BN001" for f in sample_report("bias_bn_good.py")["findings"])


_VALUES = st.one_of(st.none(), st.integers(-3, 1 << 41), st.text(max_size=4), st.booleans(),
                    st.lists(st.integers(-2, 64), max_size=5))
_DIMS = st.lists(st.one_of(_VALUES, st.lists(_VALUES, max_size=5)), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["aten::convolution", "aten::convolution_backward", "aten::_convolution", "aten::sum"]),
       dims=_DIMS, types=st.lists(st.one_of(st.none(), st.sampled_from(["float", "c10::Half", "Tensor", ""])),
                                  max_size=4),
       concrete=st.one_of(st.none(), st.lists(st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=12)))
def test_hostile_shapes_in_a_trace_give_a_bias_kernel_or_none_never_an_error(name, dims, types, concrete):
    """A trace from elsewhere may hold anything in an op's recorded shapes: the bias model and the layer matching
    read them without raising, and a bias kernel they model moves no negative bytes."""
    args: dict = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    op = Event("op", name, 0.0, 1.0, 1, 1, args)
    bias = conv_bias(op)
    if bias is not None:
        assert work_of(bias).bytes >= 0
        conv_key(bias)
    key = conv_key(op)
    assert key is None or all(type(n) is int for part in key for n in part)
    hash(key)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(dims=_DIMS)
def test_hostile_shapes_of_a_bias_gradient_sum_are_matched_or_passed_over(tmp_path, dims):
    linear = {"layer": "Linear", "norm": "BatchNorm1d", "site": None, "bias_params": 32,
              "input_shape": [4, 64], "weight_shape": [32, 64], "output_shape": [4, 32]}
    path = _gpu_trace(tmp_path, [linear], gpu=False)
    data = json.loads(path.read_text())
    for e in data["traceEvents"]:
        if e["name"] == "aten::sum":
            e["args"]["Input Dims"] = dims
    path.write_text(json.dumps(data))
    convs, spans = bias_fix(Context(load_trace(str(path), op_shapes=WHEN_EMULATED), None, ()))
    assert convs == set() and len(spans) <= 1
