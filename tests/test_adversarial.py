"""Nothing lost, nothing damaged, round 3: what `fix --write` does to the files it edits, diffs that
apply, hostile inputs (rule files, traces, paths), signals, and leftovers. Each test failed before the
change it guards."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, TRACES, matching_processes, needs_program, needs_shared, on_a_small_disk, perfaudit, sarif_schemas
from perfaudit.collect.run.rundir import MARK, prune_runs
from perfaudit.errors import TraceError, UsageError
from perfaudit.fix.plan import FileFix, FixPlan
from perfaudit.trace import load_trace

SYNC_SCRIPT = textwrap.dedent('''\
    import torch
    from torch import nn

    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = 0.0
    for step in range(100_000):
        optimizer.zero_grad()
        loss = model(torch.randn(16, 8)).pow(2).mean()
        loss.backward()
        optimizer.step()
        total += loss.item()
    ''')


# -- fix --write keeps what it edits -------------------------------------------------------------------------
def _plan(path, original: str, fixed: str, bom: bool = False) -> FixPlan:
    return FixPlan([FileFix(str(path), path.name, original, fixed, bom)])


def test_write_keeps_inode_mode_links_line_endings_and_bom(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(b"\xef\xbb\xbfx = 1\r\ny = 2\r\n")
    script.chmod(0o755)
    inode = script.stat().st_ino
    link = tmp_path / "link.py"
    link.symlink_to(script)
    hard = tmp_path / "hard.py"
    os.link(script, hard)
    decoy = tmp_path / "train.py.perfaudit-tmp"  # a file of the user's with the old fixed temp name
    decoy.write_text("mine\n")
    _plan(script, "x = 1\r\ny = 2\r\n", "x = 1\r\ny = 3\r\n", bom=True).write()
    assert script.read_bytes() == b"\xef\xbb\xbfx = 1\r\ny = 3\r\n"
    assert script.stat().st_ino == inode and stat.S_IMODE(script.stat().st_mode) == 0o755
    assert link.is_symlink() and hard.read_bytes() == script.read_bytes()
    assert decoy.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.py", "link.py", "train.py", "train.py.perfaudit-tmp"]


def test_write_is_all_or_nothing(tmp_path):
    first, second = tmp_path / "a.py", tmp_path / "b"
    first.write_text("a = 1\n")
    second.mkdir()  # cannot be written as a file: the second write fails
    plan = FixPlan([FileFix(str(first), "a.py", "a = 1\n", "a = 2\n"), FileFix(str(second), "b", "", "b = 2\n")])
    with pytest.raises(UsageError, match="nothing was changed"):
        plan.write()
    assert first.read_text() == "a = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b"]  # no copy left behind


def test_fix_refuses_a_read_only_file_and_never_writes_reports_over_the_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SYNC_SCRIPT)
    before = script.read_text()
    for args in (["-o", str(script)], ["-f", f"html={script}"], ["--baseline-write", str(script)]):
        proc = perfaudit("run", str(script), *args)
        assert proc.returncode == 2 and "refusing" in proc.stderr, (args, proc.stderr)
    assert script.read_text() == before
    script.chmod(0o444)
    proc = perfaudit("fix", str(script), "--write", "--out-dir", str(tmp_path / "run"))
    assert "read-only" in proc.stderr, proc.stderr
    assert script.read_text() == before and stat.S_IMODE(script.stat().st_mode) == 0o444


# -- diffs apply ---------------------------------------------------------------------------------------------
def test_every_diff_applies_with_git_apply_and_patch_from_the_project_root(tmp_path):
    git = needs_program("git", why="the diff is applied with git apply")
    patch = needs_program("patch", why="the diff is applied with patch -p1")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run([git, "init", "-q", str(repo)], check=True)
    crlf = repo / "src" / "train.py"  # Windows line endings and no newline at the end of the file
    crlf.write_bytes(SYNC_SCRIPT.rstrip("\n").replace("\n", "\r\n").encode())
    proc = subprocess.run([sys.executable, "-m", "perfaudit", "fix", str(crlf), "--out-dir", str(tmp_path / "run")],
                          cwd=repo / "src", capture_output=True, timeout=300)  # from a subfolder; bytes: CRs kept
    diff = proc.stdout
    assert proc.returncode == 1 and diff.startswith(b"--- a/src/train.py"), proc.stdout + proc.stderr
    assert b"\\ No newline at end of file" in diff
    (tmp_path / "fix.diff").write_bytes(diff)
    original = crlf.read_bytes()
    check = subprocess.run([git, "apply", "--check", str(tmp_path / "fix.diff")], cwd=repo, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    subprocess.run([patch, "-p1", "-s", "-i", str(tmp_path / "fix.diff")], cwd=repo, check=True)
    fixed = crlf.read_bytes()
    assert fixed != original and b"loss.detach()" in fixed and b"\r\n" in fixed and not fixed.endswith(b"\n")


def test_fix_from_a_run_of_another_script_is_refused(tmp_path, sample_report, run_dir):
    sample_report("sync_bad.py")
    other = tmp_path / "other.py"
    other.write_text(SYNC_SCRIPT)
    proc = perfaudit("fix", str(other), "--from", f"{run_dir}/sync_bad.py.report.json")
    assert proc.returncode == 2 and "not" in proc.stderr and "sync_bad.py" in proc.stderr
    # the same report from another folder: the paths are read where the report was made
    proc = perfaudit("fix", str(ROOT / "sample_scripts" / "sync_bad.py"), "--from", f"{run_dir}/sync_bad.py.report.json",
                     cwd=tmp_path)
    assert proc.returncode == 1 and "+++ b/sample_scripts/sync_bad.py" in proc.stdout, proc.stderr


# -- hostile inputs ------------------------------------------------------------------------------------------
def test_rule_files_with_yaml_aliases_fifos_and_giant_traces_are_refused_at_once(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    laughs = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
                                                   for p, c in zip("abcdefgh", "bcdefghi"))
    (rules / "LAUGH001.yaml").write_text(laughs)
    proc = perfaudit("rules", "--rules-dir", str(rules), timeout=60)
    assert proc.returncode == 2 and "aliases" in proc.stderr
    os.remove(rules / "LAUGH001.yaml")
    os.mkfifo(rules / "PIPE001.yaml")  # a FIFO in a rules folder: skipped, not opened
    assert perfaudit("rules", "--rules-dir", str(rules), timeout=60).returncode == 0
    giant = tmp_path / "giant.json.gz"
    with gzip.open(giant, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [{"ph": "X", "name": "')
        for _ in range(80):  # 80 MiB in one name
            f.write(b"A" * (1 << 20))
        f.write(b'", "ts": 1, "dur": 1}]}')
    with pytest.raises(TraceError, match="without a single string"):
        load_trace(str(giant))


def test_traces_through_a_pipe_and_fifos_in_a_folder(tmp_path):
    trace = needs_shared(TRACES / "hta" / "cuda_event_sync_a100.json.gz")
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(trace, folder)
    os.mkfifo(folder / "stuck.json")  # nobody writes to it: opening it would hang
    assert perfaudit("analyze", str(folder), timeout=60).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "perfaudit", "analyze", "-", "-f", "json"], cwd=ROOT,
                          input=gzip.decompress(trace.read_bytes()), capture_output=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["run"]["device"].startswith("NVIDIA")


def test_a_trace_with_more_events_than_kept_says_what_was_dropped(tmp_path):
    trace = needs_shared(TRACES / "hta" / "negative_queue_a100_rank0.json.gz")
    proc = perfaudit("analyze", str(trace), "-f", "json", env={"PERFAUDIT_MAX_EVENTS": "20000"})
    report = json.loads(proc.stdout)
    assert any("not read" in n and "PERFAUDIT_MAX_EVENTS" in n for n in report["notes"]), report["notes"]


def test_foreign_traces_do_not_quote_local_files_in_the_html_report(tmp_path):
    secret = tmp_path / "outside" / "secret.py"
    secret.parent.mkdir()
    secret.write_text("API_KEY = 'do-not-ship'\n" * 20)
    project = tmp_path / "project"
    project.mkdir()
    events = [{"ph": "X", "cat": "python_function", "name": f"{secret}(1): <module>", "ts": 0, "dur": 100,
               "pid": 1, "tid": 1},
              {"ph": "X", "cat": "python_function", "name": "<built-in method item of Tensor object at 0x1>",
               "ts": 10, "dur": 5, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 11, "dur": 3, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 100, "pid": 1, "tid": 1}]
    trace = project / "foreign.json"
    trace.write_text(json.dumps({"perfaudit": {"source_roots": ["/"]}, "traceEvents": events}))
    page = project / "r.html"
    proc = perfaudit("analyze", str(trace), "-f", f"html={page}", "-f", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "do-not-ship" not in page.read_text() and "do-not-ship" not in proc.stdout


def test_nan_thresholds_markup_in_paths_and_unparseable_files_fail_loudly(tmp_path):
    (tmp_path / "perfaudit.toml").write_text("[thresholds.DATA001]\nmin_share_pct = nan\n")
    proc = perfaudit("lint", str(ROOT / "sample_scripts" / "data_bad.py"), cwd=tmp_path)
    assert proc.returncode == 2 and "finite" in proc.stderr
    odd = tmp_path / "odd[" / "]dir"  # a path holding "[/]", which rich would read as markup
    odd.mkdir(parents=True)
    proc = perfaudit("run", str(odd / "missing[/].py"))
    assert proc.returncode == 2 and "missing[/].py" in proc.stderr and "Traceback" not in proc.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    proc = perfaudit("lint", str(broken), str(ROOT / "sample_scripts" / "sync_good.py"), "--fail-on", "error")
    assert proc.returncode == 1 and "could not be parsed" in proc.stdout.replace("\n", " ")


def test_sarif_is_valid_for_sources_outside_the_working_directory(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    script = tmp_path / "train.py"
    script.write_text(SYNC_SCRIPT)
    out = tmp_path / "r.sarif"
    proc = perfaudit("lint", str(script), "-f", f"sarif={out}", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    sarif = json.loads(out.read_text())
    for schema in sarif_schemas():
        jsonschema.validate(sarif, schema)
    location = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uri"].startswith("file:///") and "uriBaseId" not in location


# -- runs: what was recorded is kept, what the script started is stopped ------------------------------------
def test_ctrl_c_during_the_export_keeps_the_trace(tmp_path):
    run = tmp_path / "run"
    # steps of ~25 MB of trace: the export takes a second or more, time enough for the Ctrl-C
    proc = subprocess.Popen([sys.executable, "-m", "perfaudit", "run", str(ROOT / "tests" / "scripts" / "op_heavy.py"),
                             "--max-trace-mb", "60", "--out-dir", str(run), "-f", f"json={tmp_path / 'r.json'}", "400"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = run / "progress.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (progress.exists() and '"exporting"' in progress.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=240)
    assert proc.returncode == 130
    assert (run / "trace.json.gz").exists() and json.loads((run / "result.json").read_text())["trace"]
    assert json.loads((tmp_path / "r.json").read_text())["run"]["steps"] >= 1


def test_a_running_run_folder_is_never_pruned(tmp_path):
    root = tmp_path / "runs"
    running, old = root / "20260101-000000-000000", root / "20250101-000000-000000"
    for folder in (old, running):
        folder.mkdir(parents=True)
    (old / MARK).write_text("perfaudit run folder\n")
    (running / MARK).write_text(f"perfaudit run folder\nrunning pid={os.getpid()}\n")  # a live owner
    os.utime(running / MARK, (1, 1))  # the oldest by its mark
    prune_runs(str(root), keep_runs=1)
    assert running.exists()


def test_a_run_folder_the_user_named_is_never_pruned(tmp_path, monkeypatch):
    """A run kept for `diff` with `--out-dir .perfaudit/runs/baseline`: the default runs after it prune
    the oldest of their own folders, never the one the user named, even once it is the oldest."""
    from perfaudit.collect.run.rundir import DEFAULT_ROOT, finish_run_dir, make_run_dir
    monkeypatch.chdir(tmp_path)
    named = make_run_dir(os.path.join(DEFAULT_ROOT, "baseline"))
    finish_run_dir(named)
    os.utime(os.path.join(named, MARK), (1, 1))  # the oldest by its mark
    made = []
    for _ in range(3):
        made.append(make_run_dir(None, keep_runs=2))
        finish_run_dir(made[-1])
        time.sleep(0.01)
    assert os.path.isdir(named) and os.path.isdir(made[-1]) and not os.path.isdir(made[0])


def test_a_helper_in_its_own_session_does_not_outlive_the_run(tmp_path):
    marker = f"perfaudit-helper-{os.getpid()}-{time.time_ns()}"
    script = tmp_path / "train.py"
    script.write_text(f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',"
                      f" {marker!r}], start_new_session=True)\n" + SYNC_SCRIPT)
    proc = perfaudit("run", str(script), "--out-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    time.sleep(0.5)
    assert not matching_processes(marker)


def test_sys_exit_messages_newlines_in_names_and_quoted_labels(tmp_path):
    odd = tmp_path / "tr\nain.py"  # a newline in the script's name
    odd.write_text(SYNC_SCRIPT.replace("for step", "with torch.profiler.record_function('phase \"a\"'):\n    pass\n"
                                       "for step"))
    out = tmp_path / "r.json"
    proc = perfaudit("run", str(odd), "--out-dir", str(tmp_path / "run"), "-f", f"json={out}", env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    sync = next(f for f in json.loads(out.read_text())["findings"] if f["rule"] == "SYNC001")
    assert sync["location"]["path"] == str(odd) and sync["location"]["line"] == 14
    assert "tr\\nain.py:14" in proc.stdout  # shown as one line
    stop = tmp_path / "stop.py"
    stop.write_text(SYNC_SCRIPT.replace("total += loss.item()", "total += loss.item()\n    if step == 8:\n"
                                        "        raise SystemExit('checkpoint directory is full')"))
    proc = perfaudit("run", str(stop), "--warmup", "1", "--steps", "20", "--out-dir", str(tmp_path / "run2"))
    assert proc.returncode == 3 and "checkpoint directory is full" in proc.stdout.replace("\n", " ")


# -- the one writer (perfaudit/files.py) ------------------------------------------------------------------
@pytest.mark.parametrize("code,said", [(28, "no space left on the device"), (30, "read-only file system"),
                                       (13, "permission denied")])
def test_a_write_that_fails_leaves_the_file_as_it_was_and_says_why(tmp_path, monkeypatch, code, said):
    """A full disk (or a read-only one, or no permission) while a report or baseline is written: the file
    that was there keeps its bytes, no temporary file is left, and the error is one line naming the cause."""
    from perfaudit import files
    from perfaudit.errors import WriteError
    from perfaudit.policy import baseline
    from perfaudit.report.outputs import write_text
    target = tmp_path / "report.json"
    target.write_text('{"kept": true}\n')

    def full(fd):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(files.os, "fsync", full)
    for write in (lambda: write_text(str(target), "{}" * 10_000), lambda: baseline.write(str(target), [])):
        with pytest.raises(WriteError) as caught:
            write()
        assert target.read_text() == '{"kept": true}\n'
        assert said in str(caught.value) and "unchanged" in str(caught.value) and caught.value.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_report_is_never_written_over_an_input_of_the_command(tmp_path):
    """`lint train -o train` (a script without .py) and `analyze t.json -o t.json`: refused by the file's
    identity (a hard link under another name too), the input intact, exit 2."""
    script = tmp_path / "train"
    script.write_text(SYNC_SCRIPT)
    link = tmp_path / "report-out"
    os.link(script, link)
    for out in (script, link):
        proc = perfaudit("lint", str(script), "-o", str(out))
        assert proc.returncode == 2 and "input of this command" in proc.stderr, proc.stderr
    assert script.read_text() == SYNC_SCRIPT
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    proc = perfaudit("analyze", str(trace), "-f", f"json={trace}")
    assert proc.returncode == 2 and "input of this command" in proc.stderr and trace.read_text() == '{"traceEvents": []}'


def test_a_history_line_cut_short_by_a_full_disk_is_never_glued_to_the_next(tmp_path, monkeypatch):
    """An append that fails leaves the history as it was; one whose last line an older perfaudit left cut
    short gets its new line on a line of its own, so no entry is lost with it."""
    from perfaudit import files
    from perfaudit.usecases.history import append, read_history
    history = tmp_path / "perfaudit-history.jsonl"
    append(str(history), {"commit": "a", "step_ms": 1.0})
    before = history.read_bytes()

    def full(fd):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr(files.os, "fsync", full)
        with pytest.raises(Exception, match="cannot append to the history: no space left"):
            append(str(history), {"commit": "b", "step_ms": 2.0})
    assert history.read_bytes() == before
    history.write_bytes(before + b'{"commit": "c", "st')  # cut short by an older writer
    append(str(history), {"commit": "d", "step_ms": 4.0})
    entries, notes = read_history(str(history))
    assert [e["commit"] for e in entries] == ["a", "d"] and len(notes) == 1


def _two_file_plan(tmp_path):
    from perfaudit.fix.plan import FileFix, FixPlan
    files = []
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"x = 1  # {name}\n")
        files.append(FileFix(str(tmp_path / name), name, f"x = 1  # {name}\n", f"x = 2  # {name}, fixed\n"))
    return FixPlan(files=files)


def test_fix_write_on_a_full_disk_puts_every_file_back(tmp_path, monkeypatch):
    """The second file's write fails for lack of space: the first, already written, is put back, the
    second too (it may have been cut short), no copy is left, and the error says nothing was changed."""
    from perfaudit.errors import UsageError
    from perfaudit.fix import plan as fixplan
    written = []
    real = fixplan._write_in_place

    def full_on_the_second(path, data, opened=lambda: None):
        opened()
        written.append(path)
        if len(written) == 2:
            with open(path, "r+b") as out:  # a short write, as a full disk leaves it
                out.write(data[:3])
            raise OSError(28, "No space left on device")
        real(path, data)
    monkeypatch.setattr(fixplan, "_write_in_place", full_on_the_second)
    plan = _two_file_plan(tmp_path)
    with pytest.raises(UsageError, match="nothing was changed: no space left on the device"):
        plan.write()
    assert [(tmp_path / n).read_text() for n in ("a.py", "b.py")] == ["x = 1  # a.py\n", "x = 1  # b.py\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py", "b.py"]


def test_fix_write_keeps_the_copy_of_a_file_it_could_not_put_back(tmp_path, monkeypatch):
    """When even putting a file back fails, its copy stays beside it and the error names it."""
    from perfaudit.errors import UsageError
    from perfaudit.fix import plan as fixplan
    calls = []

    def always_full(path, data, opened=lambda: None):
        opened()
        calls.append(path)
        with open(path, "r+b") as out:
            out.write(data[:3])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fixplan, "_write_in_place", always_full)
    with pytest.raises(UsageError, match="could not put everything back") as caught:
        _two_file_plan(tmp_path).write()
    backup = next(p for p in tmp_path.iterdir() if p.name.endswith(".perfaudit-backup"))
    assert str(backup) in str(caught.value) and backup.read_text() == "x = 1  # a.py\n"


def test_diff_never_writes_over_what_it_reads(tmp_path):
    """`diff r1 r1 -f json=r1/trace.json.gz` replaced the trace it had just compared, and `-f json=` a run
    folder's report.json replaced that report (fix --from then failed on it). A file inside a folder the
    command reads is refused up front; a hard link to an input, under any name, is refused by the writer
    itself (it knows every file the command read); a new file in that folder is fine."""
    run = tmp_path / "r1"
    run.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "derived" / "alloc_churn_mi250.json.gz", run / "trace.json.gz")
    original = (run / "trace.json.gz").read_bytes()
    os.link(run / "trace.json.gz", tmp_path / "elsewhere.json")
    for target, said in ((run / "trace.json.gz", "in a folder this command reads"),
                         (tmp_path / "elsewhere.json", "input of this command")):
        proc = perfaudit("diff", str(run), str(run), "-f", f"json={target}")
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = perfaudit("diff", str(run / "trace.json.gz"), str(run / "trace.json.gz"), "-f", f"json={run / 'trace.json.gz'}")
    assert proc.returncode == 2 and "input of this command" in proc.stderr, proc.stderr
    assert (run / "trace.json.gz").read_bytes() == original
    proc = perfaudit("diff", str(run), str(run), "-f", f"json={run / 'diff.json'}")
    assert proc.returncode == 0 and json.loads((run / "diff.json").read_text()), proc.stderr


def test_a_run_folder_on_a_full_disk_stops_at_once_and_says_so(tmp_path):
    """`run --out-dir` on a file system that fills up during the run (the script's own checkpoint took the
    room): the profiler's write fails (Kineto says nothing), result.json cannot be rewritten. The script is
    stopped at once (it trained on until the 600 s timeout, then the report blamed 'no trace recorded'),
    never run a second time, and the run ends with what it saw, one line naming the full disk, exit 2.
    A folder already full is refused before the script starts, under torchrun too."""
    starts, full = tmp_path / "starts", tmp_path / "full"
    full.mkdir()
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""\
        import torch
        from torch import nn
        open({str(starts)!r}, "a").write("start\\n")
        try:  # a checkpoint as large as the disk allows
            with open({str(full / "ckpt.bin")!r}, "wb") as f:
                while True:
                    f.write(bytes(1 << 20))
        except OSError:
            pass
        model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(20)])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(100_000):
            opt.zero_grad()
            model(torch.randn(8, 32)).sum().backward()
            opt.step()
    """))
    began = time.monotonic()
    proc = on_a_small_disk(f"{sys.executable} -m perfaudit run {script} --warmup 1 --steps 3 --out-dir {full}/run",
                            full, "20m")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert time.monotonic() - began < 120, "the script trained on after its window could not be saved"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("perfaudit: error: cannot write the run folder") and "no space left" in last, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert starts.read_text() == "start\n"  # run once: a full disk is not a crash to retry
    for launch in ((), ("--nproc-per-node", "2")):
        proc = on_a_small_disk(f"{sys.executable} -m perfaudit run {script} {' '.join(launch)} --out-dir {full}/run",
                                full, "64k")
        assert proc.returncode == 2 and "KB free on its disk" in proc.stderr, proc.stdout + proc.stderr
    assert starts.read_text() == "start\n"  # refused before the script started
