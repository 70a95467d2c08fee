"""Trust on real code: perfaudit's own errors are never blamed on the script, reads the program needs
are not syncs to remove, per-line figures are each line's own, unrepresentative steps stay out of the
figures, the trace budget holds and says what it cut, and `fix` edits only code that ran."""
from __future__ import annotations

import ast
import gzip
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, perfaudit, run_trace_json
from perfaudit.collect.clock import own_cpu_s, waited_for_others
from perfaudit.collect.internal import guarded, internal_errors, record_internal_error
from perfaudit.collect.probes.startup import StartupProbe
from perfaudit.collect.run.options import RunOptions, RunResult
from perfaudit.collect.window.export import export_trace
from perfaudit.collect.window.sizing import fit_budget
from perfaudit.static.uses import call_requests, host_consumer, host_table_read
from perfaudit.usecases.audit import run_notes

REALISTIC = ROOT / "tests" / "realistic"


# -- perfaudit's own errors ----------------------------------------------------------------------------
def test_startup_summary_survives_frames_without_a_line_number_and_ties():
    probe = StartupProbe()
    probe._interval = 0.01
    probe.counts = {("a.py", None, "f"): 3, ("a.py", 7, "f"): 3, ("b.py", 2, "g"): 1, "model": 2, None: 1}
    summary = probe._summarise("training started")
    assert [line["line"] for line in summary["lines"]][:2] == [0, 7]
    assert all(isinstance(line["line"], int) for line in summary["lines"])


def test_a_guarded_hook_records_its_error_and_lets_the_window_exception_through():
    class WindowDone(BaseException):
        pass

    calls = []

    @guarded("test hook")
    def hook(kind):
        calls.append(kind)
        if kind == "bug":
            raise ValueError("perfaudit's bug")
        raise WindowDone()

    assert hook("bug") is None  # swallowed, recorded
    assert any(e["part"] == "test hook" and "perfaudit's bug" in e["error"] for e in internal_errors())
    assert hook("done") is None and calls == ["bug"]  # disabled after its error: it does nothing more

    @guarded("window hook")
    def window():
        raise WindowDone()

    with pytest.raises(WindowDone):
        window()
    record_internal_error("another part", RuntimeError("x"))
    assert len([e for e in internal_errors() if e["part"] == "another part"]) == 1


def test_a_probe_that_fails_inside_the_script_is_reported_as_perfauditsexit_4(tmp_path):
    """A Dataset returning a tensor subclass that refuses is_pinned() breaks perfaudit's DataLoader probe:
    the script trains on, the report says the error is perfaudit's, and the exit code is 4, not 3."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent('''\
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, Dataset


        class LabelTensor(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                if func is torch.Tensor.is_pinned:
                    raise NotImplementedError("LabelTensor cannot be pinned")
                return super().__torch_function__(func, types, args, kwargs or {})


        class Data(Dataset):
            def __len__(self):
                return 512

            def __getitem__(self, i):
                return torch.randn(8), torch.randn(1).as_subclass(LabelTensor)


        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(100):
            for x, y in DataLoader(Data(), batch_size=32):
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y.as_subclass(torch.Tensor)).backward()
                opt.step()
        '''))
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["run"]["outcome"]["outcome"] == "window_complete"  # the script was not blamed
    assert report["run"]["steps"] >= 1 and (tmp_path / "run" / "trace.json.gz").exists()
    assert [e["part"] for e in report["run"]["internal_errors"]] == ["DataLoader probe"]
    assert sum("perfaudit's own error" in n for n in report["notes"]) == 1


# -- reads the program needs -----------------------------------------------------------------------------
def _tree(code: str) -> ast.Module:
    return ast.parse(textwrap.dedent(code))


def test_reads_that_feed_host_code_are_told_from_reads_that_only_log():
    tree = _tree('''\
        def select(policy, state):
            probs = policy(state)
            return probs.argmax().item()

        for t in range(10):
            state, reward, done = env.step(select(policy, state))
            action = q_values.argmax().item()
            obs = env.step(action)
            frames.append(frame.cpu().numpy())
            np_array = np.asarray(x.cpu().numpy())
            total += loss.item()
            print(f"loss {loss.item():.3f}")
            if loss.item() > 10:
                break
        ''')
    assert host_consumer(tree, 3) == "env.step"        # returned, and its caller hands it to env.step
    assert host_consumer(tree, 7) == "env.step"        # through a name
    assert host_consumer(tree, 10) == "np.asarray"
    for line in (9, 11, 12, 13):                       # a log list, an accumulator, a print, a branch
        assert host_consumer(tree, line) is None, line
    # the static pass agrees with the run: no "seen in the source only" finding for a read the run left out
    from perfaudit.static.walk import check_tree
    assert sorted(h.line for h in check_tree(tree) if h.rule == "SYNC001") == [9, 11, 12, 13]


def test_a_read_that_only_indexes_a_host_table_is_a_sync_to_remove_and_says_so():
    """`a.gather(-1, t.cpu())` (a diffusion schedule kept on the host): the value goes to a tensor method, not to
    code outside torch: a sync to remove by keeping the table on the device, not a read the program needs.
    NumPy's and the host's own uses stay needed."""
    tree = _tree('''\
        out = a.gather(-1, t.cpu())
        out = table.index_select(0, idx.cpu().long())
        out = np.take(a, t.cpu().numpy())
        state = env.step(action.cpu().numpy())
        q = a.gather(-1, t).cpu()
        ''')
    assert [host_consumer(tree, line) for line in (1, 2)] == [None, None]
    assert [host_table_read(tree, line) for line in (1, 2)] == ["a.gather", "table.index_select"]
    assert host_consumer(tree, 3) == "np.take" and host_consumer(tree, 4) == "env.step"
    assert [host_table_read(tree, line) for line in (3, 4, 5)] == [None, None, None]


def test_an_optimizer_asked_for_fused_through_kwargs_is_told_apart():
    tree = _tree('''\
        def build(model, device):
            extra = {"fused": True} if device.type == "cuda" else {}
            a = torch.optim.AdamW(model.parameters(), lr=1e-3, **extra)
            kw = {"lr": 1e-3}
            if device.type == "cuda":
                kw["fused"] = True
            b = torch.optim.Adam(model.parameters(), **kw)
            c = torch.optim.Adam(model.parameters(), lr=1e-3)
            d = torch.optim.Adam(model.parameters(), **config.optim)
            return a, b, c, d
        ''')
    names = {"Adam", "AdamW"}
    assert call_requests(tree, 3, "fused", names) is True
    assert call_requests(tree, 7, "fused", names) is True
    assert call_requests(tree, 8, "fused", names) is False
    assert call_requests(tree, 9, "fused", names) is None   # cannot be read: never claimed missing


# -- a busy machine ------------------------------------------------------------------------------------------
def test_steps_a_busy_cpu_delayed_still_show_their_shapes(tmp_path, sample_report, run_dir):
    """On a busy machine most recorded steps are left out of the timing figures (they waited for a CPU),
    but what a step computes does not depend on that: varying shapes are still seen across all of them."""
    from perfaudit import api
    sample_report("varying_shapes_bad.py")
    with gzip.open(f"{run_dir}/varying_shapes_bad/trace.json.gz", "rt") as f:
        trace = json.load(f)
    window = trace["perfaudit"]["window"]
    measured = range(window["warmup"], window["recorded"])
    assert len(measured) >= 3
    # every measured step but one waited for a CPU held by other processes, as beside two busy loops
    window["excluded_steps"] = {str(n): "it waited 9.0 ms of its 12.0 ms for a CPU held by other processes "
                                        "(busy machine)" for n in list(measured)[1:]}
    window["busy_steps_measured"] = 1
    window["step_waited_ms"] = [9.0 if str(n) in window["excluded_steps"] else 0.0 for n in range(window["recorded"])]
    busy = tmp_path / "busy.json.gz"
    with gzip.open(busy, "wt") as f:
        json.dump(trace, f)
    finding = next(f for f in api.analyze([str(busy)]).findings if f.rule == "SHAPE001")
    # each step padded to its own length, cycling over 8 lengths: a window of n consecutive steps (more than 8
    # when a busy machine made the run record extra steps) has min(n, 8) shape sets, the commonest ceil(n / 8) times
    n = len(measured)
    common = -(-n // 8)
    assert f"in {100 * (n - common) / n:.0f}% of the recorded steps ({min(n, 8)} distinct shape sets" in finding.message


def test_a_dataloader_worker_holding_the_cpus_is_the_scripts_own_doing_not_a_busy_machine():
    """On 2 cores an emulated run of a script with a DataLoader worker and a pin-memory thread left 30 of 35
    steps out as "waited for a CPU held by other processes (busy machine)" and recorded five times the steps:
    the waits were among the script's own threads and its worker. A step whose own processes (every thread,
    and the children it started) kept nearly every CPU busy is not disturbed; one they did not fill is."""
    assert waited_for_others(0.005, 0.012, own_cpu_s=0.022, cpus=2) == 0.0      # 0.92 of 2 CPUs: its own
    assert waited_for_others(0.005, 0.012, own_cpu_s=0.012, cpus=2) == 0.005    # half: others held the rest
    assert waited_for_others(0.005, 0.012, own_cpu_s=None, cpus=2) == 0.005     # unknown: as before
    # a child's CPU time counts as the script's own (CPU time, not wall time: the same on a busy machine)
    burn = "import sys, time\nwhile time.process_time() < 0.3: pass\nprint('done', flush=True)\ntime.sleep(60)\n"
    before = own_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        assert own_cpu_s() - before >= 0.3
    finally:
        child.kill()
        child.wait()


# -- the trace budget ----------------------------------------------------------------------------------------
def test_the_budget_keeps_three_steps_with_stacks_on_the_first_before_it_drops_stacks():
    # 1 MB of events and 3 MB of Python calls a step (the probes' Python in the two warm-up steps ~6 MB more
    # each): 20 MB (16 with the margin) does not hold the window as asked. The warm-up goes without stacks
    # (2 MB), and 3 measured steps with them fit (cut from 5)
    fit = fit_budget(events=2500, calls=6000, budget_mb=20, warmup=2, steps=5, with_stack=True)
    assert fit.with_stack and not fit.warmup_stacks and fit.stacked_steps is None
    assert (fit.warmup, fit.steps) == (2, 3) and fit.trimmed["steps"] == 3 and fit.trimmed["warmup_stacks"] == "off"
    # 5 MB of stacks: 2 measured steps with them would be all: the first keeps its stacks and 4 more measured
    # steps go without (5 in all, as asked)
    fit = fit_budget(events=2500, calls=10000, budget_mb=20, warmup=2, steps=5, with_stack=True)
    assert fit.stacked_steps == 1 and not fit.warmup_stacks and (fit.warmup, fit.steps) == (2, 5)
    # a budget that holds every step with stacks, the probes' too, cuts nothing and switches nothing
    fit = fit_budget(events=2500, calls=6000, budget_mb=200, warmup=2, steps=5, with_stack=True)
    assert fit.stacked_steps is None and fit.warmup_stacks and (fit.warmup, fit.steps) == (2, 5)
    assert "steps" not in fit.trimmed
    # 10 MB of stacks: one measured step with them and three without, after one warm-up step (the probes' own
    # ops make a warm-up step 1.6 MB)
    fit = fit_budget(events=2500, calls=20000, budget_mb=20, warmup=2, steps=5, with_stack=True)
    assert fit.with_stack and fit.stacked_steps == 1 and (fit.warmup, fit.steps) == (1, 4)
    # 13 MB: the one measured step with stacks leaves room for a warm-up step without them (the probes' hooks
    # run there, never in a measured step)
    fit = fit_budget(events=2500, calls=26000, budget_mb=20, warmup=2, steps=5, with_stack=True)
    assert fit.with_stack and fit.stacked_steps is None and not fit.warmup_stacks and (fit.warmup, fit.steps) == (1, 1)
    # one step with stacks does not fit: stacks go, and the report is told
    fit = fit_budget(events=2500, calls=200_000, budget_mb=40, warmup=2, steps=5, with_stack=True)
    assert not fit.with_stack and fit.trimmed["stacks"] == "off"
    # unless they are to be kept: then only steps go
    fit = fit_budget(events=2500, calls=200_000, budget_mb=40, warmup=2, steps=5, with_stack=True, keep_stacks=True)
    assert fit.with_stack and fit.steps == 1


def test_a_busy_step_with_stacks_is_recorded_again_only_where_the_planned_steps_still_fit():
    """python_heavy.py's sizing under 20 MB: one warm-up step, three measured, stacks on the first only. When a
    busy machine disturbs that first step, recording it again with stacks would leave room for one more step
    only (a CI run measured 2): the retry is skipped and the three steps keep their place; with room for both,
    the step with stacks is recorded again."""
    from types import SimpleNamespace

    from perfaudit.collect.window.parts import WindowProfilers
    from perfaudit.collect.window.selection import StepMarks
    def window(budget_mb: float):
        fit = fit_budget(events=5837, calls=5190, budget_mb=20, warmup=2, steps=5, with_stack=True)
        assert (fit.warmup, fit.steps, fit.stacked_steps) == (1, 3, 1), fit
        marks = StepMarks(SimpleNamespace(warmup=fit.warmup, config={"steps": 5}))
        marks.sized = fit
        profilers = WindowProfilers({"with_stack": True}, probes=None, torch=None)
        profilers.stacked_steps, profilers.warmup_stacks, profilers.with_stack = 1, False, [True]
        marks._cpu, marks._stacked = [0.05, 0.03], [False, True]  # the warm-up, then the busy step with stacks
        fits = not marks.over_trace_budget(budget_mb, True, later=fit.warmup + fit.steps - 2 - 1)
        profilers.step_recorded(2, fit.warmup, left_out=True, retry_fits=fits)
        return marks, profilers.wants_stacks(2, fit.warmup)
    marks, again = window(20)
    assert not again
    for cpu in (0.03, 0.03):  # the two steps planned after it, without stacks, fit
        assert not marks.over_trace_budget(20, False)
        marks._cpu.append(cpu)
        marks._stacked.append(False)
    assert window(40)[1]


def test_a_run_keeps_its_trace_budget_and_says_what_it_cut(tmp_path):
    """An LSTMCell stepped over 250 time steps writes ~15 MB of trace a step: under a 25 MB budget the
    window shrinks to one measured step and the report says so."""
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(ROOT / "tests" / "scripts" / "op_heavy.py"), "--max-trace-mb", "25",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", "250")
    assert proc.returncode == 0, proc.stderr
    with gzip.open(tmp_path / "run" / "trace.json.gz") as f:
        size = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 22), b""))
    assert size <= 25e6, size
    report = json.loads(out.read_text())
    notes = " ".join(report["notes"])
    assert "25 MB trace budget" in notes and "--max-trace-mb" in notes and report["run"]["steps"] == 1, notes
    assert "window was closed after step" not in notes  # it ended where it was sized to end, not cut


def test_a_tight_budget_keeps_three_steps_and_the_lines_of_the_one_with_stacks(tmp_path):
    """A trainer whose step is mostly Python (python_heavy.py) under a 20 MB budget: with stacks on every step
    only 2 would be measured; the first measured step is recorded with them and the others without, the warm-up
    too (its probes' Python wrote 3x a measured step with stacks, 34 MB in all), in one valid trace within the
    budget. The sync found in the step with stacks keeps its line and its count per step (2 reads a step), and
    the report says the stacks cover only part of the steps."""
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(ROOT / "tests" / "scripts" / "python_heavy.py"), "--max-trace-mb", "20",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["run"]["steps"] >= 3, report["notes"]
    assert len(gzip.decompress((tmp_path / "run" / "trace.json.gz").read_bytes())) <= 20e6
    data = run_trace_json(tmp_path / "run" / "trace.json.gz")  # the parts merged into one valid trace
    assert len([e for e in data["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")]) > report["run"]["steps"]
    sync = next(f for f in report["findings"] if f["rule"] == "SYNC001")
    assert sync["message"].startswith("2.0 host-device sync(s) per step"), sync["message"]
    notes = " ".join(report["notes"])
    if "left out of the times for waiting on a busy CPU" in notes:  # each step with stacks waited for a CPU
        assert report["run"]["excluded_steps"], report["run"]
        assert [(loc["line"], loc["count_per_step"]) for loc in sync["locations"]] == [(28, 2.0)]
        return
    stacked = re.search(r"Python stacks were recorded for (\d) of the (\d+) measured steps", notes)
    assert stacked and int(stacked.group(1)) >= 1 and int(stacked.group(2)) == report["run"]["steps"], notes
    assert [(loc["line"], loc["count_per_step"]) for loc in sync["locations"]] == [(28, 2.0)]
    # the same trace as a busier machine leaves it (a CI run did): every measured step with stacks waited for a
    # CPU and was left out of the times. What a step does is not the load's: the sync keeps its line and count
    window = data["perfaudit"]["window"]
    stacked_steps = range(window["warmup"], window["warmup"] + int(stacked.group(1)))
    window["excluded_steps"] = {**(window.get("excluded_steps") or {}), **{
        str(n): "it waited 5.0 ms of its 9.0 ms for a CPU held by other processes (busy machine)" for n in stacked_steps}}
    busier, busier_report = tmp_path / "busier.json", tmp_path / "busier.report.json"
    busier.write_text(json.dumps(data))
    proc = perfaudit("analyze", str(busier), "-f", f"json={busier_report}")
    again = json.loads(busier_report.read_text())
    assert "left out of the times for waiting on a busy CPU" in " ".join(again["notes"]), again["notes"]
    sync = next(f for f in again["findings"] if f["rule"] == "SYNC001")
    assert [(loc["line"], loc["count_per_step"]) for loc in sync["locations"]] == [(28, 2.0)], sync["locations"]


def test_stacks_kept_off_by_the_scripts_own_range_are_reported_missing(tmp_path):
    """A trainer that wraps each whole iteration, its batch fetch too, in its own `record_function` range, under a
    budget that records the warm-up without stacks: stacks were to come on at the first measured step, but a
    profiler may not stop inside a range, and the range is open at every step boundary. The window goes on
    without stacks, and the report says so and why, naming the range, rather than leaving findings without a
    line unexplained."""
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(ROOT / "tests" / "scripts" / "iteration_range.py"), "--device", "cpu",
                     "--max-trace-mb", "3", "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    notes = " ".join(report["notes"])
    assert "WITHOUT Python stacks" in notes and "`iteration`" in notes and "--max-trace-mb" in notes, notes


class _KinetoPart:
    """A profiler whose export is laid out as Kineto writes it (the list, then `traceName`)."""

    def __init__(self, *names: str, layout: str = "kineto"):
        self.names, self.layout = names, layout

    def export_chrome_trace(self, path):
        events = ",\n".join(json.dumps({"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": i, "dur": 1})
                            for i, n in enumerate(self.names))
        body = (f'{{\n  "schemaVersion": 1,\n  "traceEvents": [\n{events}\n  ],"traceName": "{path}" }}'
                if self.layout == "kineto" else json.dumps({"events": list(self.names)}))
        with open(path, "w") as f:
            f.write(body)


def test_the_parts_of_a_window_are_written_as_one_trace(tmp_path):
    """The warm-up, the step with stacks and the steps without (three profiler sessions): one trace with every
    event in order and the probes embedded, and no part left beside it; a part laid out otherwise leaves the
    part with stacks alone, never a broken file."""
    plain = str(tmp_path / "trace.json")
    path = export_trace(_KinetoPart("c", "d"), plain, {"version": 1},
                        [(_KinetoPart("a"), False), (_KinetoPart("b [stacks]"), True)], False)
    data = json.loads(gzip.open(path).read())
    assert [e["name"] for e in data["traceEvents"]] == ["a", "b [stacks]", "c", "d"]
    assert data["perfaudit"] == {"version": 1} and data["traceName"] == plain
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]

    path = export_trace(_KinetoPart("c", layout="other"), plain, {}, [(_KinetoPart("b [stacks]"), True)], False)
    assert [e["name"] for e in json.loads(gzip.open(path).read())["traceEvents"]] == ["b [stacks]"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]


def test_a_disk_that_fills_while_the_parts_are_joined_leaves_a_readable_trace(tmp_path, monkeypatch):
    import errno

    from perfaudit.collect.window import export

    def full(src, dst, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(export, "_copy", full)
    plain = str(tmp_path / "trace.json")
    path = export_trace(_KinetoPart("c"), plain, {}, [(_KinetoPart("b"), True)], False)
    assert path == plain and [e["name"] for e in json.load(open(path))["traceEvents"]] == ["c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


def test_a_cost_measured_over_too_few_steps_says_so(tmp_path):
    """Two measured steps (`--steps 2`, or a budget or a script that allowed no more): each finding whose cost
    rests on them says how few they were; the report with the usual window does not."""
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(ROOT / "sample_scripts" / "sync_bad.py"), "--warmup", "1", "--steps", "2",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}")
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(out.read_text())
    measured = [f for f in report["findings"] if f["cost"]["ms_per_step"] is not None]
    assert "SYNC001" in {f["rule"] for f in measured}
    assert all(any(n.startswith("Measured over 2 step(s) only") for n in f["notes"]) for f in measured)
    assert "Measured over 2 step(s) only" in proc.stdout


def test_a_trace_the_profiler_could_not_write_is_named_with_the_reason(tmp_path):
    """Kineto does not raise when its write fails (a full disk): an empty trace file is an export error
    the report names, not a silent run with no steps."""
    class EmptyExport:
        def export_chrome_trace(self, path):
            open(path, "w").close()

    with pytest.raises(OSError, match="trace file is empty"):
        export_trace(EmptyExport(), str(tmp_path / "trace.json"), {})
    assert not list(tmp_path.iterdir())  # nothing half-written left behind
    result = RunResult(run_dir=str(tmp_path), script="train.py", trace_path=None,
                       outcome={"outcome": "window_complete", "profiling_started": True,
                                "export_error": "OSError: the profiler's trace file is empty (0 bytes)"},
                       log_path=str(tmp_path / "script.log"))
    notes = run_notes(result, RunOptions(), None)
    assert any("could not be written" in n and "empty" in n for n in notes), notes


def test_kinetos_passing_refusal_to_export_is_tried_again_and_a_lasting_one_is_named(tmp_path, monkeypatch):
    """Kineto's exporter refused once under two busy loops ("No logger registered for the file protocol
    prefix", a ValueError, closure_trainer.py): the export is tried again after a pause; a refusal that lasts
    is said as it is, not as a full disk."""
    from perfaudit.collect.window import export
    monkeypatch.setattr(export, "EXPORT_RETRIES", (0.0, 0.0, 0.0))

    class Refusing:
        def __init__(self, refusals):
            self.refusals = refusals

        def export_chrome_trace(self, path):
            if self.refusals:
                self.refusals -= 1
                raise ValueError("No logger registered for the file protocol prefix")
            with open(path, "w") as f:
                f.write('{"traceEvents": []}')

    path = export_trace(Refusing(2), str(tmp_path / "trace.json"), {"version": 1})
    assert path.endswith(".gz") and json.loads(gzip.open(path).read())["perfaudit"] == {"version": 1}
    with pytest.raises(ValueError):
        export_trace(Refusing(9), str(tmp_path / "again.json"), {})
    result = RunResult(run_dir=str(tmp_path), script="train.py", trace_path=None,
                       outcome={"outcome": "window_complete", "profiling_started": True, "export_error":
                                "ValueError: No logger registered for the file protocol prefix"},
                       log_path=str(tmp_path / "script.log"))
    notes = run_notes(result, RunOptions(), None)
    assert any("could not be written: ValueError" in n and "disk full" not in n for n in notes), notes


def test_a_process_that_dies_while_the_profiler_stops_is_named_and_run_again(tmp_path, monkeypatch):
    """torch's profiler can crash while it stops (SIGSEGV in _disable_profiler, about 1 run in 15 of a
    closure trainer on a busy machine): the window written to result.json before the export must not
    pass for a complete run. The runner says so and runs the script once more."""
    from perfaudit.collect.run import runner
    (tmp_path / "result.json").write_text(json.dumps({"outcome": "window_complete", "trace": None,
                                                      "steps_recorded": 7, "profiling_started": True}))
    (tmp_path / "progress.jsonl").write_text('{"phase": "step", "step": 7}\n{"phase": "exporting"}\n')
    died = runner._collect("train.py", str(tmp_path), str(tmp_path / "script.log"), -11, None, False, RunOptions())
    assert died.trace_path is None and died.outcome["died_exporting"] == "SIGSEGV"
    notes = run_notes(died, RunOptions(), None)
    assert any("died (SIGSEGV) while torch stopped its profiler" in n for n in notes), notes
    fine = RunResult("train.py", str(tmp_path), str(tmp_path / "trace.json.gz"), {"outcome": "window_complete"},
                     str(tmp_path / "script.log"))
    attempts = iter([died, fine])
    monkeypatch.setattr(runner, "_run_once", lambda *a, **k: next(attempts))
    again = runner.run_script("train.py", [], RunOptions())
    assert again is fine and again.outcome["retried"].startswith("the first run died (SIGSEGV)")
    assert any("run again" in n for n in run_notes(again, RunOptions(), None))


@pytest.mark.timing
def test_a_closure_trainers_steps_turn_over_outside_the_optimizers_range(realistic_reports):
    """A closure trainer's only point between two steps was the optimizer's pre-hook, inside torch's
    `Optimizer.step#…` range: the window's profiler started and stopped there, and a range begun under one
    profiler that ends under another (or none) corrupts torch's memory (closure_trainer.py crashed so in CI).
    Every step now turns over before the range opens."""
    from perfaudit.trace.parser import load_trace
    trace = load_trace(f"{realistic_reports['closure_trainer.py']['run_dir']}/trace.json.gz")
    ranges = [e for e in trace.host if e.name.startswith("Optimizer.step#")]
    steps = [e for e in trace.host if e.name.startswith("ProfilerStep#")]
    assert len(steps) >= 3 and len(ranges) >= len(steps) - 1
    cut = [s.name for s in steps if any(r.ts < edge < r.end for r in ranges for edge in (s.ts, s.end))]
    assert not cut, cut


# -- fix edits only code that ran --------------------------------------------------------------------------
def test_fix_leaves_a_determinism_block_the_run_did_not_take(realistic_reports):
    made = realistic_reports["seeded_cnn.py"]  # the audit of the script as it is, shared with test_realistic
    proc = perfaudit("fix", str(REALISTIC / "seeded_cnn.py"), "--from", made["report_path"], "--select", "CUDNN001")
    diff = proc.stdout
    assert "+    torch.backends.cudnn.benchmark = True" in diff, proc.stdout + proc.stderr
    assert "-        torch.backends.cudnn.benchmark = False" not in diff  # the seeded path keeps its flag
    lines = diff.splitlines()
    added = next(i for i, line in enumerate(lines) if line.startswith("+    torch.backends"))
    assert lines[added + 1].strip().startswith("if args.seed is not None:")  # before the block: it still wins


def test_the_start_up_is_weighed_against_undisturbed_steps_only():
    """On a loaded machine most steps of a tiny model waited for a CPU and were measured at 40 times their
    CPU time (intra-op threads spinning): the start-up is compared with the undisturbed steps' CPU time,
    so START001's 'as many as N steps' does not depend on how busy the machine was."""
    from perfaudit.facts import Context
    from perfaudit.trace.model import Event, Trace
    from perfaudit.trace.steps import segment_steps

    busy = {str(n): "it waited 32 ms of its 31.6 ms for a CPU held by other processes (busy machine)"
            for n in range(2, 19)}
    window = {"warmup": 2, "excluded_steps": busy, "step_cpu_s": [0.03] * 19 + [0.0008] * 3}
    startup = {"seconds": 5.0, "cpu_seconds": 4.7, "samples": 470, "model_samples": 0, "import_samples": 78,
               "ended_by": "training started", "lines": [{"path": "/x/train.py", "line": 11, "func": "<module>",
                                                          "samples": 391}]}
    trace = Trace(path="t.json", meta={"perfaudit": {"window": window, "probes": {"startup": startup}}})
    trace.host = [Event("annotation", f"ProfilerStep#{n}", 1000.0 * n, 900.0, 1, 1, {}) for n in range(22)]
    segment_steps(trace)
    summary = Context(trace).get("start.summary")
    assert summary["step_cpu_ms"] == pytest.approx(0.8)
    assert summary["steps_equivalent"] == pytest.approx(391 * 0.01 / 0.0008, rel=0.01)


def test_keep_stacks_reaches_the_audited_process(tmp_path):
    """`--keep-stacks` under a budget that one step with stacks exceeds: the window keeps its Python stacks
    (only steps are cut), where without the flag it drops them and says so."""
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(ROOT / "tests" / "scripts" / "op_heavy.py"), "--max-trace-mb", "8", "--keep-stacks",
                     "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", "250")
    assert proc.returncode == 0, proc.stderr
    notes = " ".join(json.loads(out.read_text())["notes"])
    assert "8 MB trace budget" in notes and "WITHOUT stacks" not in notes, notes
    with gzip.open(tmp_path / "run" / "trace.json.gz") as f:
        assert b'"python_function"' in f.read()


def test_the_optimizer_time_is_taken_from_the_steps_the_figures_are_made_of():
    """A step left out because it waited for a CPU (here step 4, whose update took longer)
    adds nothing to the optimizer's ms per step, which stays a share of the step it is compared with
    (OPT001 had claimed 132 % of a step on a busy machine)."""
    from perfaudit.facts import Context
    from perfaudit.facts.training.optim import _step_ops
    from perfaudit.trace.model import Event, Trace
    from perfaudit.trace.steps import segment_steps

    busy = {"4": "it waited 20 ms of its 1.2 ms for a CPU held by other processes (busy machine)"}
    trace = Trace(path="t.json", meta={"perfaudit": {"window": {"warmup": 2, "excluded_steps": busy}}})
    host = []
    for n in range(8):
        start, update = 1000.0 * n, 380.0 if n == 4 else 300.0  # the busy step's update took longer
        host.append(Event("annotation", f"ProfilerStep#{n}", start, 990.0, 1, 1, {}))
        host.append(Event("annotation", "Optimizer.step#SGD.step", start + 600.0, update, 1, 1, {}))
        host += [Event("op", "aten::add_", start + 610.0 + 20 * i, 10.0, 1, 1, {}) for i in range(4)]
    trace.host = sorted(host, key=lambda e: (e.ts, -e.dur))
    segment_steps(trace)
    ctx = Context(trace)
    assert [s.number for s in ctx.steps] == [2, 3, 5, 6, 7]
    sgd = _step_ops(ctx)["SGD"]
    assert sgd["ms_per_step"] == pytest.approx(0.3) and sgd["ops_per_step"] == pytest.approx(4)


def test_empty_cache_is_counted_over_the_measured_steps_only(sample_report, run_dir, tmp_path):
    """A recording holds steps the report does not measure (the window's warm-up, steps left out as unlike the
    rest): MEM001's calls per step are the measured steps' own. A script with gradient accumulation that called
    empty_cache() each micro-batch was told 3.2 calls a step for its 2, the window's extra steps counted in."""
    sample_report("empty_cache_bad.py")
    trace = run_trace_json(Path(run_dir) / "empty_cache_bad" / "trace.json.gz")
    [entry] = trace["perfaudit"]["probes"]["empty_cache"]
    measured = sum(entry["by_step"].values())
    entry["by_step"].update({"-1": 4, "999": 4})  # calls in steps that were recorded but are not measured
    entry["window_calls"] = measured + 8
    edited = tmp_path / "trace.json.gz"
    edited.write_bytes(gzip.compress(json.dumps(trace).encode()))
    out = tmp_path / "report.json"
    proc = perfaudit("analyze", str(edited), "-f", f"json={out}")
    assert out.exists(), proc.stderr
    [finding] = [f for f in json.loads(out.read_text())["findings"] if f["rule"] == "MEM001"]
    assert "called 1.0 time(s) per step" in finding["message"], finding["message"]


def test_perfaudit_failing_inside_the_script_says_which_line_of_the_script_called_it():
    """perfaudit's own code raising inside the audited process is its bug, and the report names the script's line
    whose call reached it (a patched torch function, a probe), so the user can say what to avoid and we can fix it."""
    from perfaudit.outcome import describe
    text = describe({"outcome": "internal_error", "exception": "RuntimeError", "message": "boom",
                     "site": {"path": "/home/u/proj/train.py", "line": 7, "func": "<module>"}})
    assert "(RuntimeError: boom at " in text and "train.py:7)" in text and "a bug in perfaudit" in text
    assert "boom)" in describe({"outcome": "internal_error", "exception": "RuntimeError", "message": "boom",
                                "site": "corrupt"})
