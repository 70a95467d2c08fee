"""Real code, not samples: training scripts written the way public ones are (trainer classes, main(),
next(iter(...)), comprehensions, helpers, CUDA-conditional code, logging intervals), with the expected
findings marked in each script. Every marked problem must be found at its line, and nothing at
warning or above may stand on an unmarked line. `python tests/test_realistic.py` prints the figures
the README quotes."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import REALISTIC_SCRIPTS as SCRIPTS
from conftest import ROOT, RealisticReports
from markers import located, marked, markers, quiet_lines

REALISTIC = ROOT / "tests" / "realistic"
pytestmark = pytest.mark.timing  # shares and waits measured in the run decide the findings


def check(path: Path, report: dict) -> list[str]:
    """What is wrong with one script's reports against its markers (empty: all good)."""
    problems = []
    run = report["run"]["findings"]
    measured = located(run, path.name, ("run", "both", "projected"))
    static_only = located(run, path.name, ("static",))
    for rule, line in sorted(marked(path, "run") - measured):
        problems.append(f"run missed {rule} at line {line}")
    loud = {(f["rule"], loc["line"]) for f in run if f["severity"] != "info" for loc in f["locations"]
            if Path(loc["path"]).name == path.name}
    for rule, line in sorted(loud - marked(path, "run")):
        problems.append(f"run warns {rule} at unmarked line {line}")
    for rule, line in sorted(static_only - marked(path, "lint")):
        problems.append(f"run shows a static-only {rule} at unmarked line {line}")
    anything = {(f["rule"], loc["line"]) for f in run for loc in f["locations"] if Path(loc["path"]).name == path.name}
    for rule, line in sorted(anything):  # `# ok: RULE`: not even an info finding may stand there
        if line in quiet_lines(path, rule, "run") and (rule, line) not in marked(path, "lint"):
            problems.append(f"run reports {rule} at line {line}, marked ok")
    unlocated = {f["rule"] for f in run if f["severity"] != "info" and not f["locations"]}
    for rule in sorted(unlocated - {r for _, _, r in markers(str(path))}):
        problems.append(f"run warns {rule} without a location")
    linted = located(report["lint"]["findings"], path.name, ("static", "run"))
    for rule, line in sorted(marked(path, "lint") - linted):
        problems.append(f"lint missed {rule} at line {line}")
    for rule, line in sorted(linted - marked(path, "lint")):
        problems.append(f"lint reports {rule} at unmarked line {line}")
    return problems


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_realistic_script_findings_match_its_markers(path, realistic_reports):
    report = realistic_reports[path.name]
    assert report["rc"] == 0, report["run"]["run"]["outcome"]
    assert report["run"]["run"]["steps"] >= 1, (report["run"]["run"]["outcome"], report["run"]["notes"])
    assert not check(path, report), check(path, report)


def test_a_helper_that_builds_every_stage_has_each_of_its_layers_counted(realistic_reports):
    """unet_segmentation.py's `conv_block()` builds the two Conv2d -> BatchNorm2d pairs of all five stages, two
    of them as wide as another: BN001 counts the five layers each line built, as they ran in a step (equal
    layers were once counted as one: 3, shown as "0.6/step" over five steps)."""
    bn = next(f for f in realistic_reports["unet_segmentation.py"]["run"]["findings"] if f["rule"] == "BN001")
    assert sorted((loc["line"], loc["count_per_step"]) for loc in bn["locations"]) == [(50, 5.0), (53, 5.0)], bn


def test_a_critic_stepping_five_times_a_generator_step_is_said_to(realistic_reports):
    """wgan_critic.py steps its critic five times per generator step. The note read the cadence from the window's
    counts, 6 critic steps holding 2 of the generator's: "once every 3". It is read from the steps between the
    generator's own since the start."""
    notes = [n for n in realistic_reports["wgan_critic.py"]["run"]["notes"] if "different cadences" in n]
    assert notes and "RMSprop (line 11) steps once every 5 of them" in notes[0], notes


def test_a_hostile_window_record_gives_a_cadence_or_nothing():
    """The optimizers' counts and order come from the trace, the user's file: any JSON there gives a note or
    none, and never a cadence made of a count perfaudit could not have written (a string, a negative, a bool)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfaudit.usecases.audit import _what_a_step_is

    class Trace:
        def __init__(self, window):
            self.probes = {"window": window, "probes": {}}

    values = st.recursive(st.none() | st.booleans() | st.integers(-5, 50) | st.floats() | st.text(max_size=3),
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                                         max_size=4), max_leaves=12)
    labels = st.sampled_from(["SGD (line 3)", "Adam (line 4)", "x"])

    @settings(max_examples=150, deadline=None)
    @given(st.dictionaries(labels, values, max_size=3) | values, st.lists(labels | values, max_size=30) | values)
    def check(counts, order):
        note = _what_a_step_is({}, Trace({"optimizer_steps": counts, "optimizer_order": order}))
        assert note is None or (isinstance(note, str) and "every -" not in note and "every 0" not in note), note

    check()


def test_a_worker_count_from_the_scripts_option_is_changed_through_that_option(realistic_reports):
    """unet_segmentation.py builds its loader with `num_workers=args.workers` (`--workers`, default 0): DATA001
    says to pass the option, with the count it recommends, and how to audit that run."""
    data = next(f for f in realistic_reports["unet_segmentation.py"]["run"]["findings"] if f["rule"] == "DATA001")
    note = next((n for n in data["notes"] if "option" in n), "")
    assert re.search(r"`--workers` \(at (\S*/)?unet_segmentation.py:24\)", note), data["notes"]
    assert re.search(r"`perfaudit run unet_segmentation.py -- --workers \d+` audits that run", note), note


def test_a_libraries_own_read_in_the_models_forward_names_the_option_that_removes_it(realistic_reports):
    """hf_custom_loop.py gives GPT-2 an all-ones attention mask: every forward reads it on the host (Transformers'
    check for padding, to run SDPA causal without it). SYNC001 names that read and the argument that removes it."""
    path = REALISTIC / "hf_custom_loop.py"
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "model(**batch)" in text)
    sync = next(f for f in realistic_reports["hf_custom_loop.py"]["run"]["findings"] if f["rule"] == "SYNC001")
    at = next(loc for loc in sync["locations"] if loc["line"] == line)
    assert "attention mask for padding" in at["detail"] and "attention_mask=None" in at["detail"], at


def test_a_batch_cut_from_a_numpy_array_is_a_copy_to_pin_not_a_tensor_to_make_on_the_device(realistic_reports):
    """dp_sgd_per_sample.py cuts each batch from NumPy arrays (`torch.from_numpy(x_all[idx]).to(device)`): host
    data, which no `device=` could make on the GPU. COPY001, told to pin it or keep the data on the device (no
    DataLoader is there to pin it); not COPY002, whose fix `torch.from_numpy(..., device=)` would not run.
    nanogpt_style.py's memmap'd batches, pinned and non_blocking, are clean (its markers)."""
    findings = realistic_reports["dp_sgd_per_sample.py"]["run"]["findings"]
    copy = next(f for f in findings if f["rule"] == "COPY001")
    assert "pin_memory().to(device, non_blocking=True)" in copy["fix"] and "DataLoader(" not in copy["fix"], copy
    assert not [f for f in findings if f["rule"] == "COPY002"]


def test_an_if_on_a_device_tensor_is_placed_at_its_own_line_beside_a_logged_item(realistic_reports):
    """multitask_tqdm.py guards its step with `if torch.isnan(norm):` and logs `loss.item()` and `float(norm)` in
    a tqdm postfix. The trace shows the `if`'s read as an op with no Python call, which the source search placed
    at the function's `.item()`: three reads a step at the postfix. The emulated run saw it at the `if`."""
    path = REALISTIC / "multitask_tqdm.py"
    lines = path.read_text().splitlines()
    guard = next(n for n, text in enumerate(lines, 1) if "if torch.isnan(norm)" in text)
    postfix = next(n for n, text in enumerate(lines, 1) if "set_postfix" in text)
    sync = next(f for f in realistic_reports[path.name]["run"]["findings"] if f["rule"] == "SYNC001")
    counts = [(loc["line"], loc["count_per_step"]) for loc in sync["locations"]]
    # one location a line, counts added up; the report orders them by measured cost, which load can flip
    assert sorted(counts) == [(guard, 1.0), (postfix, 2.0)], counts


def test_reads_of_one_statement_over_two_lines_are_counted_at_the_line_that_holds_them(realistic_reports):
    """accum_sdpa_decoder.py logs each update with one print over two lines: `loss.item()` and `norm.item()` on the
    first, `loss.item()` again on the second. The lines' shares came from how often Python's line events visited
    each (3 and 2 in one update: 1.8 and 1.2 reads a step); they are the reads written on each line."""
    path = REALISTIC / "accum_sdpa_decoder.py"
    first = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "norm.item()" in text)
    sync = next(f for f in realistic_reports[path.name]["run"]["findings"] if f["rule"] == "SYNC001")
    assert sorted((loc["line"], loc["count_per_step"]) for loc in sync["locations"]) == [(first, 2.0), (first + 1, 1.0)], \
        sync["locations"]


def test_a_copy_back_then_numpy_is_one_read_not_two(realistic_reports):
    """tabular_metrics.py computes its accuracy in NumPy every step: `logits.argmax(1).cpu().numpy()`. On the
    emulated device the trace's `.numpy()` call (of the host copy) was counted as a second read of the device."""
    sync = next(f for f in realistic_reports["tabular_metrics.py"]["run"]["findings"] if f["rule"] == "SYNC001")
    assert [loc["count_per_step"] for loc in sync["locations"]] == [1.0, 1.0], sync["locations"]


def test_a_schedule_kept_on_the_host_and_indexed_by_a_device_read_is_told_to_move(realistic_reports):
    """diffusion_schedule.py keeps its noise schedule as plain attributes (on the host after `.to(device)`) and
    indexes it with `t.cpu()`: SYNC001 at that line, twice a step, says the table is on the host and how to move it."""
    sync = next(f for f in realistic_reports["diffusion_schedule.py"]["run"]["findings"] if f["rule"] == "SYNC001")
    at = next(loc for loc in sync["locations"] if "a.gather(-1, t.cpu())" in loc.get("code", ""))
    assert at["count_per_step"] == 2.0 and "feeding `a.gather` on a tensor kept on the host" in at["detail"], at
    assert any("register_buffer" in note for note in sync["notes"]), sync["notes"]


def test_reads_a_gpu_kernel_makes_to_size_its_output_are_counted_and_explained(realistic_reports):
    """class_balanced.py: on a GPU F.one_hot without num_classes reads the largest label, bincount the smallest and
    largest value, unique the output's size; none is an `.item()` in the source. Each is counted at its line as a GPU
    makes it, and the notes say the form that reads nothing."""
    sync = next(f for f in realistic_reports["class_balanced.py"]["run"]["findings"] if f["rule"] == "SYNC001")
    per_line = {next(k for k in ("one_hot", "bincount", "unique") if k in loc["code"]): loc["count_per_step"]
                for loc in sync["locations"]}
    assert per_line == {"one_hot": 1.0, "bincount": 2.0, "unique": 1.0}, sync["locations"]
    notes = " ".join(sync["notes"])
    assert "num_classes=C" in notes and "scatter_add_" in notes and "instead of `unique`" in notes, notes


def figures(reports: dict) -> dict:
    marked_run = sum(len(marked(p, "run")) for p in SCRIPTS)
    found = sum(len(marked(p, "run") & located(reports[p.name]["run"]["findings"], p.name, ("run", "both")))
                for p in SCRIPTS)
    infos = sum(1 for p in SCRIPTS for f in reports[p.name]["run"]["findings"] if f["severity"] == "info")
    problems = sum(len(check(p, reports[p.name])) for p in SCRIPTS)
    return {"scripts": len(SCRIPTS), "marked": marked_run, "found at their line": found,
            "info findings": infos, "problems": problems}


if __name__ == "__main__":  # the README's figures
    import tempfile
    sys.path.insert(0, str(Path(__file__).parent))
    with tempfile.TemporaryDirectory() as tmp:
        result = RealisticReports(tmp)
        result.update({p.name: result[p.name] for p in SCRIPTS})
        for p in SCRIPTS:
            print(p.name, check(p, result[p.name]) or "ok")
        print(figures(result))


def test_two_optimizers_of_one_class_are_each_named(realistic_reports):
    """gan.py builds two Adams (the trace names a step's range by class only): OPT001 names both lines, each
    with its share of the class's step time by its parameter tensors (here equal)."""
    opt = next(f for f in realistic_reports["gan.py"]["run"]["findings"] if f["rule"] == "OPT001")
    assert [loc["line"] for loc in opt["locations"]] == [12, 13], opt["locations"]
    assert opt["locations"][0]["ms_per_step"] == pytest.approx(opt["locations"][1]["ms_per_step"]), opt["locations"]


def test_reads_in_a_comprehension_are_the_comprehensions_not_the_loops_too(realistic_reports):
    """vit_ema_research.py reads every parameter's gradient norm in a dict comprehension (its own frame before
    Python 3.12) and the loss once a step in the module's loop: each line gets its own reads a step, the
    comprehension's line not listed a second time with a share of the loop's read."""
    sync = next(f for f in realistic_reports["vit_ema_research.py"]["run"]["findings"] if f["rule"] == "SYNC001")
    counts = [(loc["line"], round(loc["count_per_step"])) for loc in sync["locations"]]
    params = 4 + 2 * 12 + 2  # embed, cls, pos, two encoder layers of 12 tensors, head
    assert sorted(counts) == [(51, params), (53, 1), (59, 1)], counts
