"""A trace recorded in another checkout (a GPU machine's, a colleague's), analysed here: its findings land on
the lines of the local copy of the script, and nothing is read outside the folders the user trusts."""
from __future__ import annotations

import json
import os
import shutil

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, perfaudit
from perfaudit.facts.registry import moved_checkout

H100 = ROOT / "tests" / "data" / "h100_runs" / "traces" / "host_tensor_bad.json.gz"


def test_a_gpu_trace_from_another_checkout_is_located_in_this_one(tmp_path):
    """The H100 trace of host_tensor_bad.py was recorded in /work/main; a checkout elsewhere holding the same
    script gets its findings at sample_scripts/host_tensor_bad.py:14, COPY002 included (it reads the line to
    see the tensor made on the host); without the script, nothing is located in a file it cannot read."""
    checkout = tmp_path / "checkout"
    (checkout / "sample_scripts").mkdir(parents=True)
    shutil.copy(ROOT / "sample_scripts" / "host_tensor_bad.py", checkout / "sample_scripts")
    shutil.copy(H100, checkout / "run.json.gz")
    out = tmp_path / "r.json"
    assert perfaudit("analyze", "run.json.gz", "-f", f"json={out}", cwd=checkout).returncode == 0
    found = {f["rule"]: f for f in json.loads(out.read_text())["findings"]}
    assert [(loc["path"], loc["line"]) for loc in found["COPY002"]["locations"]] == \
        [("sample_scripts/host_tensor_bad.py", 14)]
    assert "noise" in found["COPY002"]["message"]  # the line's own code, read from the local copy

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(H100, bare / "run.json.gz")
    assert perfaudit("analyze", "run.json.gz", "-f", f"json={out}", cwd=bare).returncode == 0
    assert "COPY002" not in {f["rule"] for f in json.loads(out.read_text())["findings"]}


text = st.text(alphabet=st.sampled_from("/ab.\x00\\:~ "), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.one_of(text, st.none(), st.integers(), st.lists(text, max_size=2)),
       st.one_of(text, st.none(), st.integers()), st.lists(text, max_size=3))
def test_hostile_recorded_folders_map_onto_trusted_ones_or_nothing(cwd, script, roots):
    """The recorded `cwd` and `script` are a trace's metadata, input like any other: a mapping comes back only
    onto one of the caller's folders, never a traceback."""
    mapped = moved_checkout({"cwd": cwd, "script": script}, tuple(roots))
    assert isinstance(mapped, dict) and len(mapped) <= 1
    for value in mapped.values():
        assert value in {os.path.realpath(r) for r in roots if r}


def test_reads_torch_makes_inside_a_constructor_or_a_wrapped_function_are_at_the_users_call(tmp_path):
    """On an H200, policy_gradient.py's syncs come from inside torch: Normal's argument checks (the profiler names
    the frame `__init__`), clip_grad_norm_'s non-finite check (named `_no_grad_wrapper`, its decorator's),
    Normal.sample's check of its std. Each lands on the user's line that calls into torch (`Normal(`,
    `clip_grad_norm_(`, `.sample()`), the lines the script marks, with what turns it off; not on the
    function's `def` line."""
    from markers import expected_lines
    script = ROOT / "tests" / "realistic" / "policy_gradient.py"
    checkout = tmp_path / "checkout"
    (checkout / "tests" / "realistic").mkdir(parents=True)
    shutil.copy(script, checkout / "tests" / "realistic")
    shutil.copy(ROOT / "tests" / "data" / "h200_runs" / "traces" / "policy_gradient.json.gz", checkout / "run.json.gz")
    out = tmp_path / "r.json"
    assert perfaudit("analyze", "run.json.gz", "-f", f"json={out}", cwd=checkout).returncode == 0
    sync = next(f for f in json.loads(out.read_text())["findings"] if f["rule"] == "SYNC001")
    assert {loc["line"] for loc in sync["locations"]} == expected_lines(script, "SYNC001", "run")
    assert all(loc["exact"] for loc in sync["locations"])
    for turned_off in ("validate_args=False", "error_if_nonfinite=False", ".rsample()"):
        assert turned_off in sync["message"]


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), text, st.sampled_from(["torch/distributions/normal.py", "torch/../os.py", "/", ".py",
                                                   "torch/nn/utils/clip_grad.py", "nosuchpkg/x.py", "torch/x/..py"])))
def test_a_traces_library_paths_give_names_or_nothing(path):
    """The library file a trace names below the user's frame is read for the names it defines: any path gives a
    set, never a traceback, and one that climbs out of its package gives nothing."""
    from perfaudit.source import library_names
    names = library_names(path)
    assert isinstance(names, frozenset)
    if path == "torch/distributions/normal.py":
        assert "Normal" in names
    if path and "/../" in f"/{path}":
        assert not names


def test_an_emulated_run_analysed_away_from_its_script_finds_what_the_run_found(realistic_reports, tmp_path):
    """bf16_weights_lm.py's batches index a host tensor with its own elements (`data[i:i + block] for i in ix`):
    host reads, no GPU waits for, which its emulated run does not report. `analyze` of that run's folder from a
    folder that does not hold the script (its source unread there) reported them as 128 syncs a step: the reads
    the emulated device saw of device values, line by line, decide it there too."""
    report = realistic_reports["bf16_weights_lm.py"]
    out = tmp_path / "a.json"
    assert perfaudit("analyze", report["run_dir"], "-f", f"json={out}", cwd=tmp_path).returncode == 0
    analysed = {f["rule"] for f in json.loads(out.read_text())["findings"]}
    assert "SYNC001" not in analysed and analysed == {f["rule"] for f in report["run"]["findings"]}, analysed
