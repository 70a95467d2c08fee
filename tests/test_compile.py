"""torch.compile audited (tips T25, T26): graph breaks and recompilations at the user's line, with what
they cost, compile time kept apart from step time, and nothing changed for uncompiled scripts. The
samples use the aot_eager backend to stay fast; compile_good.py runs the default inductor backend."""
from __future__ import annotations

import json
import textwrap

import jsonschema
import pytest

from conftest import needs_cxx, perfaudit
from perfaudit.collect.probes.compile import CompileProbe, _guard
from perfaudit.probe_schema import SNAPSHOT_SCHEMA
from perfaudit.trace import load_trace


def _rule(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == rule]


def test_graph_break_is_reported_at_its_line_with_reason_and_cost(sample_report):
    report = sample_report("compile_break_bad.py")
    [finding] = _rule(report, "COMPILE001")
    assert [loc["line"] for loc in finding["locations"]] == [18]
    assert "Tensor.item()" in finding["locations"][0]["detail"]
    assert finding["locations"][0]["count_per_step"] == 1.0  # resumed after the break once a step
    assert finding["cost"]["ms_per_step"] > 0 and finding["cost"]["estimated"]
    assert any("capture_scalar_outputs" in n for n in finding["notes"])
    compiled = report["run"]["compile"]
    assert compiled["before_s"] > 0 and compiled["window_s"] == 0 and compiled["frames"] == 2


def test_recompiling_every_step_names_the_guard_its_line_and_the_fall_back_to_eager(sample_report):
    report = sample_report("compile_recompile_bad.py")
    [finding] = _rule(report, "COMPILE002")
    assert finding["severity"] == "error"
    assert [loc["line"] for loc in finding["locations"]] == [28]
    assert "G['global_step']" in finding["message"]
    assert "recompile limit" in finding["message"] and "eagerly" in finding["message"]
    assert finding["cost"]["ms_per_step"] is None  # it fell back before the window: nothing compiled there


def test_clean_compiled_model_reports_neither_and_shows_compile_time_apart(sample_report, run_dir):
    """The default backend (inductor, C++ on this CPU) end to end."""
    needs_cxx()
    report = sample_report("compile_good.py")
    assert not [f for f in report["findings"] if f["rule"].startswith("COMPILE")]
    compiled = report["run"]["compile"]
    assert compiled["before_s"] > 0 and compiled["window_s"] == 0
    assert report["run"]["steps"] == 3
    # its FLOPs counted live on the eager module it wraps: the MLP's three layers on a batch of 128, forward
    # and backward (no gradient for the input: the first layer's input-gradient matmul is not run)
    forward = 2 * 128 * (64 * 128 + 128 * 128 + 128 * 10)
    expected = 3 * forward - 2 * 128 * 64 * 128
    assert "compiled one wraps" in report["mfu"]["flops_source"]
    assert abs(report["mfu"]["flops_per_step"] / expected - 1) < 0.05
    shown = perfaudit("analyze", f"{run_dir}/compile_good/trace.json.gz")
    assert "compiling before the window" in shown.stdout and "0.00 s inside it" in shown.stdout


def test_fuse_and_util_say_whether_torch_compile_is_the_fix(trace_report):
    """On a GPU trace with no compiled region, the rules that torch.compile answers say it is the fix."""
    report = trace_report("tests/data/gpu_traces/hta/negative_queue_a100_rank0.json.gz")
    [fuse] = _rule(report, "FUSE001")
    assert any("Nothing in the measured steps ran compiled code" in n for n in fuse["notes"])


def test_html_report_shows_compile_time_apart(run_dir, sample_report, tmp_path):
    sample_report("compile_break_bad.py")
    out = tmp_path / "r.html"
    perfaudit("analyze", f"{run_dir}/compile_break_bad/trace.json.gz", "-f", f"html={out}")
    assert "compiling before the window" in out.read_text()


def test_compile_probe_snapshot_matches_its_description(sample_report, run_dir):
    needs_cxx()  # compile_good.py: inductor
    for name in ("compile_break_bad", "compile_recompile_bad", "compile_good"):
        sample_report(f"{name}.py")
        probes = load_trace(f"{run_dir}/{name}/trace.json.gz").probes["probes"]
        jsonschema.validate(probes, SNAPSHOT_SCHEMA)
        assert probes["compile"]["frames"]


def test_uncompiled_scripts_carry_no_compile_record(sample_report, run_dir):
    report = sample_report("clean_loop.py")
    assert report["run"]["compile"] is None
    probes = load_trace(f"{run_dir}/clean_loop/trace.json.gz").probes
    assert probes["probes"]["compile"] is None and probes["window"]["compile_warmup"] == 0


def _run(tmp_path, source: str, *extra) -> dict:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "report.json"
    proc = perfaudit("run", str(script), "--warmup", "2", "--steps", "3", "--out-dir", str(tmp_path / "run"),
                     "-f", f"json={out}", *extra)
    assert out.exists(), proc.stderr
    return json.loads(out.read_text())


def test_a_late_recompile_extends_warm_up_so_the_window_measures_no_compiling(tmp_path):
    """The batch grows once at step 4: dynamo recompiles (then the dimension is dynamic); warm-up goes on
    until two steps pass without a compile, so the window's step time holds no compile time."""
    report = _run(tmp_path, """
        import torch
        from torch import nn
        model = torch.compile(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)), backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(1000):
            batch = 16 if step < 3 else 24
            loss = model(torch.randn(batch, 32)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
    """)
    compiled = report["run"]["compile"]
    assert compiled["recompiles"] == 1 and compiled["warmup_added"] > 0 and compiled["window_s"] == 0
    assert not _rule(report, "COMPILE002")  # one recompile that settles is how dynamic shapes work


def test_recompiles_inside_the_window_are_timed(tmp_path):
    """With the recompile limit raised, a guard failing every step keeps recompiling through the window:
    warm-up stops waiting (bounded) and the compile seconds in the window are the finding's cost. Projected
    onto a GPU, compiling is the host's work there too: the fix saves it from the projected step."""
    report = _run(tmp_path, """
        import torch
        from torch import nn
        import torch._dynamo
        torch._dynamo.config.recompile_limit = 1000
        model = nn.Linear(16, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scale = 1

        @torch.compile(backend="eager")
        def loss_fn(out):
            return out.pow(2).mean() * scale

        for scale in range(1, 1000):
            loss = loss_fn(model(torch.randn(8, 16)))
            opt.zero_grad(); loss.backward(); opt.step()
    """, "--target", "H100")
    [finding] = _rule(report, "COMPILE002")
    assert "in the measured window" in finding["message"] and "G['scale']" in finding["message"]
    assert finding["cost"]["ms_per_step"] > 0
    assert report["run"]["compile"]["window_s"] > 0
    step = report["projection"]["step_ms"]
    assert 0.5 * step < finding["projected_ms_per_step"] < step, (finding["projected_ms_per_step"], step)


def test_graph_break_log_lines_of_old_and_new_torch_are_read():
    probe = CompileProbe()
    probe._break_logged("Graph break in user code at /home/u/train.py:31\nGraph Break Reason: Encountered graph "
                        "break when attempting to trace CALL: a function call, e.g. f(x, y):\n\nFailed to trace "
                        "builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator "
                        "`print`\n\nUser code traceback:\n  File \"/home/u/train.py\", line 31, in helper\n")
    probe._break_logged("Graph break: call_method TensorVariable() item [] {} from user code at:\n"
                        "  File \"/home/u/model.py\", line 12, in forward\n    if x.sum().item() > 0:\n")
    sites = sorted((b["site"]["path"], b["site"]["line"], b["site"]["func"], b["reason"]) for b in probe.breaks.values())
    assert sites == [("/home/u/model.py", 12, "forward", "call_method TensorVariable() item [] {}"),
                     ("/home/u/train.py", 31, "helper", "Failed to trace builtin operator: Dynamo does not know "
                                                        "how to trace builtin operator `print`")]


def test_recompile_guard_and_its_line_are_read():
    guard = _guard("0/7: G['global_step'] == 7    # beta = min(1.0, global_step / KL_WARMUP)  "
                   "# mples/train.py:28 in vae_loss\nUser stack trace: ...")
    assert guard["guard"] == "G['global_step'] == 7" and guard["line"] == 28 and guard["path_tail"] == "mples/train.py"


def test_reduce_overhead_runs_the_cuda_path_on_the_emulated_device(tmp_path):
    """`torch.compile(model, mode="reduce-overhead")`, the docs' way to cut launch overhead with CUDA graphs: inductor
    asks a CUDA build's allocator whether it caches (`torch._C._cuda_cudaCachingAllocator_is_enabled`, which a CPU
    build lacks) and the emulated run failed there, leaving the CPU branch to be audited. It runs the CUDA path now
    (its CPU graphs stay out of CUDA graphs, as inductor keeps any CPU graph), and the report knows it replays
    CUDA graphs on a GPU."""
    needs_cxx()
    report = _run(tmp_path, """
        import os
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.path.dirname(__file__), "inductor")  # not reused
        import torch
        from torch import nn
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).to(device)
        fast = torch.compile(model, mode="reduce-overhead")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(1000):
            x, y = torch.randn(16, 32, device=device), torch.randint(0, 4, (16,), device=device)
            loss = nn.functional.cross_entropy(fast(x), y)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    """)
    assert report["run"]["device"] == "cpu, CUDA path emulated", report["notes"]
    assert report["run"]["steps"] >= 3 and not any("could not serve" in n for n in report["notes"])
    # on a GPU its forward and backward replay as CUDA graphs: the projection launches each at once, and the
    # host-bound finding does not advise what the script already does
    util = _rule(report, "UTIL001")
    assert util and any("already replays CUDA graphs" in n for n in util[0]["notes"]), util
    assert not any("removes the remaining launch overhead" in n for n in util[0]["notes"]), util


def test_a_graph_break_on_the_cuda_path_is_ranked_by_its_host_time_on_the_target(realistic_reports):
    """compiled_trainer.py's `.item()` breaks its compiled forward three times a step: on the target GPU the fix
    saves the Python and guards between the graphs, not the eager ops' CPU compute nor perfaudit's recording."""
    report = realistic_reports["compiled_trainer.py"]["run"]
    [finding] = _rule(report, "COMPILE001")
    projected = finding["projected_ms_per_step"]
    assert projected is not None and 0 < projected <= finding["cost"]["ms_per_step"]
    assert projected < report["projection"]["step_ms"]
    assert finding["projected_share_of_step"] == pytest.approx(projected / report["projection"]["step_ms"])


def test_a_step_preempted_inside_a_compiled_region_weighs_as_a_usual_one():
    """Five steps of one frame's gaps, one of them preempted by another process (a busy machine)."""
    from perfaudit.facts.compiled import _typical_total
    totals = _typical_total({("0", step): us for step, us in enumerate([400.0, 410.0, 4900.0, 390.0, 405.0])})
    assert totals == {"0": 405.0 * 5}


def test_the_kernels_inductor_generates_for_the_cpu_are_projected_as_gpu_kernels(tmp_path):
    """On the CPU, inductor's generated C++ kernels run between a compiled graph's matmuls, and their time was
    projected as the host's Python: a compiled nanoGPT step projected 37.6 ms on an H100 where its eager run
    projected 14. Here a compiled activation chain over 4M elements takes most of each CPU step; projected,
    each kernel is a launch and the bytes it moved on the GPU's memory: a small part of the step (4 % here,
    32 % before)."""
    needs_cxx()
    report = _run(tmp_path, """
        import torch
        from torch import nn

        class Gated(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(64, 64)

            def forward(self, x):
                h = self.proj(x)
                return (torch.nn.functional.gelu(h) * torch.sigmoid(h) + torch.tanh(h) * 0.5).square().mean()

        model = torch.compile(Gated())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(131072, 64)
        for step in range(1000):
            loss = model(x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    """, "--target", "H100")
    projection = report["projection"]
    assert projection["step_ms"] < 0.2 * projection["measured_step_ms"], projection  # 0.3 of it before
