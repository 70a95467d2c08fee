"""Steps timed after the window with nothing recording them (collect/window/plain.py): what a DataLoader fetch in
the training process takes without the profiler, whose per-call cost inflated DATA001's wait 2-5x on
Python-heavy Datasets. On the realistic scripts' runs (shared with test_realistic.py) and on their traces,
rewritten as a run (or a hostile file) would leave them."""
from __future__ import annotations

import functools
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, on_a_small_disk, run_trace_json
from perfaudit.api import analyze

SCRIPT = "dataset_transforms.py"   # torchvision-style transforms in __getitem__, num_workers=0


def test_a_run_times_steps_after_its_window_and_states_the_wait_it_timed(realistic_reports):
    """The run goes on for a settling step and five steps after its window (steps of a few ms), timed with the
    profiler stopped; the report's DATA001 wait is the five's (the median over those a busy machine left alone,
    less their waits) and says so."""
    run = realistic_reports[SCRIPT]
    result = json.loads((Path(run["run_dir"]) / "result.json").read_text())
    settling, *plain = result["plain_steps"]
    assert settling["settling"] is True and not any(s.get("settling") for s in plain)
    assert len(plain) == 5 and all(s["wall_ms"] > 0 and 0 < s["fetch_ms"] <= s["wall_ms"] for s in plain), plain
    finding = next(f for f in run["run"]["findings"] if f["rule"] == "DATA001" and f.get("locations"))
    assert "run after the window without the profiler" in finding["message"], finding["message"]
    stated = float(re.search(r"waits ([\d.]+) ms", finding["message"]).group(1))
    fetches = [s["fetch_ms"] for s in plain if s["fetch_waited_ms"] <= 0.05 * s["fetch_ms"]]  # waited for no CPU
    if not fetches:  # where every fetch waited: each less its wait, over the steps a busy machine left alone
        quiet = [s for s in plain if not s["disturbed"]] or plain
        fetches = [s["fetch_ms"] - min(s["fetch_waited_ms"], 0.9 * s["fetch_ms"]) for s in quiet]
    assert stated == pytest.approx(statistics.median(fetches), abs=0.01)
    # its share is of the step it was timed against, in the heading (the cost) as in the message
    share = float(re.search(r"\((\d+)% of the step", finding["message"]).group(1))
    assert abs(100 * finding["cost"]["share_of_step"] - share) <= 0.5, (finding["cost"], finding["message"])


@functools.cache
def _trace(run_dir: str) -> dict:
    return run_trace_json(Path(run_dir) / "trace.json.gz")


def _with_plain(run_dir: str, out: Path, plain, quiet: bool = False) -> Path:
    """The run's trace with its window's plain steps as given, written uncompressed (quicker to write); `quiet`:
    as a machine that made the steps wait for no CPU would have recorded them."""
    data = _trace(run_dir)
    window = data["perfaudit"]["window"]
    window["plain_steps"] = plain
    if quiet:
        for key in ("step_waited_ms", "step_fetch_waited_ms", "step_thread_waited_ms"):
            window[key] = [0.0] * len(window.get(key) or [])
    out = out.with_name(out.name.removesuffix(".gz"))
    out.write_text(json.dumps(data))
    return out


def _data001(report):
    return next((f for f in report.findings if f.rule == "DATA001" and f.message.startswith("The step waits")), None)


def test_the_plain_steps_a_busy_machine_left_alone_make_the_wait(realistic_reports, tmp_path):
    """Three plain steps: 4 ms of fetch in a 10 ms step twice, and one that waited 30 of its 40 ms for a CPU
    held by other processes (left out). The wait is 4 ms, 40 % of the step; where every step waited, each is
    taken less its wait: the fetch less its own (12 of its 16 ms), or, where a trace has not got it, the
    step's in proportion."""
    run_dir = realistic_reports[SCRIPT]["run_dir"]
    quiet = {"wall_ms": 10.0, "fetch_ms": 4.0, "waited_ms": 0.0, "disturbed": False}
    busy = {"wall_ms": 40.0, "fetch_ms": 16.0, "waited_ms": 30.0, "disturbed": True}
    settling = {**quiet, "fetch_ms": 9.0, "settling": True}  # the first after the export: never counted
    report = analyze([str(_with_plain(run_dir, tmp_path / "a.json.gz", [settling, quiet, busy, quiet]))])
    finding = _data001(report)
    assert finding is not None and "waits 4.00 ms" in finding.message and "(40% of the step" in finding.message
    assert "timed over 2 step(s)" in finding.message
    report = analyze([str(_with_plain(run_dir, tmp_path / "b.json.gz", [busy, busy]))])
    assert "waits 4.00 ms" in _data001(report).message  # 16 ms x 10/40
    fetch_waited = {**busy, "fetch_ms": 16.0, "fetch_waited_ms": 12.5}
    report = analyze([str(_with_plain(run_dir, tmp_path / "c.json.gz", [fetch_waited, fetch_waited]))])
    assert "waits 3.50 ms" in _data001(report).message
    # a fetch's measured wait can exceed the fetch (one that ended just after it began, booked when the thread ran
    # again: 3.0 ms "waited" 4.0 ms on a CI machine); the fetches that waited nothing give the figure then
    # (less it, 0.3 ms would be left of a 3 ms fetch)
    overbooked = {"wall_ms": 10.0, "fetch_ms": 3.0, "waited_ms": 0.5, "fetch_waited_ms": 4.0, "disturbed": False}
    clean = {"wall_ms": 12.0, "fetch_ms": 3.5, "waited_ms": 2.5, "fetch_waited_ms": 0.0, "disturbed": True}
    report = analyze([str(_with_plain(run_dir, tmp_path / "d.json.gz", [overbooked, clean, clean]))])
    assert "waits 3.50 ms" in _data001(report).message


def test_a_trace_without_plain_steps_states_the_recorded_wait(realistic_reports, tmp_path):
    """A trace recorded elsewhere (or `analyze` on the run's own trace: the plain steps are in result.json) has
    none: the wait is the measured steps', and the finding says so."""
    run_dir = realistic_reports[SCRIPT]["run_dir"]
    report = analyze([str(_with_plain(run_dir, tmp_path / "none.json.gz", None))])
    finding = _data001(report)
    assert finding is not None and "as recorded in the measured steps" in finding.message


def test_the_projection_waits_for_a_fetch_no_longer_than_the_one_timed_without_the_profiler(realistic_reports,
                                                                                            tmp_path):
    """An emulated run whose loader works in the training process (cuda_path_trainer.py): its projection took
    each fetch as recorded less what the calibration prices its recording at, which real code's calls beat.
    Where the steps timed without the profiler fetched faster, the projected wait for data is theirs; where
    they fetched slower (the emulated device's own cost is in them, and out of the recorded one), it stays."""
    run_dir = realistic_reports["cuda_path_trainer.py"]["run_dir"]

    def projected(plain):
        return analyze([str(_with_plain(run_dir, tmp_path / "p.json.gz", plain, quiet=True))]).traces[0].projection
    recorded = projected(None)
    wait = recorded["data_wait_ms"]  # the recorded fetch is as quick as the machine: the others are its parts
    assert wait > 0
    fast = projected([{"wall_ms": 5.0, "fetch_ms": wait / 4, "waited_ms": 0.0, "disturbed": False}] * 3)
    slow = projected([{"wall_ms": 500.0, "fetch_ms": 400.0, "waited_ms": 0.0, "disturbed": False}] * 3)
    assert fast["data_wait_ms"] == pytest.approx(wait / 4, rel=0.05)
    assert recorded["step_ms"] - fast["step_ms"] == pytest.approx(wait * 3 / 4, rel=0.1)
    assert slow["data_wait_ms"] == pytest.approx(wait, rel=1e-6)


_value = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.integers(-(1 << 62), 1 << 62),
                   st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.one_of(_value, st.lists(st.one_of(_value, st.fixed_dictionaries(
    {"wall_ms": _value, "fetch_ms": _value, "waited_ms": _value, "fetch_waited_ms": _value, "disturbed": _value})),
    max_size=4)))
def test_hostile_plain_steps_give_a_finite_wait_or_the_recorded_one(realistic_reports, tmp_path, plain):
    """The window's record in a trace is the user's file: whatever its plain steps hold, the analysis finishes
    and DATA001's wait, where it fires, is a finite, non-negative figure."""
    report = analyze([str(_with_plain(realistic_reports[SCRIPT]["run_dir"], tmp_path / "h.json.gz", plain))])
    finding = _data001(report)
    if finding is not None:
        wait = float(re.search(r"waits ([\d.]+) ms", finding.message).group(1))
        assert math.isfinite(wait) and wait >= 0


def test_ctrl_c_while_the_plain_steps_run_keeps_the_trace_and_the_report(tmp_path):
    """The run goes on after its window for the plain steps: a Ctrl-C then stops it as any Ctrl-C does, with the
    trace (written before them) and the report, and the steps timed so far."""
    script = tmp_path / "slow_loader.py"
    script.write_text((ROOT / "sample_scripts" / "data_bad.py").read_text().replace("time.sleep(0.001)",
                                                                                     "time.sleep(0.02)"))
    run, out = tmp_path / "run", tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(script), "--device", "cpu",
                             "--warmup", "1", "--steps", "3", "--out-dir", str(run), "-f", f"json={out}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = run / "progress.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and not (progress.exists() and '"timing_plain"' in progress.read_text()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and (run / "trace.json.gz").exists()
    report = json.loads(out.read_text())
    assert report["run"]["steps"] == 3 and any(f["rule"] == "DATA001" for f in report["findings"])
    assert len(json.loads((run / "result.json").read_text())["plain_steps"]) < 6  # a settling step and 5


def test_analyze_on_a_run_folder_states_what_its_run_reported(realistic_reports, tmp_path):
    """`analyze` on a run's folder (or its trace there) reads what the run added to result.json after writing the
    trace: the same DATA001 wait as the run's own report, from the steps timed without the profiler; the trace
    copied out of its folder states the recorded wait, saying so."""
    import shutil
    run = realistic_reports[SCRIPT]
    stated = _data001(analyze([run["run_dir"]])).message
    reported = next(f["message"] for f in run["run"]["findings"] if f["rule"] == "DATA001" and f.get("locations"))
    wait = re.compile(r"waits [\d.]+ ms for the DataLoader \(\d+% of the step, [^)]*\)")
    assert wait.search(stated).group(0) == wait.search(reported).group(0)
    assert "run after the window without the profiler" in stated
    # the header gives the step without the profiler beside the recorded mean (the median of the steps timed)
    from perfaudit.report.markdown import render
    report = analyze([run["run_dir"]])
    from perfaudit.verify.stats import undisturbed_unprofiled_s
    steps = report.traces[0].unprofiled
    kept = undisturbed_unprofiled_s(steps)
    assert len(steps) == 5 and f"{1000 * statistics.median(kept):.2f} ms timed without the profiler ({len(kept)} step(s)" in (
        render(report))
    alone = shutil.copy(Path(run["run_dir"]) / "trace.json.gz", tmp_path / "trace.json.gz")
    report = analyze([str(alone)])
    assert "as recorded in the measured steps" in _data001(report).message
    assert "without the profiler" not in render(report)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.one_of(st.binary(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["trace", "plain_steps", "flops_counted", "outcome", "x"]), inner, max_size=5),
    max_leaves=20).map(lambda v: json.dumps(v).encode())))
def test_a_hostile_result_json_beside_a_trace_is_left_out_or_read(realistic_reports, tmp_path_factory, record):
    """result.json beside a trace is the user's file: whatever it holds, `analyze` finishes and any wait it
    states is a finite figure."""
    folder = tmp_path_factory.mktemp("hostile")
    trace = Path(realistic_reports[SCRIPT]["run_dir"]) / "trace.json.gz"
    (folder / "trace.json.gz").write_bytes(trace.read_bytes())
    (folder / "result.json").write_bytes(record)
    finding = _data001(analyze([str(folder / "trace.json.gz")]))
    if finding is not None:
        assert math.isfinite(float(re.search(r"waits ([\d.]+) ms", finding.message).group(1)))


def test_a_disk_that_fills_during_the_plain_steps_keeps_the_window_and_says_so(tmp_path):
    """The script fills the run folder's disk once its trace is written (a checkpoint): the plain steps cannot be
    added to result.json. The report of the window still comes (DATA001's wait as recorded, saying so), then one
    line naming the full disk, exit 2, no traceback."""
    full = tmp_path / "full"
    full.mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        RUN = os.environ["RUN_FOLDER"]
        loader = DataLoader(TensorDataset(torch.randn(4096, 32), torch.randn(4096, 1)), batch_size=32)
        model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)], nn.Linear(32, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        filled = False
        for epoch in range(100):
            for x, y in loader:
                if not filled and os.path.exists(os.path.join(RUN, "trace.json.gz")):  # the window was written
                    filled = True
                    try:  # a checkpoint as large as the disk allows
                        with open(os.path.join(RUN, "..", "ckpt.bin"), "wb") as f:
                            while True:
                                f.write(bytes(1 << 20))
                    except OSError:
                        pass
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    """))
    proc = on_a_small_disk(f"env RUN_FOLDER={full}/run {sys.executable} -m perfaudit run {script} --device cpu "
                           f"--warmup 1 --steps 3 --out-dir {full}/run", full, "20m")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "DATA001" in out and "as recorded in the measured steps" in out
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("perfaudit: error: cannot write the run folder") and "no space left" in last, proc.stderr


def _data002(on_gpu: bool, pipeline_ms: float):
    """DATA002 evaluated on a run whose loader waited 3.94 ms of a 30 ms step, with four workers that make a
    batch in 4 x pipeline_ms of their own time."""
    from perfaudit.engine.evaluate import evaluate
    from perfaudit.engine.loader import builtin_rules_dir, load_rule
    from perfaudit.facts import Context, Missing, Site

    loader = {"wait_ms": 3.94, "compute_ms": 26.06, "share_pct": 13.1, "workers": True, "num_workers": 4,
              "cpu_count": 2, "worker_ms_per_batch": 4 * pipeline_ms, "pipeline_ms_per_batch": pipeline_ms,
              "pipeline_bound": pipeline_ms >= 0.8 * 26.06, "oversubscribed": True, "more_workers_help": False,
              "io_bound": False, "needed_workers": 5, "path": "train.py", "line": 12}
    known = {"run.training": True, "run.on_gpu": on_gpu, "data.loader": loader, "step.count": 3, "step.mean_ms": 30.0,
             "data.loader_sites": [Site("train.py", 12, 3.94, "loader = DataLoader(...)", "DataLoader")]}

    class Run(Context):
        def get(self, name):
            for key in sorted(known, key=len, reverse=True):
                if name == key:
                    return known[key]
                if name.startswith(key + "."):
                    return known[key][name[len(key) + 1:]]
            raise Missing(f"{name}: not in this run")

    ctx = Run(None, {})
    return evaluate(load_rule(Path(builtin_rules_dir()) / "DATA002.yaml"), ctx)


def test_a_cpu_run_whose_workers_outpace_the_step_has_no_data002_a_gpu_run_is_told_so():
    """Four workers that could deliver a batch every 9.3 ms against a 26 ms step: a wait of 3.94 ms is the
    workers waiting for cores. On a CPU-only run those cores do the training's math, which a GPU takes off them:
    such a wait comes and goes with the machine's load (data_good.py at load 2.4 on 2 cores), so no finding. On
    a GPU run it is said as info; workers too slow for the step are a warning on either."""
    assert _data002(on_gpu=False, pipeline_ms=9.3) is None
    on_gpu = _data002(on_gpu=True, pipeline_ms=9.3)
    assert on_gpu is not None and on_gpu.severity == "info", on_gpu
    assert "waiting for a CPU" in " ".join(on_gpu.notes)
    for gpu in (False, True):
        slow = _data002(on_gpu=gpu, pipeline_ms=40.0)
        assert slow is not None and slow.severity == "warning", slow
