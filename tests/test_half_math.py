"""A CPU without fast 16-bit matrix math (AVX2: a bfloat16 GEMM 60-400x its float32 time) runs the emulated
device's autocast regions' matrix ops in float32, keeping their 16-bit types (collect/emulation/precision/
half_math.py). What it must keep: the results and gradients of the 16-bit op, the device memory a GPU holds,
the projection's 16-bit kernels; what it must cost: no more than the CPU's float32 math."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT, perfaudit, run_trace_json
from perfaudit.collect.emulation.placement import Placement
from perfaudit.collect.emulation.precision.half_math import MATRIX_FUNCTIONS, half_math_handler, half_model_handler, in_float32
from perfaudit.probe_schema import ASIDE_RANGE, HALF_MATH_RANGE
from perfaudit.projection.timeline import _groups, _Node
from perfaudit.trace.model import Event


class _NoMemory:
    memory = None


@pytest.mark.parametrize("func, shapes", [(F.linear, [(8, 32), (16, 32), (16,)]), (F.linear, [(2, 5, 32), (16, 32)]),
                                          (torch.mm, [(6, 9), (9, 4)]),
                                          (F.conv2d, [(2, 3, 8, 8), (4, 3, 3, 3), (4,)]),
                                          (torch.bmm, [(2, 5, 7), (2, 7, 3)]),
                                          (torch.einsum, ["bhqd,bhkd->bhqk", (2, 3, 5, 8), (2, 3, 6, 8)])])
def test_float32_math_gives_the_16_bit_ops_results_and_gradients(func, shapes):
    torch.manual_seed(0)
    args = [s if isinstance(s, str) else torch.randn(s, requires_grad=True) for s in shapes]
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = func(*args)
    expected.float().square().sum().backward()
    want = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    out = in_float32(func, args, {}, torch.bfloat16, _NoMemory(), {})
    assert out.dtype == torch.bfloat16 and out.shape == expected.shape
    torch.testing.assert_close(out.float(), expected.float(), rtol=0.02, atol=0.05)
    out.float().square().sum().backward()
    for t, w in zip(inputs, want):
        assert t.grad.dtype == t.dtype
        torch.testing.assert_close(t.grad, w, rtol=0.05, atol=0.2)


@pytest.mark.parametrize("func, shapes, kwargs", [
    (F.conv1d, [(2, 4, 11), (6, 4, 3), (6,)], {"stride": 2, "padding": 1}),
    (F.conv2d, [(2, 4, 9, 9), (6, 2, 3, 3), None, (2, 1), (1, 2), 2, 2], {}),
    (F.conv2d, [(4, 9, 9), (6, 4, 3, 3)], {"padding": (1, 0)}),   # unbatched, no bias
    (F.conv3d, [(1, 2, 5, 6, 7), (3, 2, 2, 3, 3), (3,)], {"padding": 1}),
    (F.conv_transpose2d, [(2, 4, 5, 5), (4, 3, 3, 3), (6,)], {"stride": 2, "output_padding": 1, "groups": 2}),
    (F.conv_transpose1d, [(2, 4, 7), (4, 5, 3), (5,)], {"dilation": 2}),
    (F.conv2d, [(2, 4, 8, 8), (6, 4, 3, 3), (6,)], {"padding": "same"})])
def test_a_convolutions_gradients_come_from_its_backward_not_the_forward_again(func, shapes, kwargs):
    """A convolution's input, weight and bias gradients in float32 from aten's convolution_backward (one call, as
    a GPU's backward makes them; the forward run again under autograd doubled a conv net's backward on a slow
    16-bit CPU), for every form: strided, padded per side, dilated, grouped, unbatched, transposed. 'same'
    padding keeps the recomputation. The same gradients as float32 autograd over the 16-bit inputs."""
    torch.manual_seed(0)
    args = [torch.randn(s).to(torch.bfloat16).requires_grad_() if isinstance(s, tuple) and len(s) > 2
            or (isinstance(s, tuple) and i == 2) else s for i, s in enumerate(shapes)]
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    wide = [a.detach().float().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    expected = func(*wide, **kwargs)
    grad = torch.randn(expected.shape).to(torch.bfloat16).float()  # the 16-bit gradient both are given
    expected.backward(grad)
    with torch.profiler.profile() as prof:
        out = in_float32(func, args, kwargs, torch.bfloat16, _NoMemory(), {})
        out.backward(grad.to(torch.bfloat16))
    names = [e.name for e in prof.events()]
    assert names.count("aten::convolution") == (2 if kwargs.get("padding") == "same" else 1), names
    torch.testing.assert_close(out.float(), expected.to(torch.bfloat16).float())
    for mine, theirs in zip(inputs, (w for w in wide if isinstance(w, torch.Tensor))):
        assert mine.grad.dtype == torch.bfloat16
        torch.testing.assert_close(mine.grad.float(), theirs.grad.to(torch.bfloat16).float(), rtol=0.02, atol=0.02)


def test_einsum_with_its_operands_in_a_list_takes_the_float32_math_too():
    """`torch.einsum(eq, [a, b])`, the older form, reaches the device's mode as one list: each operand is an input
    of its own there, cast and differentiated as in `einsum(eq, a, b)`."""
    mode = Placement()
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    mode.on_device.add(a)
    handle = half_math_handler(mode, torch.bfloat16)
    out = handle(torch.einsum, ("ij,jk->ik", [a, b]), {})
    assert out.dtype == torch.bfloat16 and mode.on_device.has(out)
    out.float().sum().backward()
    assert a.grad is not None and b.grad is not None and a.grad.dtype == torch.float32


def test_a_gradient_penalty_differentiates_through_the_float32_math():
    """WGAN-GP under autocast (the AMP recipe's gradient penalty): the input's gradient made with
    create_graph=True, its norm's gradient reaching the weights, as with the CPU's own 16-bit kernels."""
    torch.manual_seed(0)
    x = torch.randn(8, 16, requires_grad=True)
    w1, w2 = torch.randn(32, 16, requires_grad=True), torch.randn(1, 32, requires_grad=True)

    def penalty(linear):
        out = linear(torch.tanh(linear(x, w1).float()), w2)
        (g,) = torch.autograd.grad(out.float().sum(), x, create_graph=True)
        ((g.norm(2, dim=1) - 1) ** 2).mean().backward()
        grads = [w1.grad.clone(), w2.grad.clone()]
        w1.grad = w2.grad = None
        return grads

    def native(a, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(a, w)
    cache: dict = {}
    wide = penalty(lambda a, w: in_float32(F.linear, [a, w], {}, torch.bfloat16, _NoMemory(), cache))
    for got, want in zip(wide, penalty(native)):
        assert got.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=0.1, atol=0.5)


def test_a_16_bit_models_products_take_the_float32_math_and_nothing_else_does(monkeypatch):
    """A model made 16-bit (`.half()`, bfloat16 weights) runs its products in that type on a GPU, with no autocast:
    on a slow CPU they are computed in float32 and returned in the type, with the 16-bit op's gradients. Float32
    math, host tensors and types the op itself would refuse take the mode's own path (Placement.DEFAULT)."""
    monkeypatch.setenv("PERFAUDIT_HALF_MATH", "float32")
    mode = Placement()
    handle = half_model_handler(mode)
    torch.manual_seed(0)
    x = torch.randn(8, 32).half()
    w = torch.randn(16, 32).half().requires_grad_()
    b = torch.randn(16).half().requires_grad_()
    assert handle(F.linear, (x, w, b), {}) is mode.DEFAULT  # no operand on the device: a host op
    mode.on_device.add(w)
    assert handle(F.linear, (x.float(), w.float()), {}) is mode.DEFAULT  # float32 math
    assert handle(F.linear, (x, w, b.float()), {}) is mode.DEFAULT  # mixed: the script's call fails as it would
    out = handle(F.linear, (x, w, b), {})
    assert out.dtype == torch.float16 and mode.on_device.has(out) and mode.device_ops == 1
    out.float().square().sum().backward()
    got = [w.grad.clone(), b.grad.clone()]
    w.grad = b.grad = None
    F.linear(x, w, b).float().square().sum().backward()  # the CPU's own float16 kernels
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=0.01, atol=0.05)
    for mine, theirs in zip(got, [w.grad, b.grad]):
        assert mine.dtype == torch.float16
        torch.testing.assert_close(mine, theirs, rtol=0.02, atol=0.5)


def test_a_cpu_slow_at_16_bit_convolutions_alone_computes_those_in_float32(monkeypatch):
    """An AVX-512 EPYC runs float16 products at float32's speed but a float16 convolution's backward 160x slower
    (90 ms against 0.6): a float16 autocast conv net took 3.2 s a step on the emulated device, 54 ms on its CPU
    branch. The check is made per kind: products and convolutions each by their own timing."""
    from perfaudit.collect.emulation.precision import half_math
    monkeypatch.delenv("PERFAUDIT_HALF_MATH", raising=False)
    monkeypatch.setattr(half_math, "_slow", {})
    timed = []

    def best(run, args, rounds=5):  # this CPU's figures: the 16-bit convolution alone is slow
        slow = run is half_math._convolution and args[0].dtype == torch.float16
        timed.append((run, args[0].dtype))
        return 0.090 if slow else 0.0005
    monkeypatch.setattr(half_math, "_best", best)
    assert half_math.slow_half(torch.float16, F.conv2d) and half_math.slow_half(torch.float16, F.conv_transpose1d)
    assert not half_math.slow_half(torch.float16, F.linear) and not half_math.slow_half(torch.float16)
    assert not half_math.slow_half(torch.bfloat16, F.conv3d)
    assert len(timed) == 6  # each kind and type timed once, in 16 bits and in float32
    x, w = torch.randn(2, 4, 6, 6), torch.randn(4, 4, 3, 3)
    half_math._convolution(x, w)  # the convolution timed runs its backward too
    assert x.grad is None and w.grad is None  # on copies: nothing of the caller's is touched


def _op(name, ts, dur, types=None):
    return Event("op", name, ts, dur, 1, 1, {"Input type": types} if types else {})


def test_the_projection_counts_the_matrix_op_as_16_bit_and_sets_aside_the_copies():
    gemm = _Node(_op("aten::addmm", 20, 10, ["float", "float", "float"]))
    copies = _Node(_op(ASIDE_RANGE, 5, 10), [_Node(_op("aten::to", 6, 8), [_Node(_op("aten::copy_", 7, 6))])])
    cast = _Node(_op("aten::to", 1, 3), [_Node(_op("aten::copy_", 1.5, 2))])
    half = _Node(_op(f"{HALF_MATH_RANGE}(torch.bfloat16)", 0, 40), [cast, copies, gemm])
    groups = _groups(half)
    assert [g.name for g in groups] == ["aten::copy_", "aten::addmm"]  # autocast's own cast, then the GEMM
    assert groups[1].args["Input type"] == ["c10::BFloat16"] * 3
    assert _groups(gemm)[0].args["Input type"] == ["float"] * 3  # outside the range: as recorded


def _amp_run(tmp_path, how: str, script: str = "fp16_scaler_trainer.py") -> dict:
    out = tmp_path / f"{how}.json"
    proc = perfaudit("run", str(ROOT / "tests" / "realistic" / script), "--out-dir",
                     str(tmp_path / how), "-f", f"json={out}", env={"PERFAUDIT_HALF_MATH": how})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_an_amp_script_reports_the_same_whichever_math_ran(tmp_path):
    """float16 autocast with a GradScaler, emulated: computed in float32 or in the CPU's own 16-bit kernels, the
    run holds the same device memory at its peak, projects the same GPU compute, and finds the same."""
    native, wide = _amp_run(tmp_path, "native"), _amp_run(tmp_path, "float32")
    assert wide["memory"]["peak_allocated_bytes"] == native["memory"]["peak_allocated_bytes"]
    assert wide["memory"]["by_category"] == native["memory"]["by_category"]
    gpu = [r["projection"]["busy_ms"]["compute"] for r in (native, wide)]
    assert abs(gpu[1] - gpu[0]) <= 0.05 * gpu[0], gpu
    # the same findings, but for the DataLoader's: how long its workers waited for a CPU the training held
    # depends on how fast each math ran here (DATA002 info appeared where the faster math left them less time)
    found = [{f["rule"] for f in r["findings"] if f["rule"] not in ("DATA001", "DATA002")} for r in (wide, native)]
    assert found[0] == found[1] and "SYNC001" in found[0], found
    # the CPU autocast the float32 math turns off inside is perfaudit's, not a region of the script's
    regions = [{(a["device_type"], a["dtype"]) for a in
                run_trace_json(tmp_path / how / "trace.json.gz")["perfaudit"]["probes"]["cuda_emulation"]["autocast"]}
               for how in ("native", "float32")]
    assert regions[0] == regions[1] == {("cuda", "float16")}


def test_a_model_kept_in_bfloat16_reports_the_same_whichever_math_ran(tmp_path, realistic_reports):
    """A GPT fine-tuned with bfloat16 weights and no autocast (bf16_weights_lm.py), emulated: its products
    computed in float32 (the path of a CPU whose 16-bit math is slow: a float16 MLP's step was 55x its CPU
    branch's there) and as the run chose here (the CPU's own bfloat16 kernels where they are fast; float32 again
    where not), the run holds the same device memory, projects the same GPU compute, finds the same, and no rule
    calls its math FP32 (the float32 path did: AMP002)."""
    chosen, wide = realistic_reports["bf16_weights_lm.py"]["run"], _amp_run(tmp_path, "float32", "bf16_weights_lm.py")
    assert wide["memory"]["by_category"] == chosen["memory"]["by_category"]
    peaks = [r["memory"]["peak_allocated_bytes"] for r in (chosen, wide)]
    assert abs(peaks[1] - peaks[0]) <= 0.02 * peaks[0], peaks  # the allocator's blocks, split in another order
    gpu = [r["projection"]["busy_ms"]["compute"] for r in (chosen, wide)]
    assert abs(gpu[1] - gpu[0]) <= 0.05 * gpu[0], gpu
    found = [{f["rule"] for f in r["findings"]} for r in (wide, chosen)]
    assert found[0] == found[1] and not found[0] & {"AMP001", "AMP002"}, found


def _on_device(mode, *tensors):
    for t in tensors:
        mode.on_device.add(t)
    return tensors


def test_a_16_bit_attention_computes_in_float32_and_draws_its_dropout_once(monkeypatch):
    """scaled_dot_product_attention on 16-bit device tensors (a `.half()` GPT) runs a GPU's 16-bit kernel: on a slow
    CPU it is computed in float32 once, in the 16-bit type, its graph kept for backward: one dropout mask drawn,
    the generator where a GPU's one draw leaves it, the gradients those of the output the script saw."""
    monkeypatch.setenv("PERFAUDIT_HALF_MATH", "float32")
    mode, sdpa = Placement(), torch._C._nn.scaled_dot_product_attention
    torch.manual_seed(0)
    wide = [torch.randn(2, 4, 16, 8) for _ in range(3)]
    half = _on_device(mode, *(t.half().requires_grad_() for t in wide))
    torch.manual_seed(5)
    with torch.profiler.profile() as prof:
        out = mode.handlers[sdpa](sdpa, half, {"dropout_p": 0.5, "is_causal": True})
        after = torch.rand(1)  # the generator where the forward left it: backward's draw is given back
        upstream = torch.randn(out.shape)
        out.float().backward(upstream)
    assert out.dtype == torch.float16 and mode.on_device.has(out)
    # forward and backward in float32, marked for the projection as 16-bit kernels
    assert sum(e.name.startswith(HALF_MATH_RANGE) for e in prof.events()) == 2
    reference = [t.half().float().requires_grad_() for t in wide]
    torch.manual_seed(5)
    expected = sdpa(*reference, dropout_p=0.5, is_causal=True)
    assert torch.equal(after, torch.rand(1))
    expected.backward(upstream)
    torch.testing.assert_close(out.float(), expected, rtol=0.01, atol=0.01)
    for mine, theirs in zip(half, reference):
        assert mine.grad.dtype == torch.float16
        torch.testing.assert_close(mine.grad.float(), theirs.grad, rtol=0.01, atol=0.01)


def test_multihead_attentions_projections_and_attention_are_the_devices_ops(monkeypatch):
    """`F.multi_head_attention_forward` (nn.MultiheadAttention, nn.TransformerEncoderLayer) reaches the mode as one
    call: on the device its body runs under the mode, so a 16-bit model's in-projection, attention and
    out-projection each take the float32 math (a range each for the projection to count as 16-bit kernels)
    and its output is the CPU's float16 layer's."""
    monkeypatch.setenv("PERFAUDIT_HALF_MATH", "float32")
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(32, 4, batch_first=True).half()
    x = torch.randn(2, 10, 32).half()
    expected = layer(x, x, x, need_weights=False)[0]
    mode = Placement()
    mode.handlers.update(dict.fromkeys(MATRIX_FUNCTIONS, half_model_handler(mode)))  # as follow_autocast installs it
    _on_device(mode, x, *layer.parameters())
    with torch.profiler.profile() as prof, mode:
        out = layer(x, x, x, need_weights=False)[0]
        out.float().sum().backward()
    ranges = [e.name for e in prof.events() if e.name.startswith(HALF_MATH_RANGE)]
    assert len(ranges) >= 2 * 3, ranges  # forward and backward of in-projection, attention, out-projection
    assert out.dtype == torch.float16 and mode.on_device.has(out)
    torch.testing.assert_close(out, expected, rtol=0.02, atol=0.02)
    assert all(p.grad is not None and p.grad.dtype == torch.float16 for p in layer.parameters())


@pytest.mark.parametrize("kind, packed", [("LSTM", False), ("LSTM", True), ("GRU", False)])
def test_a_16_bit_recurrent_layer_computes_in_float32_once(monkeypatch, kind, packed):
    """nn.LSTM/GRU of a 16-bit model reach the mode as one call (`_VF.lstm`, its state and weights in lists): on a
    slow CPU it is computed in float32 once (its graph kept for backward: its dropout drawn once), in the 16-bit
    type, with the gradients of the float32 layer the 16-bit weights make; packed sequences too."""
    from torch.nn.utils.rnn import pack_padded_sequence

    from perfaudit.collect.emulation.precision.half_rnn import RNN_FUNCTIONS, half_rnn_handler
    monkeypatch.setenv("PERFAUDIT_HALF_MATH", "float32")
    torch.manual_seed(0)
    layer = getattr(torch.nn, kind)(16, 24, num_layers=2, batch_first=True, dropout=0.3).half()
    wide = getattr(torch.nn, kind)(16, 24, num_layers=2, batch_first=True, dropout=0.3)
    wide.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(3, 7, 16).half()

    def inputs(t):
        return pack_padded_sequence(t, [7, 5, 2], batch_first=True) if packed else t

    def out_of(result):
        out = result[0]
        return out.data if packed else out
    mode = Placement()
    mode.handlers.update(dict.fromkeys(RNN_FUNCTIONS, half_rnn_handler(mode)))
    _on_device(mode, x, *layer.parameters())
    torch.manual_seed(3)
    with torch.profiler.profile() as prof, mode:
        out = out_of(layer(inputs(x)))
        out.float().square().sum().backward()
    assert out.dtype == torch.float16 and mode.on_device.has(out)
    assert sum(e.name.startswith(HALF_MATH_RANGE) for e in prof.events()) == 2  # its forward, its backward
    # the float32 copies and the casts back are no GPU's work: set aside for the projection
    spans = {name: [e.time_range for e in prof.events() if e.name.startswith(name)] for name in (HALF_MATH_RANGE, ASIDE_RANGE)}

    def inside(event, name):
        return any(r.start <= event.time_range.start and event.time_range.end <= r.end for r in spans[name])
    def ops_above(e):
        while (e := e.cpu_parent) is not None:
            if e.name.startswith("aten::") and e.name != "aten::to":
                yield e.name
    casts = [e for e in prof.events() if e.name == "aten::_to_copy" and inside(e, HALF_MATH_RANGE)
             and not any(ops_above(e))]  # a copy of ours, not an op's own (dropout's scale)
    assert casts and all(inside(e, ASIDE_RANGE) for e in casts)
    torch.manual_seed(3)
    expected = out_of(wide(inputs(x.float())))
    expected.square().sum().backward()
    torch.testing.assert_close(out.float(), expected, rtol=0.01, atol=0.01)
    for (name, mine), theirs in zip(layer.named_parameters(), wide.parameters()):
        assert mine.grad.dtype == torch.float16, name
        torch.testing.assert_close(mine.grad.float(), theirs.grad, rtol=0.02, atol=0.05)


def test_a_recurrent_layer_in_a_slow_autocast_region_is_cast_and_computed_in_float32(monkeypatch):
    """A float32 LSTM inside a CUDA autocast region (the emulated device runs the CPU's bfloat16 region beside it,
    which casts recurrent layers): its inputs and weights cast to bfloat16 under autograd as autocast casts them,
    computed in float32 once, its output bfloat16, the float32 weights' gradients through the casts."""
    from perfaudit.collect.emulation.precision.half_rnn import RNN_FUNCTIONS, half_rnn_handler
    monkeypatch.setenv("PERFAUDIT_HALF_MATH", "float32")
    torch.manual_seed(0)
    layer = torch.nn.LSTM(8, 16, batch_first=True)
    x = torch.randn(2, 5, 8)
    mode = Placement()
    mode.handlers.update(dict.fromkeys(RNN_FUNCTIONS, half_rnn_handler(mode)))
    _on_device(mode, x, *layer.parameters())
    with torch.profiler.profile() as prof, mode:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x)[0]
        out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and mode.on_device.has(out)
    assert sum(e.name.startswith(HALF_MATH_RANGE) for e in prof.events()) == 2
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in layer.parameters())
    grads = [p.grad.clone() for p in layer.parameters()]
    for p in layer.parameters():
        p.grad = None
    # what it stands for: the layer on bfloat16 inputs and weights (oneDNN's own bfloat16 LSTM needs AVX-512),
    # its output in bfloat16
    rounded = copy.deepcopy(layer)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.bfloat16().float())
    expected = rounded(x.bfloat16().float())[0]
    expected.bfloat16().float().sum().backward()
    assert torch.equal(out, expected.bfloat16())
    for mine, theirs in zip(grads, (p.grad for p in rounded.parameters())):
        torch.testing.assert_close(mine, theirs, rtol=0.02, atol=0.02)


def test_gradients_computed_inside_a_backward_pass_are_not_a_backward_of_the_script():
    """The emulated device's float32 math for a 16-bit attention (KeptInFloat32) computes its gradients with
    torch.autograd.grad inside the script's backward. That call was taken for a backward of the script's own, a
    step boundary: on an AVX2 EPYC the window started inside a checkpointed bf16 GPT-2's backward, and its step
    failed on torch's internal assert ("Trying to exit an active record_function_fast context"). A custom
    Function's backward, run in a process with perfaudit's watch installed, and a gradient penalty beside it."""
    code = textwrap.dedent("""
        import torch
        from perfaudit.collect.window.gradient_calls import watch_gradient_calls
        calls = []
        watch_gradient_calls(torch, lambda outputs: calls.append("before"), lambda: calls.append("after"))

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                with torch.enable_grad():
                    wide = x.detach().requires_grad_()
                    return torch.autograd.grad(wide * wide, wide, grad)[0]

        x = torch.randn(4, requires_grad=True)
        Square.apply(x).sum().backward()
        assert calls == [], calls
        torch.autograd.grad(Square.apply(x).sum(), x)  # the script's own: one backward
        assert calls == ["before", "after"], calls
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_a_range_opened_before_the_profiler_starts_closes_quietly():
    """The emulated device's ranges (marks.span) around its own work: one opened while the profiler is off and
    closed once it runs (a window starting inside it) is no range, not an error in the script's step."""
    from perfaudit.collect.emulation.marks import span
    opened = span("perfaudit::aside")
    opened.__enter__()
    with torch.profiler.profile() as prof:
        opened.__exit__(None, None, None)
        with span("perfaudit::aside"):
            pass
    assert [e.name for e in prof.events()] == ["perfaudit::aside"]
