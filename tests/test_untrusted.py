"""Files perfaudit did not write in this process, read as hostile (perfaudit.untrusted): a history committed
to a repository, a report or baseline from another run, a notebook. Generated inputs give records or one
named error, never another exception; a bad line of a history is skipped and named, and only its tail is
read; the commands say one line and exit 2 on a file that is not what it should be."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRACES, needs_program, perfaudit
from perfaudit import untrusted
from perfaudit.usecases.history import HistoryEntry, read_history

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=4), max_leaves=20)
hostile_line = st.one_of(
    json_value.map(lambda v: json.dumps(v).encode()),              # any JSON, of any shape
    st.binary(max_size=60),                                         # any bytes (invalid UTF-8 too)
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),        # nesting past any recursion limit
    st.sampled_from([b'{"step_ms": 1e999}', b'{"step_ms": NaN}', b'{"commit": ["x"]}', b'{"findings": [1]}',
                     b'{"script": "a.py", "step_ms": 1e308}', b'\xff\xfe{"a": 1}']),
)


@PROPERTY
@given(lines=st.lists(hostile_line, max_size=12), last=st.integers(0, 15), trailing=st.booleans())
def test_a_history_of_any_lines_gives_entries_and_named_skips_only(tmp_path, lines, last, trailing):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if trailing else b""))
    entries, notes = untrusted.tail(str(path), HistoryEntry, last, "a history entry")
    assert all(isinstance(e, dict) for e in entries) and len(entries) <= last
    for note in notes:
        assert note.startswith(f"{path}:") and note.endswith("skipped")
    # what was kept: the entries among the file's last `last` lines, in order (a naive read of it all)
    data = path.read_bytes()
    physical = data.split(b"\n")[:-1] if data.endswith(b"\n") else (data.split(b"\n") if data else [])
    window = physical[-last:] if last else []
    assert entries == [entry for line in window if line.strip() for entry in _entry(line)]
    assert len(notes) == sum(1 for line in window if line.strip() and not _entry(line))


def _entry(line: bytes) -> list:
    try:
        return [untrusted.decode(line, HistoryEntry)]
    except untrusted.Unreadable:
        return []


@PROPERTY
@given(data=st.one_of(st.binary(max_size=200), json_value.map(lambda v: json.dumps(v).encode())))
def test_any_file_read_as_a_report_baseline_or_notebook_is_read_or_named(tmp_path, data):
    from perfaudit.collect.inprocess.notebook import read_cells
    from perfaudit.errors import UsageError
    from perfaudit.policy import baseline
    from perfaudit.report.json_report import read_report
    path = tmp_path / "file.json"
    path.write_bytes(data)
    for read in (read_report, baseline.read, read_cells):
        try:
            read(str(path))
        except UsageError as exc:  # Unreadable is one: one line, exit code 2
            assert "\n" not in str(exc)


@PROPERTY
@given(outcome=st.dictionaries(st.sampled_from(["exception", "message", "site", "steps_recorded", "warmup",
                                                "after_window", "exit_code", "timeout_s", "signal", "by", "oom"]),
                               json_value, max_size=6),
       kind=st.sampled_from(["window_complete", "completed", "exited", "os_exit", "raised", "interrupted", "timeout",
                             "crashed", "spawned", "internal_error", "other"]),
       gpu_path=json_value | st.fixed_dictionaries({"outcome": st.just("raised"), "site": json_value}))
def test_a_stored_reports_outcome_is_said_in_one_line_whatever_it_holds(outcome, kind, gpu_path):
    """`fix --from` and `diff` read a report.json's outcome back: what the header and the exit code say of it (its
    CUDA path's failure, `gpu_path`, too) never fails on what a hand-edited file holds."""
    from perfaudit.findings import Report
    from perfaudit.outcome import describe
    outcome = {**outcome, "outcome": kind, "gpu_path": gpu_path}
    said = describe(outcome)
    assert said is None or isinstance(said, str)
    assert Report([], [], [], outcome=outcome).script_failed in (True, False)


def test_only_the_tail_of_a_large_history_is_parsed(tmp_path):
    """A 40 MB history costs what its last entries cost: memory is bounded by the lines read, not the file."""
    path = tmp_path / "perfaudit-history.jsonl"
    line = json.dumps({"commit": "a" * 40, "script": "train.py", "device": "cpu", "step_ms": 5.0,
                       "steps_ms": [5.0] * 200, "findings": []}) + "\n"
    with open(path, "w") as f:
        for _ in range(40 * 2**20 // len(line)):
            f.write(line)
    tracemalloc.start()
    entries, notes = read_history(str(path), last=100)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(entries) == 100 and not notes
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MB held to read 100 entries"


def _repo_with_history(tmp_path, history_bytes: bytes | None = None):
    needs_program("git", why="history reads the commit from git")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    if history_bytes is not None:
        (repo / "perfaudit-history.jsonl").write_bytes(history_bytes)
    return repo


def test_history_skips_and_names_hostile_lines_and_keeps_working(tmp_path):
    """Invalid UTF-8, a number out of range, a list where a string belongs and deep nesting: each line is
    named and skipped; the good entries are judged and the new one appended (CI is not broken)."""
    good = json.dumps({"commit": "a" * 40, "script": "train.py", "device": "cpu", "step_ms": 5.0}).encode()
    lines = [good, b"\xff\xfe not utf-8", b'{"step_ms": 1e999}', b'{"script": ["train.py"]}', b"[" * 5000 + b"]" * 5000,
             good]
    repo = _repo_with_history(tmp_path, b"\n".join(lines) + b"\n")
    trace = repo / "trace.json.gz"  # a real trace, in the repository (history's file is the trace's repository's)
    trace.write_bytes((TRACES / "tracelens_h100" / "bert_small_inference_h100.json.gz").read_bytes())
    proc = perfaudit("history", str(trace), cwd=repo, env={"COLUMNS": "1000"})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for number in (2, 3, 4, 5):
        assert f"perfaudit-history.jsonl:{number}" in proc.stdout, proc.stdout
    after = (repo / "perfaudit-history.jsonl").read_bytes().split(b"\n")
    assert after[:len(lines)] == lines and json.loads(after[len(lines)])  # appended, nothing lost


def test_a_history_link_out_of_the_repository_is_not_followed(tmp_path):
    outside = tmp_path / "users_file.txt"
    outside.write_text("the user's own file\n")
    repo = _repo_with_history(tmp_path)
    os.symlink(outside, repo / "perfaudit-history.jsonl")
    trace = repo / "trace.json.gz"  # a real trace, in the repository (history's file is the trace's repository's)
    trace.write_bytes((TRACES / "tracelens_h100" / "bert_small_inference_h100.json.gz").read_bytes())
    proc = perfaudit("history", str(trace), cwd=repo)
    assert proc.returncode == 2 and "link out of the repository" in proc.stderr, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert outside.read_text() == "the user's own file\n"


@pytest.mark.parametrize("name,content,command", [
    ("baseline.json", b'{"fingerprints": [["not", "a string"]]}', ("lint", "train.py", "--baseline", "{}")),
    ("baseline.json", b"[" * 100_000 + b"]" * 100_000, ("lint", "train.py", "--baseline", "{}")),
    ("nb.ipynb", b'{"cells": [3]}', ("run", "{}")),
    ("nb.ipynb", b'{"cells": [{"cell_type": "code", "source": ["x = 1\\n", null]}]}', ("run", "{}")),
    ("nb.ipynb", b'{"cells": [], "metadata": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}", ("run", "{}")),
])
def test_a_hostile_baseline_or_notebook_is_one_line_and_exit_2(tmp_path, name, content, command):
    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(3)\n")
    path = tmp_path / name
    path.write_bytes(content)
    proc = perfaudit(*[part.format(path) for part in command], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert str(path) in proc.stderr or name in proc.stderr


def test_diff_refuses_a_corrupt_report_instead_of_placing_findings_from_the_trace(tmp_path, sample_report):
    run_dir = sample_report("sync_bad.py")["run"]["run_dir"]
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / "report.json").write_text('{"tool": {"name": "perfaudit"}, "findings": [{"rule": 7}]}')
    proc = perfaudit("diff", run_dir, str(copy))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "report.json" in proc.stderr and "not a perfaudit report" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
