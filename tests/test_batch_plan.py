"""`perfaudit plan` (tip T12, docs/commands.md): the largest batch that fits the GPU, found by running the script at
its batch, at twice it, and at the batch it offers, as a user would call it; a script without a DataLoader to
scale is told why; a Ctrl-C keeps what ran."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, perfaudit

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
                    max_leaves=20)

SCRIPT = ROOT / "tests" / "scripts" / "batch_trainer.py"
LOADER_LINE = 65   # DataLoader(data, batch_size=args.batch_size, …)
OPTION_LINE = 53   # parser.add_argument("--batch-size", type=int, default=16)
QUICK = ("--rounds", "1", "--max-time", "0", "--warmup", "1", "--steps", "3", "--end-check", "0")  # verify's runs


def test_the_plan_offered_is_a_batch_that_ran_and_fit(tmp_path):
    out = tmp_path / "plan.json"
    proc = perfaudit("plan", str(SCRIPT), "--out-dir", str(tmp_path / "runs"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    plan = json.loads(out.read_text())
    first, second, offered = plan["points"][0], plan["points"][1], plan["offered"]
    assert (first["batch"], second["batch"]) == (16, 32)            # the script's batch, then twice it
    assert second["peak_allocated_bytes"] > first["peak_allocated_bytes"] and plan["per_sample_bytes"] > 0
    # offered: the last batch run, at most a quarter of the dataset (512 samples), and it fit with the margin
    assert offered == plan["points"][-1] and offered["ran"] and offered["batch"] == 128
    assert plan["bounded_by"] == "the dataset" and plan["largest_by_fit"] > offered["batch"]
    assert offered["peak_reserved_bytes"] <= plan["usable_bytes"] < 0.9 * plan["device_total_bytes"]
    predicted = first["peak_allocated_bytes"] + plan["per_sample_bytes"] * (offered["batch"] - first["batch"])
    assert abs(offered["peak_allocated_bytes"] / predicted - 1) < 0.15   # the run agreed with the two points
    assert (Path(offered["run_dir"]) / "trace.json.gz").exists()     # the run it rests on is kept
    assert offered["samples_per_s"] > first["samples_per_s"]        # projected on the H100
    assert plan["site"] == {"file": str(SCRIPT), "line": LOADER_LINE} and plan["memory_source"] == "emulated"
    console = " ".join(proc.stdout.split())   # the console wraps at 80 columns
    assert "batch 128 fits: it ran" in console and "at most a quarter of its 512 samples" in console
    assert plan["option"] == {"name": "--batch-size", "line": OPTION_LINE}   # the value comes from argparse
    assert (f"run it with `-- --batch-size 128` (was 16; its option at batch_trainer.py:{OPTION_LINE}, read by "
            f"the DataLoader at tests/scripts/batch_trainer.py:{LOADER_LINE})") in console
    assert "scale the learning rate" in console and "by the fit (not run)" in console
    # the plan verified as a user would: `verify --plan` runs B with the option the plan names
    proc = perfaudit("verify", str(SCRIPT), "--plan", str(out), *QUICK, "--out-dir", str(tmp_path / "verify"),
                     "-o", str(tmp_path / "verified.json"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    verified = json.loads((tmp_path / "verified.json").read_text())
    assert verified["passed"] and verified["args_b"] == ["--batch-size", "128"]
    assert verified["batch"] == {"from": 16, "to": 128, "held": 128}   # the option reached the loader
    b = verified["memory"]["b"]
    assert b["peak_allocated_bytes"] <= 1.1 * offered["peak_allocated_bytes"] and verified["speed_per"] == "sample"
    assert verified["timing"]["fixes"][0]["loss"]["verdict"] == "not compared"   # a batch changes the optimisation
    console = " ".join(proc.stdout.split())
    steps = verified["timing"]["fixes"][0]["speed"]["steps"]
    # a run whose steps mostly waited for a CPU held by other processes is not counted (one round here): the
    # console then says the throughput was not measured and why, rather than printing a busy machine's figure
    measured = "samples/s here (batch 16 → 128" if all(steps) else "throughput not measured (batch 16 → 128)"
    assert measured in console and "the plan ran as predicted: apply it" in console


def test_a_script_that_makes_its_batches_by_hand_gets_no_plan_and_is_told_why(tmp_path):
    proc = perfaudit("plan", str(SCRIPT), "--out-dir", str(tmp_path / "runs"), "--", "--by-hand")
    assert proc.returncode == 1, proc.stderr
    assert "no plan: the training batches come from no DataLoader" in proc.stdout.replace("\n", " ")
    assert "Traceback" not in proc.stderr


def _interrupted(tmp_path, *command: str, folder: str) -> tuple[dict, str, str, int]:
    """`perfaudit plan …` on a script that trains for ever, a Ctrl-C once the run in `folder` steps: the plan's
    JSON, stdout, stderr and exit code."""
    runs, out = tmp_path / "runs", tmp_path / "plan.json"
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "plan", *command[:-1], str(command[-1]), "--out-dir",
                             str(runs), "-o", str(out), "--", "--steps", "100000"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = runs / folder / "progress.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (progress.exists() and '"step"' in progress.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    return json.loads(out.read_text()), stdout, stderr, proc.returncode


def test_ctrl_c_in_the_second_run_keeps_the_first(tmp_path):
    plan, stdout, stderr, code = _interrupted(tmp_path, SCRIPT, folder="batch-x2")
    assert code == 130, stderr
    assert [p["batch"] for p in plan["points"]] == [16] and plan["offered"] is None
    assert plan["why_not"].startswith("interrupted (SIGINT)")
    assert "ran batch     16" in stdout and "no plan: interrupted" in stdout


def test_ctrl_c_while_verify_measures_a_plans_peak_keeps_the_timed_rounds(tmp_path):
    plan, runs, out = tmp_path / "plan.json", tmp_path / "runs", tmp_path / "verified.json"
    plan.write_text(json.dumps({"plan": "checkpoint", "target": "H100 SXM", "memory_source": "emulated",
                                "offered": {"checkpointed": ["Block"], "peak_allocated_bytes": 120_000_000}}))
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "verify", str(CKPT), "--plan", str(plan), *QUICK,
                             "--out-dir", str(runs), "-o", str(out), "--", "--steps", "100000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = runs / "A-peak" / "progress.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (progress.exists() and '"step"' in progress.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stderr + stdout
    verified = json.loads(out.read_text())   # what was measured before the Ctrl-C is kept
    assert not verified["passed"] and verified["timing"]["interrupted"] == "SIGINT"
    assert verified["timing"]["fixes"][0]["loss"]["verdict"] == "same" and verified["memory"]["b"] is None
    console = " ".join(stdout.split())
    assert "checkpoint Block:" in console and "stopped before the plan was judged" in console


def test_a_datasets_own_len_whatever_it_does_never_breaks_the_loader_probe():
    """The probe asks each dataset its length (the plan's dataset bound): a user's __len__ may raise, return
    a negative, a bool or a float; the length is then unknown, and nothing else changes."""
    from hypothesis import given
    from hypothesis import strategies as st

    from perfaudit.collect.probes.loader import _length

    @given(st.one_of(st.integers(-5, 1 << 40), st.booleans(), st.floats(allow_nan=True), st.none(), st.text(max_size=2)),
           st.booleans())
    def check(value, raises):
        class Data:
            def __len__(self):
                if raises:
                    raise RuntimeError("lazy dataset")
                return value
        n = _length(Data())
        expected = (None if raises or not isinstance(value, int) or value < 0 or value > sys.maxsize
                    else int(value))   # len() itself: a bool is an int, a float is refused
        assert n == expected
    check()


def test_the_option_behind_a_loaders_batch_size_is_read_from_any_file_without_failing(tmp_path):
    """The plan reads the user's script for the option that sets batch_size (`dest=` or the option's name);
    any text, valid Python or not, gives an option or none, never an error."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.static.batch_option import batch_option

    script = tmp_path / "train.py"
    script.write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('-b', '--bs', dest='batch')\n"
                      "cfg = p.parse_args()\nloader = DataLoader(data,\n    batch_size=cfg.batch)\n")
    assert batch_option(str(script), 5) == ("--bs", 3) and batch_option(str(script), 2) is None

    @settings(max_examples=80, deadline=None)
    @given(st.text(max_size=300), st.integers(-2, 20))
    def check(text, line):
        script.write_text(text)
        found = batch_option(str(script), line)
        assert found is None or (isinstance(found[0], str) and isinstance(found[1], int))
    check()


CKPT = ROOT / "tests" / "scripts" / "ckpt_trainer.py"


def test_a_checkpointing_plan_is_a_block_that_ran_checkpointed_and_freed_memory(tmp_path):
    """Tip T14: the script's repeated Block (4 a step) run checkpointed; offered because that run's step
    peaked lower, with what its recompute cost here."""
    out = tmp_path / "plan.json"
    proc = perfaudit("plan", "--checkpoint", str(CKPT), "--out-dir", str(tmp_path / "runs"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    plan = json.loads(out.read_text())
    base, offered = plan["runs"][0], plan["offered"]
    assert plan["candidates"][0] == {"class": "Block", "calls_per_step": 4}   # Stack is called once, Linear is torch's
    assert offered == plan["runs"][1] and offered["checkpointed"] == ["Block"] and offered["ran"]
    assert offered["peak_allocated_bytes"] < 0.9 * base["peak_allocated_bytes"]
    assert (Path(offered["run_dir"]) / "trace.json.gz").exists() and plan["class_line"] == 10
    console = " ".join(proc.stdout.split())
    assert "checkpoint Block: it ran, and freed" in console and "(class Block at ckpt_trainer.py:10)" in console
    assert "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)" in console


def test_a_step_over_its_memory_gets_just_enough_blocks_checkpointed_and_the_plan_verifies(tmp_path):
    """pytorch#194696's loop ("checkpoint a few more layers, rerun") done by the plan: under a budget the step
    as it is exceeds (155 MB reserved), only the first blocks the every-block run's saving says are needed are
    checkpointed, that run fits, and verify --plan runs the same subset; a budget even every block cannot meet
    gets no plan and why."""
    out = tmp_path / "plan.json"
    proc = perfaudit("plan", "--checkpoint", str(CKPT), "--memory-budget", "0.145", "--out-dir",
                     str(tmp_path / "runs"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    plan = json.loads(out.read_text())
    base, every, offered = plan["runs"][0], plan["runs"][1], plan["offered"]
    assert base["peak_reserved_bytes"] > 145e6 == plan["usable_bytes"] == plan["budget_bytes"]
    assert every["first"] is None and 1 <= offered["first"] < 4 and offered == plan["runs"][-1]
    assert offered["peak_reserved_bytes"] <= 145e6 and every["peak_allocated_bytes"] < offered["peak_allocated_bytes"]
    console = " ".join(proc.stdout.split())
    assert f"checkpoint the first {offered['first']} of the 4 Block calls: it ran" in console
    assert "as it is the step does not fit" in console and f"if i < {offered['first']} else block(x)" in console
    # verified as a user would: the same blocks checkpointed, the loss step for step as without, the peak as said
    proc = perfaudit("verify", str(CKPT), "--plan", str(out), *QUICK, "--out-dir", str(tmp_path / "verify"),
                     "-o", str(tmp_path / "verified.json"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    verified = json.loads((tmp_path / "verified.json").read_text())
    assert verified["passed"] and verified["memory"]["b"]["peak_reserved_bytes"] <= 145e6
    assert verified["timing"]["fixes"][0]["name"] == f"checkpoint the first {offered['first']} Block"
    assert verified["timing"]["fixes"][0]["loss"]["verdict"] == "same" and verified["speed_per"] == "step"
    a, b = verified["memory"]["a"], verified["memory"]["b"]
    assert abs(b["peak_allocated_bytes"] / offered["peak_allocated_bytes"] - 1) < 0.1
    assert b["peak_allocated_bytes"] < a["peak_allocated_bytes"]


def test_a_budget_even_every_block_cannot_meet_gets_no_plan_and_how_far_over():
    from rich.console import Console

    from perfaudit.report.plan_report import render_checkpoint_console
    from perfaudit.verify.checkpoint_plan import CheckpointPlan, Run, _to_fit
    plan = CheckpointPlan("train.py", target="H100 SXM", budget=100_000_000, source="emulated")
    base = Run([], 145_000_000, 155_000_000, 100.0, "a", 0)
    every = Run(["Block"], 118_000_000, 134_000_000, 135.0, "b", 4)
    plan.runs = [base, every]
    _to_fit(plan, "train.py", [], None, base, every, None)   # no run: nothing smaller than every block to try
    console = Console(record=True, width=200)
    render_checkpoint_console(plan, console)
    text = console.export_text()
    assert plan.offered is None and "as it is the step does not fit: 0.155 GB reserved, over the 0.100 GB" in text
    assert "no plan: even with every Block checkpointed the step reserved 0.13 GB, over the 0.10 GB" in text


def test_a_batch_plans_runs_take_about_as_many_samples_as_the_scripts_not_as_many_steps():
    """On a CPU a batch 12x larger is a step 12x longer: verify's B takes about A's samples (at least 3 measured
    steps a run, for an interval over the rounds), so a plan is verified in about the time of its script."""
    from perfaudit.api import RunOptions
    from perfaudit.verify.plan_verify import PlanSpec, _variant_b
    spec = PlanSpec("batch", "H100 SXM", "emulated", 99_000_000, base_batch=128, batch=1496, option="--batch-size")
    b = _variant_b(spec, ["--epochs", "3"], RunOptions(warmup=3, steps=15))
    assert b.overrides == {"warmup": 1, "steps": 3} and b.args == ["--epochs", "3", "--batch-size", "1496"]
    spec = PlanSpec("batch", "H100 SXM", "emulated", 99_000_000, base_batch=16, batch=64)
    b = _variant_b(spec, [], RunOptions(warmup=3, steps=15))
    assert b.overrides == {"batch_scale": 4.0, "warmup": 1, "steps": 4} and b.samples == 64
    # two rounds (--rounds 2): enough steps a run for an interval of B over them
    assert _variant_b(spec, [], RunOptions(warmup=3, steps=15), rounds=2).overrides["steps"] == 4
    assert _variant_b(spec, [], RunOptions(warmup=3, steps=15), rounds=1).overrides["steps"] == 8


def test_a_batch_plans_loss_fails_verify_only_when_it_diverges():
    """vae.py sums its loss over the batch: at 1,496 instead of 128 samples its mean loss was 9.4x A's, which a
    fix's loss check calls changed. A larger batch changes the loss by design; only a loss gone NaN or inf fails."""
    from perfaudit.verify.plan_verify import PlanSpec, batch_loss
    from perfaudit.verify.stats import LossCheck
    spec = PlanSpec("batch", "H100 SXM", "emulated", 99_000_000, base_batch=128, batch=1496)
    changed = batch_loss(LossCheck("changed", "mean loss 6.5e+05 against A's 7.0e+04", False), spec)
    assert changed.passed and changed.verdict == "not compared" and "a batch of 1496 instead of 128" in changed.detail
    diverged = LossCheck("diverged", "B's loss became nan where A's stayed finite", False)
    assert batch_loss(diverged, spec) is diverged


def test_a_plan_whose_step_holds_more_than_it_promised_fails_verify_and_says_by_how_much():
    from rich.console import Console

    from perfaudit.report.plan_report import render_verification
    from perfaudit.verify.ab import FixVerdict, Verification
    from perfaudit.verify.plan_verify import Peak, PlanSpec, PlanVerification, _judge
    from perfaudit.verify.stats import LossCheck
    spec = PlanSpec("checkpoint", "H100 SXM", "emulated", 60_000_000, classes=["Block"])
    timing = Verification("train.py", [], 3, 3, 15, "cpu", [FixVerdict("checkpoint Block", [], [])], "runs")
    timing.verdicts[0].loss = LossCheck("same", "all 45 steps equal to A's", True)
    v = PlanVerification(spec, timing, [], Peak(145_000_000, 155_000_000, 85_000_000_000, 0),
                         Peak(118_000_000, 134_000_000, 85_000_000_000, 0), device="emulated CUDA device, H100 SXM")
    _judge(v)
    console = Console(record=True, width=200)
    render_verification(v, console)
    text = console.export_text()
    assert not v.passed and "PLAN FAILED: with the plan the step held 118.0 MB, more than the 60.0 MB the plan " \
                            "predicted (+10% allowed)" in text and "verify failed: see above" in text
    v.failures.clear()
    v.spec.predicted_allocated = 117_600_000
    _judge(v)
    assert v.passed, v.failures   # within 10 % of the prediction, lower than A's, within the GPU


def test_a_plan_whose_runs_all_waited_for_a_cpu_says_its_throughput_was_not_measured():
    """On a busy machine every run of B may wait for a CPU held by other processes: none is counted, and the
    console says so instead of leaving the throughput out without a word."""
    from rich.console import Console

    from perfaudit.report.plan_report import render_verification
    from perfaudit.verify.ab import FixVerdict, Verification
    from perfaudit.verify.plan_verify import PlanSpec, PlanVerification
    from perfaudit.verify.stats import speed_change
    spec = PlanSpec("batch", "H100 SXM", "emulated", 99_000_000, base_batch=16, batch=128)
    timing = Verification("train.py", [], 1, 1, 3, "cpu", [FixVerdict("--batch-size 128", [], [])], "runs")
    timing.verdicts[0].speed = speed_change([[0.0004] * 3], [])
    v = PlanVerification(spec, timing, ["--batch-size", "128"])
    console = Console(record=True, width=300)
    render_verification(v, console)
    text = console.export_text()
    assert "throughput not measured (batch 16 → 128): every run of B waited for a CPU held by other processes" \
        in text and "samples/s here" not in text


def test_a_model_with_no_repeated_block_of_its_own_gets_no_checkpointing_plan(tmp_path):
    proc = perfaudit("plan", "--checkpoint", str(SCRIPT), "--out-dir", str(tmp_path / "runs"))
    assert proc.returncode == 1, proc.stderr
    assert "no plan: no module class of the script's own is called more than once" in " ".join(proc.stdout.split())


def test_ctrl_c_in_a_checkpointed_run_keeps_the_run_as_it_is(tmp_path):
    plan, stdout, stderr, code = _interrupted(tmp_path, "--checkpoint", CKPT, folder="checkpoint-Block")
    assert code == 130, stderr
    assert [r["checkpointed"] for r in plan["runs"]] == [[]] and plan["offered"] is None
    assert plan["why_not"].startswith("interrupted (SIGINT)") and "ran as it is" in " ".join(stdout.split())


def test_a_loader_a_library_rebuilds_from_a_scaled_one_is_not_scaled_twice():
    """Lightning rebuilds the user's DataLoader from its attributes (to add a distributed sampler): the rebuilt
    loader gets the scaled batch_size, which must not be scaled again; a loader over another dataset is."""
    code = ("from perfaudit.collect import batch_scale\nbatch_scale.install(8.0)\nimport torch\n"
            "from torch.utils.data import DataLoader, TensorDataset\n"
            "ds, other = TensorDataset(torch.zeros(100, 2)), TensorDataset(torch.zeros(50, 2))\n"
            "a = DataLoader(ds, 4)\nb = DataLoader(a.dataset, batch_size=a.batch_size, shuffle=False)\n"
            "c = DataLoader(other, batch_size=2)\nprint(a.batch_size, b.batch_size, c.batch_size)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout.split() == ["32", "32", "16"], proc.stderr


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=300), JSON.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({"plan": st.sampled_from(["batch", "checkpoint"]), "offered": JSON,
                                        "points": JSON, "runs": JSON, "option": JSON,
                                        "budget_bytes": JSON}).map(lambda v: json.dumps(v).encode())))
def test_a_plan_file_whatever_it_holds_is_read_or_refused_in_one_line(tmp_path, data):
    """`verify --plan FILE` reads a file the user hands it: a plan, or one line saying why not (UsageError,
    exit 2), never a traceback."""
    from perfaudit.errors import UsageError
    from perfaudit.verify.plan_verify import read_plan
    path = tmp_path / "plan.json"
    path.write_bytes(data)
    try:
        spec = read_plan(str(path))
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert spec.kind in ("batch", "checkpoint") and spec.predicted_allocated >= 0
    assert spec.classes if spec.kind == "checkpoint" else spec.batch >= 1 and spec.base_batch >= 1


def test_verify_of_a_plan_that_offers_nothing_says_so_in_one_line(tmp_path):
    out = tmp_path / "plan.json"
    out.write_text(json.dumps({"plan": "batch", "offered": None, "why_not": "the step already fills the H100"}))
    proc = perfaudit("verify", str(SCRIPT), "--plan", str(out))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "the plan offers nothing to verify (the step already fills the H100)" in proc.stderr
