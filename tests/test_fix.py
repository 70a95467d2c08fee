"""`perfaudit fix`: every rule with an automatic fix turns its finding on its bad sample into an edit;
without --write nothing changes on disk; with --write the file still runs and the rule is gone; the
edits keep the code's layout and refuse what is not the user's or not mechanical."""
from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SAMPLES, perfaudit
from perfaudit.engine.loader import load_rules
from perfaudit.findings import Cost, Finding, Location
from perfaudit.fix.catalog import FIX_KINDS
from perfaudit.fix.edits import EDITS
from perfaudit.fix.plan import plan_fixes

FIXABLE = [(r.id, e.script) for r in load_rules() if r.autofix for e in r.examples
           if e.expect == "fire" and e.script and (e.severity or r.severity) != "info"]


def test_every_fix_kind_has_an_edit_and_every_rule_names_a_known_kind():
    assert set(EDITS) == set(FIX_KINDS)
    assert {r.autofix["kind"] for r in load_rules() if r.autofix} <= set(FIX_KINDS)
    assert len({r.id for r in load_rules() if r.autofix}) >= 10


# bad samples whose pattern has no mechanical fix, and the reason `fix` gives
NOT_MECHANICAL = {("DEBUG001", "own_profiler_bad.py"): "own torch.profiler",
                  ("SYNC001", "sync_forms_bad.py"): "to change mechanically"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("rule,script", FIXABLE, ids=[f"{r}-{Path(s).stem}" for r, s in FIXABLE])
def test_fix_turns_the_finding_on_its_bad_sample_into_a_diff_and_writes_nothing(rule, script, sample_report, run_dir):
    name = Path(script).name
    report = sample_report(name)
    assert rule in {f["rule"] for f in report["findings"]}
    before = _digest(SAMPLES / name)
    proc = perfaudit("fix", script, "--from", str(Path(run_dir) / f"{name}.report.json"), "--select", rule)
    assert _digest(SAMPLES / name) == before, "fix without --write changed the file"
    if (rule, name) in NOT_MECHANICAL:  # said, with the reason, and nothing else
        assert proc.returncode == 0 and proc.stdout == "", proc.stdout
        assert "not fixed automatically" in proc.stderr and NOT_MECHANICAL[rule, name] in proc.stderr, proc.stderr
        return
    assert proc.returncode == 1, proc.stderr          # as `ruff --diff`: changes to make
    assert proc.stdout.startswith(f"--- a/{script}"), proc.stdout + proc.stderr
    changed = [line for line in proc.stdout.splitlines()[2:] if line[:1] in "+-"]
    assert changed
    assert f" {rule} " in proc.stderr and "would fix" in proc.stderr


# a statement removed and a host read restructured, written and run again; every kind's edit (keywords
# added to a constructor or a factory among them) is checked on its diff above
WRITE_CASES = ["debug_bad.py", "sync_bad.py"]


@pytest.mark.parametrize("name", WRITE_CASES)
def test_fix_write_leaves_a_script_that_runs_and_is_no_longer_flagged(name, tmp_path):
    script = tmp_path / name
    shutil.copy(SAMPLES / name, script)
    fixed = perfaudit("fix", str(script), "--write", "--warmup", "1", "--steps", "2", "--out-dir", str(tmp_path / "a"))
    assert fixed.returncode == 0, fixed.stderr
    assert "fixed " in fixed.stderr and script.read_text() != (SAMPLES / name).read_text()
    rules = {line.split()[1] for line in fixed.stderr.splitlines() if line.startswith("  ") and ":" in line.split()[0]}
    assert rules
    out = tmp_path / "after.json"
    rerun = perfaudit("run", str(script), "--warmup", "2", "--steps", "3", "--out-dir", str(tmp_path / "b"),
                      "-f", f"json={out}")
    assert rerun.returncode == 0, rerun.stderr
    after = json.loads(out.read_text())
    assert after["run"]["outcome"]["outcome"] == "window_complete"
    still = {f["rule"] for f in after["findings"] if f["rule"] in rules and f["severity"] != "info"}
    assert not still, f"still flagged after fix --write: {still}"


# -- the edits on code written in other ways -------------------------------------------------------------
def _finding(rule: str, path: Path, *lines: int, kind: str, params: dict | None = None, origin: str = "run") -> Finding:
    text = path.read_text().splitlines()
    locs = tuple(Location(str(path), n, text[n - 1].strip()) for n in lines)
    return Finding(rule, rule, ("T01",), "warning", "m", "f", Cost(1.0, 0.1), locs, evidence={"origin": origin},
                   autofix={"kind": kind, "params": params or {}})


def _write(tmp_path: Path, code: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def test_a_multi_line_call_keeps_its_layout_and_its_comments(tmp_path):
    path = _write(tmp_path, '''\
        from torch.utils.data import DataLoader
        loader = DataLoader(
            dataset,          # the training split
            batch_size=64,
            shuffle=True,
        )
        ''')
    plan = plan_fixes([_finding("DATA001", path, 2, kind="loader_workers", params={"workers": 4})], str(tmp_path))
    assert plan.files[0].fixed == textwrap.dedent('''\
        from torch.utils.data import DataLoader
        loader = DataLoader(
            dataset,          # the training split
            batch_size=64,
            shuffle=True,
            num_workers=4,
            persistent_workers=True,
        )
        ''')


def test_a_factory_moved_to_the_device_is_made_there_and_a_numpy_arrays_copy_is_left_alone(tmp_path):
    """`torch.randn(...).to(device)` takes `device=`; `torch.from_numpy(...)` has no `device=` (it wraps host
    memory): adding one would break the line, so it is no factory to the edit."""
    path = _write(tmp_path, """\
        import torch
        noise = torch.randn(8, 4).to(device)
        batch = torch.from_numpy(array).to(device)
        """)
    plan = plan_fixes([_finding("COPY002", path, 2, 3, kind="create_on_device")], str(tmp_path))
    fixed = plan.files[0].fixed.splitlines()
    assert fixed[1] == "noise = torch.randn(8, 4, device=device)" and fixed[2] == "batch = torch.from_numpy(array).to(device)"


@pytest.mark.parametrize("deterministic", [False, True, None])
def test_the_cudnn_flag_is_left_to_a_script_that_asks_for_reproducible_runs(tmp_path, deterministic):
    """CUDNN001's edit turns benchmarking on, except in a script that sets cudnn.deterministic = True (the
    reproducibility recipe): there it is refused with the reason, and the file is left as it was."""
    path = _write(tmp_path, """\
        import torch
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        """)
    plan = plan_fixes([_finding("CUDNN001", path, 3, kind="cudnn_benchmark_on",
                                params={"deterministic": deterministic})], str(tmp_path))
    if deterministic:
        assert not plan.files and "cudnn.deterministic = True" in plan.not_fixed[0].reason, plan.not_fixed
    else:
        assert plan.files[0].fixed.splitlines()[2] == "torch.backends.cudnn.benchmark = True", plan.files

@pytest.mark.parametrize("given,wanted", [("", "logger=False, benchmark=True)"),
                                          (", benchmark=False", "logger=False, benchmark=True)"),
                                          (", benchmark=args.bench", None)])
def test_a_lightning_trainer_takes_the_cudnn_flag_as_its_option(tmp_path, given, wanted):
    """Under Lightning, CUDNN001 sits at the Trainer (which sets the flag for its run, over any assignment made
    before it): the edit passes `benchmark=True` there, turns a literal False over, and leaves a computed value
    to the user with the reason."""
    path = _write(tmp_path, f"""\
        import lightning as L
        trainer = L.Trainer(max_epochs=3, logger=False{given})
        trainer.fit(model)
        """)
    plan = plan_fixes([_finding("CUDNN001", path, 2, kind="cudnn_benchmark_on")], str(tmp_path))
    if wanted:
        assert plan.files[0].fixed.splitlines()[1].endswith(wanted), plan.files[0].fixed
        assert "cudnn.benchmark" not in plan.files[0].fixed
    else:
        assert not plan.files and "set it to True there" in plan.not_fixed[0].reason, plan.not_fixed

def test_torchs_own_per_step_checks_are_turned_off_where_they_were_asked_for(tmp_path):
    """SYNC001 on torch's reads (the emulated device saw them at these lines): the clip's non-finite check and
    a distribution's argument checks are turned off at the call; a flag the script computes is its own, and
    a line with no such call is left with its reason."""
    path = _write(tmp_path, '''\
        from torch.distributions import Categorical, Normal
        dist = Normal(mu, std)
        pick = Categorical(logits=logits, validate_args=args.validate)
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=args.strict)
        loss = -dist.log_prob(actions).mean()
        ''')
    plan = plan_fixes([_finding("SYNC001", path, 2, 3, 4, 5, 6, kind="accumulate_detached")], str(tmp_path))
    assert plan.files[0].fixed == textwrap.dedent('''\
        from torch.distributions import Categorical, Normal
        dist = Normal(mu, std, validate_args=False)
        pick = Categorical(logits=logits, validate_args=args.validate)
        clip_grad_norm_(params, 1.0, error_if_nonfinite=False)
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=args.strict)
        loss = -dist.log_prob(actions).mean()
        ''')
    assert [c.what for c in plan.changes] == ["Normal(..., validate_args=False)",
                                              "clip_grad_norm_(..., error_if_nonfinite=False)"]


def test_zero_filled_grads_become_none_and_anomaly_blocks_are_unwrapped(tmp_path):
    path = _write(tmp_path, '''\
        import torch
        for step in range(10):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.data.zero_()
            with torch.autograd.detect_anomaly():
                loss = model(x).sum()
                loss.backward()  # keep this comment
            opt.step()
        ''')
    plan = plan_fixes([_finding("GRAD001", path, 5, kind="set_to_none"),
                       _finding("DEBUG001", path, 6, kind="debug_off")], str(tmp_path))
    assert plan.files[0].fixed == textwrap.dedent('''\
        import torch
        for step in range(10):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad = None
            loss = model(x).sum()
            loss.backward()  # keep this comment
            opt.step()
        ''')


def test_what_is_not_mechanical_is_refused_with_its_reason(tmp_path):
    path = _write(tmp_path, '''\
        kwargs = {"num_workers": 1} if cuda else {}
        loader = DataLoader(ds, batch_size=8, **kwargs)
        other = DataLoader(ds, num_workers=args.workers)
        with torch.autograd.profiler.profile() as prof:
            train()
        if loss.item() > 5:
            pass
        torch.autograd.set_detect_anomaly(args.debug)
        ''')
    plan = plan_fixes([_finding("DATA001", path, 2, 3, kind="loader_workers", params={"workers": 2}),
                       _finding("DEBUG001", path, 4, kind="debug_off"),
                       _finding("SYNC001", path, 6, kind="accumulate_detached"),
                       _finding("DEBUG001", path, 8, kind="debug_off")], str(tmp_path))
    assert not plan.files and not plan.changes
    reasons = {(n.rule, n.where.rsplit(":", 1)[1]): n.reason for n in plan.not_fixed}
    assert "**kwargs" in reasons[("DATA001", "2")]
    assert "args.workers" in reasons[("DATA001", "3")]
    assert "result is used" in reasons[("DEBUG001", "4")]
    assert "mechanically" in reasons[("SYNC001", "6")]
    assert "turn `args.debug` off" in reasons[("DEBUG001", "8")]  # the user's debug switch stays theirs


def test_the_memory_history_left_on_is_removed_and_a_switch_is_left_to_the_user(tmp_path):
    path = _write(tmp_path, '''\
        import torch
        if torch.cuda.is_available():
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        torch.cuda._record_memory_history(enabled="state")
        torch.cuda.memory._record_memory_history(args.history)
        torch.cuda.memory._record_memory_history(enabled=None)
        ''')
    plan = plan_fixes([_finding("DEBUG001", path, 3, kind="debug_off"), _finding("DEBUG001", path, 4, kind="debug_off"),
                       _finding("DEBUG001", path, 5, kind="debug_off")], str(tmp_path))
    assert plan.files[0].fixed == textwrap.dedent('''\
        import torch
        if torch.cuda.is_available():
            pass
        torch.cuda.memory._record_memory_history(args.history)
        torch.cuda.memory._record_memory_history(enabled=None)
        ''')
    reasons = {n.where.rsplit(":", 1)[1]: n.reason for n in plan.not_fixed}
    assert list(reasons) == ["5"] and "turn `args.history` off" in reasons["5"]  # the switch is theirs


HISTORY_ARGS = st.lists(st.sampled_from(["'all'", "'state'", "None", "True", "False", "flag", "cfg.on", "1", "*a",
                                         "max_entries=10", "enabled=None", "enabled='all'", "enabled=x",
                                         "context='alloc'", "stacks='python'", "**kw"]), max_size=4)


@settings(max_examples=60, deadline=None)
@given(HISTORY_ARGS, st.sampled_from(["torch.cuda.memory._record_memory_history", "_record_memory_history",
                                      "torch.cuda._record_memory_history"]), st.booleans())
def test_the_history_edit_of_any_call_gives_code_that_parses_or_changes_nothing(args, name, nested):
    """The call as a user's file may write it (any arguments, in any order, in a block or not): the edit
    removes it, refuses it, or leaves it, and what it writes parses."""
    import libcst as cst
    keywords = [a for a in args if "=" in a or a.startswith("**")]
    call = f"{name}({', '.join([a for a in args if a not in keywords] + keywords)})"
    source = f"if on:\n    {call}\n" if nested else f"{call}\n"
    try:
        cst.parse_module(source)
    except cst.ParserSyntaxError:
        return  # not Python: no edit is asked of it
    edit = EDITS["debug_off"]({2 if nested else 1}, {})
    fixed = cst.MetadataWrapper(cst.parse_module(source)).visit(edit).code
    cst.parse_module(fixed)
    assert (fixed != source) == bool(edit.outcome.changed)


def test_files_that_are_not_the_users_or_changed_since_the_run_are_left_alone(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / ".git").mkdir()
    outside = _write(tmp_path, "optimizer.zero_grad(set_to_none=False)\n", "elsewhere.py")
    lib = tmp_path / "project" / "venv" / "lib" / "site-packages"
    lib.mkdir(parents=True)
    installed = _write(lib, "optimizer.zero_grad(set_to_none=False)\n", "lib.py")
    broken = _write(project, "optimizer.zero_grad(set_to_none=False)\ndef (:\n", "broken.py")
    stale = _write(project, "optimizer.zero_grad(set_to_none=False)\n", "stale.py")
    findings = [_finding("GRAD001", p, 1, kind="set_to_none") for p in (outside, installed, broken, stale)]
    stale.write_text("# a line added since the run\noptimizer.zero_grad(set_to_none=False)\n")
    static = _finding("GRAD001", _write(project, "opt.zero_grad(set_to_none=False)\n", "s.py"), 1,
                      kind="set_to_none", origin="static")
    plan = plan_fixes(findings + [static], str(project))
    assert not plan.files
    reasons = [n.reason for n in plan.not_fixed]
    assert any("outside the project" in r for r in reasons)
    assert any("installed package" in r for r in reasons)
    assert any("does not parse" in r for r in reasons)
    assert any("changed since the run" in r for r in reasons)
    assert any("source only" in r for r in reasons)


def test_fix_on_a_clean_script_changes_nothing(sample_report, run_dir):
    report = sample_report("clean_loop.py")
    proc = perfaudit("fix", "sample_scripts/clean_loop.py", "--from", str(Path(run_dir) / "clean_loop.py.report.json"))
    assert proc.returncode == 0 and proc.stdout == ""
    assert "nothing to fix" in proc.stderr
    assert not [f for f in report["findings"] if f["autofix"] and f["severity"] != "info"]


def test_fix_from_something_that_is_not_a_run_is_one_clear_line(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    proc = perfaudit("fix", str(ROOT / "sample_scripts" / "clean_loop.py"), "--from", str(bad))
    assert proc.returncode == 2 and "not a perfaudit report" in proc.stderr and "Traceback" not in proc.stderr


def test_bias_off_edits_only_the_layer_a_batchnorm_follows(realistic_reports):
    """A one-line Sequential with a head: the Linear before BatchNorm loses its bias, the head keeps it. A
    helper that builds a layer with and without a norm after it (a GAN's `block(..., normalize=False)`)
    is not edited: bias=False there would change the first layer, and `fix` says why. (From the shared
    runs of the realistic scripts: `fix --from` their reports.)"""
    realistic = ROOT / "tests" / "realistic"
    report = realistic_reports["cuda_config_device.py"]["report_path"]
    proc = perfaudit("fix", str(realistic / "cuda_config_device.py"), "--from", report, "--select", "BN001")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # there is something to fix
    edited = [line[1:] for line in proc.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(edited) == 1 and "nn.Linear(64, 128, bias=False), nn.BatchNorm1d(128)" in edited[0], proc.stdout
    assert "nn.Linear(128, 4))" in edited[0]  # the head's bias stays
    report = realistic_reports["gan_blocks.py"]["report_path"]
    proc = perfaudit("fix", str(realistic / "gan_blocks.py"), "--from", report, "--select", "BN001")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "gan_blocks.py:18 BN001 this Linear(...) also built layers the run saw with no BatchNorm" in said, said


def test_a_dataset_on_the_gpu_gets_no_workers_and_no_pinning(realistic_reports):
    """Worker processes cannot make CUDA tensors (CUDA does not start in a forked worker) and pin_memory
    raises "cannot pin" on them: DATA001 says to index whole batches, and `fix` edits neither."""
    import libcst as cst
    script = ROOT / "tests" / "realistic" / "gpu_resident_dataset.py"
    report = realistic_reports[script.name]["report_path"]
    proc = perfaudit("fix", str(script), "--from", report, "--select", "DATA001,COPY001")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0 and "nothing to fix automatically" in said, said
    assert "DATA001 its Dataset returns tensors on the GPU, which worker processes cannot make" in said
    edit = EDITS["pin_memory"]({25}, {"loader_line": 25, "loader_here": True, "loader_on_device": True})
    source = script.read_text()
    assert cst.MetadataWrapper(cst.parse_module(source)).visit(edit).code == source
    assert edit.outcome.refused and "cannot pin" in edit.outcome.refused[0][1]


@pytest.mark.timing
def test_an_optimizer_the_trainer_builds_is_fixed_at_the_option_that_names_it(realistic_reports):
    """Hugging Face's Trainer builds AdamW from `optim="adamw_torch"` (no fused=): OPT001 stands on that option's
    line, not on `trainer.train()`, says so, and `fix` names the fused one there."""
    script = ROOT / "tests" / "realistic" / "hf_trainer_optim.py"
    report = realistic_reports[script.name]
    opt = next(f for f in report["run"]["findings"] if f["rule"] == "OPT001")
    assert "built by transformers from optim=\"adamw_torch\"" in opt["message"]
    assert any('optim="adamw_torch_fused"' in note for note in opt["notes"])
    proc = perfaudit("fix", str(script), "--from", report["report_path"], "--select", "OPT001")
    assert proc.returncode == 1, proc.stderr
    changed = [line for line in proc.stdout.splitlines()[2:] if line[:1] in "+-"]
    assert len(changed) == 2 and '"adamw_torch"' in changed[0] and 'optim="adamw_torch_fused"' in changed[1], changed


@pytest.mark.timing
def test_fixes_on_the_emulated_cuda_path_are_the_gpus_and_name_the_scripts_own_options(realistic_reports):
    """unet_segmentation.py ran its CUDA branch on the emulated device: OPT001's edit is fused=True (foreach is
    CUDA's default already, and was the edit), made beside CUDNN001's statement put above the same line (which
    once moved the line from under it: "nothing at that line"); DATA001's worker count comes from `--workers`,
    and the refusal names that option and the value to pass."""
    script = ROOT / "tests" / "realistic" / "unet_segmentation.py"
    report = realistic_reports[script.name]
    proc = perfaudit("fix", str(script), "--from", report["report_path"], "--select", "OPT001,CUDNN001,DATA001")
    said = proc.stdout + proc.stderr
    assert re.search(r"unet_segmentation.py:98\s+OPT001\s+Adam\(\.\.\., fused=True\)", said), said
    assert re.search(r"unet_segmentation.py:98\s+CUDNN001\s+torch.backends.cudnn.benchmark = True", said), said
    assert re.search(r"DATA001\s+num_workers comes from `args.workers`, the script's option --workers \(at line 24\): "
                     r"run it with `--workers \d+`", said), said
    assert "nothing at that line" not in said, said


def test_a_loader_a_partial_makes_gets_its_workers_in_the_partial(realistic_reports, tmp_path):
    """partial_loader_norm_wrapper.py's Trainer calls `loader_factory(...)`, a `partial(DataLoader, num_workers=0,
    ...)` made in main(): DATA001 stands on the call, and `fix` sets the workers in the partial (it was "nothing
    at that line", a change to make by hand)."""
    script = ROOT / "tests" / "realistic" / "partial_loader_norm_wrapper.py"
    proc = perfaudit("fix", str(script), "--from", realistic_reports[script.name]["report_path"], "--select", "DATA001")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "DATA001 partial(DataLoader, ..., num_workers=2, persistent_workers=True), which makes the loader at " \
           "line 53" in said, said
    changed = [line for line in proc.stdout.splitlines()[2:] if line[:1] in "+-"]
    assert len(changed) == 4 and "partial(DataLoader, batch_size=args.batch_size, num_workers=2," in changed[2], changed
    # away from the finding's line the edit moves no line below it: another fix between them still lands
    path = _write(tmp_path, '''\
        from functools import partial
        import torch.utils.data
        make = partial(
            torch.utils.data.DataLoader,
            batch_size=8,
        )
        def build(ds):
            conv = nn.Conv2d(3, 8, 3)
            return make(ds, shuffle=True), conv
        ''')
    plan = plan_fixes([_finding("DATA001", path, 9, kind="loader_workers", params={"workers": 2}),
                       _finding("BN001", path, 8, kind="conv_bias_off")], str(tmp_path))
    assert plan.files[0].fixed.splitlines()[4:8] == [
        "    batch_size=8, num_workers=2, persistent_workers=True,", ")", "def build(ds):",
        "    conv = nn.Conv2d(3, 8, 3, bias=False)"], plan.files[0].fixed


LOADER_CODE = st.sampled_from([
    "make = partial(DataLoader, batch_size=8, num_workers=0)", "make = functools.partial(data.DataLoader, **opts)",
    "self.make = partial(DataLoader)", "make = partial()", "make = partial(*args)", "make = partial(x=DataLoader)",
    "a = b = partial(DataLoader, num_workers=n)", "Trainer(make=partial(DataLoader, num_workers=0,))",
    "loader = make(ds, shuffle=True)", "loader = self.make(ds)", "loader = make", "x = make(make(ds))",
    "loader = DataLoader(ds, num_workers=0)", "make = partial(DataLoader, num_workers=w,\n    pin_memory=True,\n)",
    "make = partial(Other, num_workers=0)", "def f(make=partial(DataLoader)):\n    return make(1)"])


@settings(max_examples=150, deadline=None)
@given(st.lists(LOADER_CODE, min_size=1, max_size=8), st.integers(0, 12), st.integers(-1, 4))
def test_the_workers_edit_of_any_file_gives_code_that_parses_or_changes_nothing(fragments, line, workers):
    import libcst as cst
    source = "\n".join(fragments) + "\n"
    edit = EDITS["loader_workers"]({line}, {"workers": workers})
    fixed = cst.MetadataWrapper(cst.parse_module(source)).visit(edit).code
    cst.parse_module(fixed)
    assert (fixed != source) == bool(edit.outcome.changed)
    assert len(fixed.splitlines()) - len(source.splitlines()) <= 2 * len(edit.outcome.changed)


def test_a_diff_applies_where_the_command_ran(tmp_path):
    """`perfaudit fix proj/train.py > fix.diff` from a folder that is no repository: the diff names the file
    from there, so `git apply fix.diff` (or `patch -p1`) applies it where the command ran."""
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(SAMPLES / "debug_bad.py", project / "train.py")
    proc = perfaudit("fix", "proj/train.py", "--warmup", "1", "--steps", "2", "--out-dir", str(tmp_path / "run"),
                     cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.startswith("--- a/proj/train.py"), proc.stdout + proc.stderr
    (tmp_path / "fix.diff").write_text(proc.stdout)
    applied = subprocess.run(["git", "apply", "fix.diff"], cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert (project / "train.py").read_text() != (SAMPLES / "debug_bad.py").read_text()


ACCELERATE_CODE = st.sampled_from([
    "from accelerate import Accelerator", "from accelerate import (\n    Accelerator,\n)", "import accelerate",
    "from accelerate import *", "from accelerate import DataLoaderConfiguration", "import accelerate as acc",
    "from accelerate.utils import set_seed", "acc = Accelerator()", "acc = Accelerator(mixed_precision='fp16',)",
    "acc = accelerate.Accelerator(cpu=False)", "acc = Accelerator(**kwargs)", "acc = Accelerator(dataloader_config=cfg)",
    "acc = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))",
    "acc = Accelerator(\n    mixed_precision='bf16',\n)", "f(Accelerator(), Accelerator(1))", "Accelerator = None",
    "loader = DataLoader(ds)"])


@settings(max_examples=150, deadline=None)
@given(st.lists(ACCELERATE_CODE, min_size=1, max_size=8), st.sampled_from(["Accelerate", "", "Lightning"]))
def test_the_accelerate_copy_edit_of_any_file_gives_code_that_parses_and_moves_no_line(fragments, framework):
    """Where Accelerate moves the batches, COPY001's edit gives the file's Accelerator
    `dataloader_config=DataLoaderConfiguration(non_blocking=True)` (its import added to `from accelerate
    import`), in place: no line below moves (the run's other findings stand at their lines)."""
    import libcst as cst
    source = "\n".join(fragments) + "\n"
    edit = EDITS["pin_memory"](set(), {"framework": framework})
    fixed = cst.MetadataWrapper(cst.parse_module(source)).visit(edit).code
    cst.parse_module(fixed)
    assert len(fixed.splitlines()) == len(source.splitlines())
    assert (fixed != source) == bool(edit.outcome.changed)
    if framework != "Accelerate":
        assert fixed == source
    for _, what in edit.outcome.changed:
        assert what == "Accelerator(..., dataloader_config=DataLoaderConfiguration(non_blocking=True))"
    if edit.outcome.changed:  # the name the edit wrote is one the file imports
        tree = ast.parse(fixed)
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "accelerate"
                 for a in n.names}
        modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.asname is None}
        assert "DataLoaderConfiguration" in names or (
            "accelerate" in modules and "accelerate.DataLoaderConfiguration(non_blocking=True)" in fixed), fixed
