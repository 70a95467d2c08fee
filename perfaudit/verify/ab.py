"""The A/B runs of `perfaudit verify`: the script as it is (A) and with fixes (B, or one B per fix),
interleaved over several rounds (A B A B …) so that drift of the machine hits both, each run a fresh
process with the same seeds and the same step window, no profiler. The user's files are never
written: B's child reads the fixed sources from the verify folder."""
from __future__ import annotations

import difflib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..collect.run.runner import RunOptions, RunResult, run_script
from ..fix.catalog import FIX_KINDS
from ..fix.plan import FileFix, FixPlan
from ..outcome import Outcome, describe, is_failure
from .gpu_path import check_on_the_gpu_path, run_failure
from .stats import MIN_STEPS, LossCheck, SpeedChange, loss_check, speed_change, undisturbed_steps
from .stops import NoteSignals, signal_name

# bisect calls a regression on this many counted rounds at least. Two rounds run A B B A: a neighbour's burst
# of work over the middle two runs slows both B runs alike, and a CI run of a history without any regression
# timed a harmless commit wholly above +25 % that way; a third round's B runs after two A runs.
REGRESSION_ROUNDS = 3


@dataclass
class Rounds:
    """How many interleaved rounds: at least `min`; then more, while some fix's step-time interval
    still includes zero and is wider than ±`tolerance_pct` of A's step, until `max` rounds or
    `max_time_s` seconds of rounds (0: none beyond `min`)."""
    min: int = 3
    max: int = 12
    max_time_s: float | None = 120.0
    tolerance_pct: float = 2.0
    # bisect: a verdict is settled when the interval lies wholly above or wholly below this change (% of A)
    threshold_pct: float | None = None


@dataclass
class Variant:
    name: str                 # "A", "B" (all fixes), or a rule id (one fix); bisect: a commit
    plan: FixPlan | None      # None: the script as it is
    script: str | None = None  # its own script (bisect: in a commit's worktree); None: the one verified
    cwd: str | None = None     # and the folder it runs in
    # a plan's B (verify/plan_verify.py): its own arguments, run options (a batch scale, checkpointed
    # classes), the samples a step takes (step times compared per sample), and whether it keeps the maths
    args: list[str] | None = None
    overrides: dict | None = None
    samples: int = 1
    keeps_maths: bool | None = None

    @property
    def same_maths(self) -> bool:
        if self.keeps_maths is not None:
            return self.keeps_maths
        return self.plan is not None and all(FIX_KINDS[c.kind].same_maths for c in self.plan.changes)

    @property
    def init_draws(self) -> dict[str, list[int]] | None:
        """Where the fix removed a layer's bias: B still makes its random draw (collect/run/init_draws.py)."""
        lines: dict[str, list[int]] = {}
        files = {f.shown: f for f in self.plan.files} if self.plan else {}
        for c in self.plan.changes if self.plan else ():
            f = files.get(c.path)
            if c.kind == "conv_bias_off" and f is not None:
                lines.setdefault(f.path, []).append(line_in_fixed(f, c.line))
        return lines or None


def line_in_fixed(f: FileFix, line: int) -> int:
    """An original line's number in the fixed text (another fix of the plan may have added lines above it)."""
    a, b = f.original.splitlines(), f.fixed.splitlines()
    for _, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i1 <= line - 1 < i2:
            return j1 + min(line - 1 - i1, max(j2 - j1 - 1, 0)) + 1
    return line


@dataclass
class Runs:
    times: list[list[float]] = field(default_factory=list)    # seconds per measured step, per round
    losses: list[list[float | None]] = field(default_factory=list)  # per round, per step
    device: str | None = None
    failure: str | None = None                               # the first run that did not reach its window
    left_out: int = 0                                        # steps that waited for a CPU held by others
    disturbed_runs: int = 0                                  # runs most of whose steps waited: not counted


@dataclass
class Exercise:
    """B run once past its window with the edited lines watched (watch.py)."""
    ended: str                     # "ran to its end" | "stopped after N s" | "all edited code ran" | …
    missed_edits: list[int] = field(default_factory=list)         # edited lines (fixed source) that never ran
    missed_uses: list[tuple[int, str]] = field(default_factory=list)  # later uses of edited names that never ran
    path: str = ""
    stopped: bool = False          # --end-check's time ran out first: what did not run may have run later


@dataclass
class FixVerdict:
    name: str
    rules: list[str]
    changes: list                  # fix.Change
    speed: SpeedChange | None = None
    loss: LossCheck | None = None
    broke: str | None = None       # B failed where A ran: what happened
    exercises: list[Exercise] = field(default_factory=list)
    predicted_ms: float | None = None  # the saving per step the audit's findings for these rules estimated
    projected_ms: float | None = None  # the saving per step the audit projected on its target GPU (a model)
    projected_on: str | None = None

    @property
    def passed(self) -> bool:
        return self.broke is None and (self.loss is None or self.loss.passed)


@dataclass
class Verification:
    script: str
    args: list[str]
    rounds: int
    warmup: int
    steps: int
    device: str | None
    verdicts: list[FixVerdict]
    folder: str
    baseline_failure: str | None = None   # A itself did not reach its window
    notes: list[str] = field(default_factory=list)
    stopped_because: str | None = None    # why no more rounds were run
    interrupted: int | None = None        # the signal that stopped verify
    tolerance_pct: float = 2.0
    flops: dict | None = None             # the audit's model FLOPs per step and the device's peak (facts.mfu)
    busy_share: float = 0.0               # the larger share of runs, or of steps, that waited for a CPU

    @property
    def passed(self) -> bool:
        return self.baseline_failure is None and all(v.passed for v in self.verdicts)

    def flop_rates(self, verdict: FixVerdict) -> dict | None:
        """The model's FLOP rate (and MFU on a GPU of the peak table) at A's and B's measured step times, and
        at A's step less the saving the audit predicted; None without counted FLOPs or measured steps."""
        s = verdict.speed
        if not self.flops or s is None or math.isnan(s.delta_ms) or not (s.mean_a_ms > 0 and s.mean_b_ms > 0):
            return None
        flops, peak = self.flops["flops_per_step"], self.flops.get("peak_tflops")

        def rate(ms: float | None) -> float | None:
            return flops / (ms / 1000.0) / 1e12 if ms and ms > 0 else None
        predicted = s.mean_a_ms - verdict.predicted_ms if verdict.predicted_ms is not None else None
        out = {"tflops_a": rate(s.mean_a_ms), "tflops_b": rate(s.mean_b_ms), "tflops_predicted": rate(predicted)}
        out.update({k.replace("tflops", "mfu"): (v / peak if peak and v is not None else None) for k, v in out.items()})
        return out


def _describe(result: RunResult) -> str | None:
    """Why a run gave no usable step times (it failed, or ended before its window), or None."""
    failed = run_failure(result)
    if failed:
        return failed
    if not (result.timing and result.timing.get("step_times_s")):
        return f"it ended ({(result.outcome or {}).get('outcome', 'unknown')}) before any step was measured"
    return None


def _write_sources(plan: FixPlan, folder: str) -> dict[str, str]:
    os.makedirs(folder, exist_ok=True)
    served = {}
    for i, f in enumerate(plan.files):
        path = os.path.join(folder, f"{i}-{os.path.basename(f.path)}")
        with open(path, "w", encoding="utf-8") as out:
            out.write(f.fixed)
        served[f.path] = path
    return served


def run_ab(script: str, args: list[str], variants: list[Variant], folder: str, options: RunOptions,
           rounds: Rounds | int, on_progress: Callable[[str], None] | None = None,
           end_check_s: float = 0.0, gpu_path: bool = False) -> Verification:
    """A and each B, round after round (A B, B A, A B, …), until the verdicts are clear (Rounds); with
    `gpu_path` (a script with a CUDA branch) each B runs once on the emulated CUDA device too, when the
    rounds ran on the CPU (gpu_path.py)."""
    say = on_progress or (lambda text: None)
    plan = rounds if isinstance(rounds, Rounds) else Rounds(min=rounds, max=rounds, max_time_s=0)
    served = {v.name: _write_sources(v.plan, os.path.join(folder, f"fixed-{v.name}")) if v.plan else {}
              for v in variants}
    runs = {v.name: Runs() for v in variants}
    started, done, stop, interrupted = time.monotonic(), 0, None, None
    if options.threads is None:  # every A and B run with the same threads, fitted once to the free cores
        options = replace(options, threads=_free_core_threads())
    with NoteSignals() as signals:
        while stop is None:
            done += 1
            # A B in odd rounds, B A in even ones: whatever favours the first or second run of a round (a
            # warm page cache, the clock ramping up) falls on both alike instead of biasing the change
            for v in (variants if done % 2 else variants[::-1]):
                if runs[v.name].failure or interrupted:
                    continue
                say(f"round {done}{'' if done > plan.min else '/' + str(plan.min)}: "
                    f"{'as it is' if v.name == 'A' else 'with ' + v.name}")
                opts = replace(options, out_dir=os.path.join(folder, f"{v.name}{done}"), patched=served[v.name],
                               init_draws=v.init_draws,
                               mode="timing", seed=options.seed if options.seed is not None else 0,
                               cwd=v.cwd or options.cwd, **(v.overrides or {}))
                result = run_script(v.script or script, args if v.args is None else v.args, opts)
                interrupted = result.stop_signal or signals.received
                if interrupted:
                    break
                failure = _describe(result)
                if failure:
                    runs[v.name].failure = failure
                    continue
                timing = result.timing or {}  # a run that did not fail left its timing
                times = timing["step_times_s"]
                kept, left_out = undisturbed_steps(times, timing.get("step_waited_s"))
                kept = [t / v.samples for t in kept] if v.samples != 1 else kept
                if left_out * 2 >= len(times) > 0:  # most steps waited for a CPU: the run measured the machine
                    runs[v.name].disturbed_runs += 1
                else:
                    runs[v.name].times.append(kept)
                    runs[v.name].left_out += left_out
                runs[v.name].losses.append(timing["losses"])
                runs[v.name].device = timing.get("device")
            interrupted = interrupted or signals.received
            stop = _stop_reason(runs, variants, plan, done, time.monotonic() - started, interrupted)
    a = runs["A"]
    verification = Verification(script, args, done, options.warmup, options.steps, a.device, [], folder,
                                baseline_failure=a.failure, stopped_because=stop, interrupted=interrupted,
                                tolerance_pct=plan.tolerance_pct)
    if a.failure or not (a.times or a.losses):
        return verification
    # a run most of whose steps waited for a CPU gives no step times, but its losses still count: the
    # loss check stands, and the speed says it had too few steps
    for v in variants[1:]:
        b = runs[v.name]
        verdict = FixVerdict(v.name, v.plan.rules if v.plan else [], v.plan.changes if v.plan else [])
        if not b.times and not b.losses and not b.failure:  # interrupted before B ran
            continue
        if b.failure:
            verdict.broke = b.failure
        else:
            verdict.speed = speed_change(a.times, b.times, tolerance_pct=plan.tolerance_pct)
            verdict.loss = loss_check(a.losses, b.losses, v.same_maths)
        verification.verdicts.append(verdict)
    if gpu_path and a.device == "cpu" and not interrupted and any(v.broke is None for v in verification.verdicts):
        note, stopped = check_on_the_gpu_path(script, args, variants, served, folder, options,
                                              verification.verdicts, say)
        if note:
            verification.notes.append(note)
        if stopped is not None:  # Ctrl-C or SIGTERM there: no further run starts
            interrupted = verification.interrupted = stopped
            verification.stopped_because = f"stopped by {signal_name(stopped)} on the GPU path check"
    if end_check_s and not interrupted:
        for v, verdict in zip(variants[1:], verification.verdicts):
            if verdict.broke is None:
                say(f"running {'the fixed script' if v.name == 'B' else v.name} past its window")
                _exercise(script, args, v, served[v.name], folder, options, end_check_s, verdict)
    disturbed = sum(r.disturbed_runs for r in runs.values())
    left_out = sum(r.left_out for r in runs.values())
    counted = sum(len(t) for r in runs.values() for t in r.times)
    attempted = disturbed + sum(len(r.times) for r in runs.values())
    verification.busy_share = max(disturbed / attempted if attempted else 0.0,
                                  left_out / (left_out + counted) if left_out + counted else 0.0)
    if disturbed:
        verification.notes.append(f"busy machine: {disturbed} run(s) whose steps mostly waited for a CPU held by "
                                  "other processes were not counted")
    if left_out:
        verification.notes.append(f"busy machine: {left_out} step(s) that waited for a CPU held by other processes "
                                  "were left out of the step times (of A and B alike)")
    if any(v.speed and v.speed.verdict == "too few steps" for v in verification.verdicts):
        verification.notes.append(f"an interval needs at least {MIN_STEPS} measured steps per variant: raise "
                                  f"--steps or --rounds (now {options.steps} × {done})")
    return verification


def _stop_reason(runs: dict[str, Runs], variants: list[Variant], plan: Rounds, done: int, elapsed: float,
                 interrupted) -> str | None:
    """Why the rounds stop now, or None to run another."""
    if interrupted:
        return f"stopped by {signal_name(interrupted)}"
    if runs["A"].failure:
        return "the script as it is failed"
    if done < plan.min:
        return None
    open_ = [v.name for v in variants[1:] if not runs[v.name].failure and _undecided(runs["A"], runs[v.name], plan)]
    if not open_:
        if done < 2 and plan.max >= 2 and plan.max_time_s and elapsed < plan.max_time_s:
            return None  # one round shows nothing of how runs differ: a second before any verdict stands
        return f"the verdicts were clear after {done} round{'s' if done != 1 else ''}"
    if done >= plan.max:
        return f"--max-rounds ({plan.max}) reached with {', '.join(open_)} still inside the noise"
    if not plan.max_time_s:
        return f"{done} round{'s' if done != 1 else ''}, as asked (--max-time 0)"
    if elapsed >= plan.max_time_s:
        return f"--max-time ({plan.max_time_s:g} s) ran out with {', '.join(open_)} still inside the noise"
    return None


def _undecided(a: Runs, b: Runs, plan: Rounds) -> bool:
    """B's change is not settled: too few steps for an interval, or an interval that includes zero
    and is wider than the tolerance."""
    if not a.times or not b.times:  # no run counted yet (each so far was disturbed): another round
        return True
    s = speed_change(a.times, b.times, tolerance_pct=plan.tolerance_pct)
    if s.verdict == "too few steps":
        return True
    if plan.threshold_pct is not None:  # settled once the interval is wholly on one side of the threshold
        line = s.mean_a_ms * plan.threshold_pct / 100.0
        if s.low_ms > line:  # a regression is called on REGRESSION_ROUNDS rounds at least (see there)
            return min(len(a.times), len(b.times)) < REGRESSION_ROUNDS
        return not s.high_ms < line
    return s.verdict == "no measurable change" and not s.within_tolerance


def _free_core_threads() -> int | None:
    """The intra-op threads of every run, decided once: as many as the free cores on a busy machine (see
    collect.environment.fit_threads_to_free_cores), and never every core. Rounds last minutes and the
    machine's load changes within them: a pool that takes every core waits a scheduler latency (24 ms
    on Linux) in each parallel region whenever anything else runs, which starved whole runs (3 ms
    steps became 24 ms). None when the OS or OMP_NUM_THREADS decides."""
    from ..collect.probes.environment import free_cores
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    cpus = os.cpu_count() or 1
    return max(1, min(free_cores() or cpus, cpus - 1))


def _watch_lines(plan: FixPlan | None) -> dict[str, dict]:
    """For each fixed file: the lines its edits wrote (in the fixed text) and the later lines that read a
    name those lines assign (`total` accumulated in the loop, `json.dumps(total)` after it)."""
    import ast
    import difflib
    out: dict[str, dict] = {}
    for f in plan.files if plan is not None else ():
        fixed_lines = f.fixed.splitlines()
        matcher = difflib.SequenceMatcher(a=f.original.splitlines(), b=fixed_lines, autojunk=False)
        edited = sorted({j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal" for j in range(j1, j2)})
        uses: list[int] = []
        try:
            tree = ast.parse(f.fixed)
        except SyntaxError:
            tree = None
        if tree is not None and edited:
            names = set()
            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.lineno in edited:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
            uses = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names
                           and isinstance(n.ctx, ast.Load) and n.lineno > max(edited)})
        out[f.path] = {"edited": edited, "uses": uses, "text": fixed_lines}
    return out


def _exercise(script: str, args: list[str], v: Variant, served: dict[str, str], folder: str, options: RunOptions,
              end_check_s: float, verdict: FixVerdict) -> None:
    """B once more, not timed: past its window, to its end (or `end_check_s` seconds, or until every
    watched line ran), with the edited lines and the later uses of what they assign watched."""
    watch = _watch_lines(v.plan)
    lines = {path: w["edited"] + w["uses"] for path, w in watch.items() if w["edited"] or w["uses"]}
    if not lines:  # the fix only removed code (a debug switch): no line of it can run or fail later
        return
    opts = replace(options, out_dir=os.path.join(folder, f"{v.name}-end"), patched=served, mode="timing", full=True,
                   timeout=end_check_s, watch=lines, seed=options.seed if options.seed is not None else 0)
    result = run_script(script, args, opts)
    outcome = result.outcome or {}
    after = outcome.get("after_window") or {}
    if is_failure(after) or (is_failure(outcome) and Outcome.of(outcome) != Outcome.TIMEOUT):
        failed = after if is_failure(after) else outcome
        verdict.broke = (f"past the measured window {describe(failed) or 'the script failed'} "
                         "(inside the window A and B ran fine)")
        return
    seen = outcome.get("exercised") or {}
    if Outcome.of(outcome) == Outcome.TIMEOUT:
        ended = f"stopped after {end_check_s:g} s, before its end (--end-check waits longer)"
    elif Outcome.of(outcome) == Outcome.WINDOW_COMPLETE and outcome.get("ended") != "completed":
        ended = "every edited line and every later use of what it assigns ran"
    else:
        ended = "ran to its end"
    for path, w in watch.items():
        report = seen.get(os.path.realpath(path)) or {"seen": []}
        ran = set(report.get("seen") or [])
        missed_edits = [line for line in w["edited"] if line not in ran]
        missed_uses = [(line, w["text"][line - 1].strip()) for line in w["uses"] if line not in ran]
        verdict.exercises.append(Exercise(ended, missed_edits, missed_uses, path,
                                          stopped=Outcome.of(outcome) == Outcome.TIMEOUT))
