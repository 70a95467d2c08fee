"""CUDNN002's projected cost: with torch.backends.cudnn.benchmark on, a GPU's cuDNN searches its algorithms the first
time a convolution meets its shapes, tens of milliseconds of host time each. The emulated device keeps cuDNN's
cache, marks each search in the trace, and the projection prices them (calibration.yaml `cudnn_search`, from
perfaudit's H100 trace of sample_scripts/cudnn_varying_bad.py)."""
from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_projection import _projector_of
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from conftest import ROOT
from perfaudit.collect.emulation.precision.cudnn_search import BenchmarkCache, conv_work
from perfaudit.probe_schema import CUDNN_SEARCH_MARK, cudnn_search_mark, read_cudnn_search_mark


@given(st.text(max_size=80), st.integers(0, 3), st.integers(-5, 10**20), st.integers(-5, 10**20),
       st.sampled_from(["fp32", "tf32", "bf16", "fp16", "fp64", ""]))
@settings(max_examples=300, deadline=None)
def test_a_search_mark_from_any_trace_is_read_or_refused(name, backward, flops, nbytes, precision):
    """A trace recorded elsewhere may name a range anything: a mark's name is read back exactly as written, or
    refused (None), never raised on or read as a huge or negative figure."""
    for text in (name, f"{CUDNN_SEARCH_MARK} {name}", cudnn_search_mark(backward, flops, nbytes, precision)):
        read = read_cudnn_search_mark(text)
        if read is not None:
            b, f, n, p = read
            assert b in (0, 1, 2) and 0 <= f < 10**18 and 0 <= n < 10**18 and p in ("fp32", "tf32", "bf16", "fp16")
    wellformed = backward <= 2 and 0 <= flops < 10**18 and 0 <= nbytes < 10**18 and precision in ("fp32", "tf32",
                                                                                                  "bf16", "fp16")
    assert (read_cudnn_search_mark(cudnn_search_mark(backward, flops, nbytes, precision))
            == ((backward, flops, nbytes, precision) if wellformed else None))


@pytest.mark.parametrize("func,x,w,options", [
    (F.conv2d, (4, 3, 32, 32), (8, 3, 3, 3), {"padding": 1}),
    (F.conv2d, (2, 16, 31, 29), (32, 4, 5, 3), {"stride": (2, 1), "padding": (2, 0), "dilation": (1, 2), "groups": 4}),
    (F.conv2d, (2, 8, 20, 20), (8, 8, 3, 3), {"padding": "same"}),
    (F.conv2d, (8, 20, 20), (6, 8, 3, 3), {"padding": "valid"}),       # unbatched
    (F.conv1d, (3, 4, 50), (6, 4, 7), {"stride": 3}),
    (F.conv3d, (1, 2, 8, 9, 10), (4, 2, 3, 3, 3), {"padding": 1, "stride": 2}),
    (F.conv_transpose2d, (2, 8, 7, 7), (8, 4, 4, 4), {"stride": 2, "padding": 1}),
    (F.conv_transpose1d, (2, 6, 11), (6, 3, 3), {"stride": 2, "output_padding": 1, "groups": 2}),
])
def test_a_convolutions_work_is_what_torch_counts(func, x, w, options):
    """The FLOPs a search's trials are timed by, from the shapes and options alone, are what torch's own FLOP
    counter counts for the call, and the bytes hold the output torch makes."""
    inp, weight = torch.randn(x), torch.randn(w)
    with FlopCounterMode(display=False) as counter:
        out = func(inp, weight, **options)
    flops, nbytes = conv_work(x, w, options, func.__name__.startswith("conv_transpose"), 4)
    assert flops == counter.get_total_flops()
    assert nbytes == 4 * (inp.numel() + weight.numel() + out.numel())


def _searches(calls, benchmark=True) -> list[str]:
    """The marks a cache makes over `calls` ((func, args, kwargs, grad enabled)), every input on the device."""
    mode = types.SimpleNamespace(on_device=types.SimpleNamespace(has=lambda t: True))
    cache = BenchmarkCache(mode)
    handlers = {func: cache.handler(func, lambda f, a, k: f(*a, **k)) for func in {c[0] for c in calls}}
    was = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = benchmark
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for func, args, kwargs, grad in calls:
                with torch.set_grad_enabled(grad):
                    handlers[func](func, args, kwargs)
    finally:
        torch.backends.cudnn.benchmark = was
    return [e.name for e in prof.events() if e.name.startswith(CUDNN_SEARCH_MARK)]


def test_the_emulated_device_searches_once_per_shape_as_cudnn_keys_them():
    """cuDNN's cache is keyed by the input's and the weight's shapes, the type, layout and options: a call that
    repeats them finds its algorithm (no search), a new size, stride or type searches again. A search counts the
    gradients backward will search for too (the input's, where it needs one, and the weight's)."""
    weight = torch.randn(8, 3, 3, 3, requires_grad=True)
    images = [torch.randn(2, 3, s, s) for s in (16, 16, 24)]
    activation = torch.randn(2, 3, 16, 16, requires_grad=True)
    marks = _searches([
        (F.conv2d, (images[0], weight, None, 1, 1), {}, True),
        (F.conv2d, (images[1], weight, None, 1, 1), {}, True),          # the same shapes: found
        (F.conv2d, (images[2], weight, None, 1, 1), {}, True),          # a new size
        (F.conv2d, (images[0], weight, None, [2, 2], 1), {}, True),     # a new stride, as a list
        (F.conv2d, (images[0], weight, None, [2, 2], 1), {}, True),     # … found again
        (F.conv2d, (images[0].half(), weight.half(), None, 1, 1), {}, True),
        (F.conv2d, (activation, weight), {"padding": 1}, True),        # options by keyword: two gradients
        (F.conv2d, (images[0], weight), {"padding": 2}, False),        # no_grad: the forward's search only
    ])
    assert [m.split()[1] for m in marks] == ["1", "1", "1", "1", "2", "0"]
    assert [m.split()[4] for m in marks[:4]] == ["tf32" if torch.backends.cudnn.allow_tf32 else "fp32"] * 3 + ["fp16"]
    assert _searches([(F.conv2d, (images[0], weight, None, 1, 1), {}, True)], benchmark=False) == []


def test_a_cpu_run_projects_the_searches_a_gpu_makes(sample_report):
    """cudnn_varying_bad.py cycles five image sizes under cudnn.benchmark. On the H100 its first measured step met
    a size the warm-up had not (40.8 ms, the search nearly all of it) and the next ones did not (1.7-2.3 ms). A CPU
    run of it searches where the H100 did (the emulated cache), and its projection onto an H100 holds the searches
    as each step's mean over the recorded steps (a busy machine's extra steps included): within 25 % of the H100's
    steps mixed alike (the searches counted over as many steps; it projected 0.9 ms a step without them). CUDNN002,
    at the line that turned benchmark on, is ranked by them: most of the projected step. The model's constants
    come from that same H100 trace, so this checks the emulated cache and the replay, not their generality."""
    report = sample_report("cudnn_varying_bad.py")
    projector = _projector_of(Path(report["run"]["run_dir"]) / "trace.json.gz")
    names, counted = projector.inputs.searches
    assert len(names) == 1 and names[0].split()[1] == "1", names   # one new size, its weight's gradient
    h100 = sorted(s.dur / 1e3 for s in _projector_of(ROOT / "tests/data/h100_runs/traces/cudnn_varying_bad.json.gz").steps)
    usual, searched = h100[len(h100) // 2], h100[-1]
    reference = usual + (searched - usual) * len(names) / counted
    projection = report["projection"]
    assert projection["target"] == "H100 SXM"
    assert abs(projection["step_ms"] / reference - 1) <= 0.25, (projection["step_ms"], reference, counted)
    finding = next(f for f in report["findings"] if f["rule"] == "CUDNN002")
    assert finding["severity"] == "warning"
    # its saving: the searches' share of the step, as the H100's steps mixed alike hold it (a busy machine records
    # more steps, over which the one search is spread: the share falls with the count, on both sides)
    assert finding["projected_ms_per_step"] >= 0.75 * (searched - usual) * len(names) / counted, (finding, counted)
    assert finding["projected_ms_per_step"] >= 0.4 * projection["step_ms"]
    assert [loc["line"] for loc in finding["locations"]] == [5]
    assert any("benchmark cache" in note and "1 convolution call(s)" in note for note in finding["notes"])
    modelled = [[i.host_us for i in p.items if i.kind == "modelled"] for p in projector.plans]
    assert all(len(m) == 1 and m[0] == modelled[0][0] for m in modelled), modelled
    assert 35_000 <= modelled[0][0] * counted <= 45_000   # the forward's and the weight gradient's, on an H100
    assert projector.has_work("search")


def test_a_gpu_trace_holds_its_own_searches_and_gets_none_modelled():
    """A real GPU trace measured its searches (in the convolutions' host time): nothing is modelled on top, the
    identity projection keeps them (within its error of the measured step), and the what-if has no work there
    rather than a saving of 0. CUDNN002's cost there is what it measured: the two calls of the first measured step
    that took ten times their op's usual time (33.7 and 3.6 ms against 0.08 and 0.06), 7.44 ms a step of 9.68."""
    trace = ROOT / "tests/data/h100_runs/traces/cudnn_varying_bad.json.gz"
    projector = _projector_of(trace)
    assert projector.on_gpu and not projector.has_work("search")
    assert not any(i.kind == "modelled" for p in projector.plans for i in p.items)
    assert abs(projector.run().step_ms / projector.measured_ms - 1) <= 0.1
    from perfaudit.api import analyze
    finding = next(f for f in analyze([str(trace)]).findings if f.rule == "CUDNN002")
    assert finding.severity == "warning" and finding.cost.ms_per_step == pytest.approx(7.44, abs=0.01)
    assert any(note.startswith("2 convolution call(s)") for note in finding.notes), finding.notes
