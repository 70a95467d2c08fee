"""`bisect`: the first commit between a good and a bad ref whose step time is worse than the good one's by
more than a threshold (or than a quarter of the regression seen at the bad ref when that is larger, unless
exact: the commit that brought a large share of the slowdown, not a noise-sized step on the way). Each
commit tested is checked out in a temporary worktree (the user's working tree is never touched) and timed
against the good commit with verify's interleaved A/B rounds until the interval of the change lies wholly
above or below the threshold; a comparison that stays inside the noise, or a commit where the script fails,
is skipped (git bisect's "skip") and named, never guessed. The culprit and its parent are then audited and
compared (`diff`): the findings the culprit introduced, at file:line. A stop signal (Ctrl-C, SIGTERM) ends it
where it is: the worktrees are removed, what was timed is kept and printed, and it exits 128 + the signal."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import replace

from ..collect.run.options import RunOptions
from ..collect.run.rundir import finish_run_dir, make_run_dir
from ..errors import UsageError
from ..verify import Rounds, Variant, run_ab
from ..verify.ab import REGRESSION_ROUNDS
from ..verify.comparison import SHARE_OF_REGRESSION, BisectResult, Commit, Comparison, Diff
from ..verify.stops import StopRequested, raise_on_signals, signal_name
from .audit import audit
from .diff import diff


def _git(repo: str, *args: str) -> str:
    proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"git {' '.join(args)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}")
    return proc.stdout.strip()


def _commit(repo: str, ref: str) -> Commit:
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return Commit(sha, _git(repo, "log", "-1", "--format=%s", sha))


class _Trees:
    """Worktrees of the commits tested, in one temporary folder, all removed at the end."""

    def __init__(self, repo: str):
        self.repo, self.root = repo, tempfile.mkdtemp(prefix="perfaudit-bisect-")
        self.paths: dict[str, str] = {}

    def of(self, commit: Commit) -> str:
        if commit.sha not in self.paths:
            path = os.path.join(self.root, commit.short)
            _git(self.repo, "worktree", "add", "--detach", "--quiet", path, commit.sha)
            self.paths[commit.sha] = path
        return self.paths[commit.sha]

    def close(self) -> None:
        for path in self.paths.values():
            subprocess.run(["git", "-C", self.repo, "worktree", "remove", "--force", path], capture_output=True)
        subprocess.run(["git", "-C", self.repo, "worktree", "prune"], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def bisect(script: str, args: list[str], good: str, bad: str, options: RunOptions, rounds: Rounds,
           threshold_pct: float = 5.0, audit_options: RunOptions | None = None, exact: bool = False,
           on_progress: Callable[[str], None] | None = None) -> BisectResult:
    say = on_progress or (lambda text: None)
    script = os.path.abspath(script)
    repo = _git(os.path.dirname(script), "rev-parse", "--show-toplevel")
    rel_script = os.path.relpath(script, repo)
    here = os.path.realpath(os.getcwd())
    inside = here == os.path.realpath(repo) or here.startswith(os.path.realpath(repo) + os.sep)
    rel_cwd = os.path.relpath(here, os.path.realpath(repo)) if inside else "."
    good_c, bad_c = _commit(repo, good), _commit(repo, bad)
    shas = _git(repo, "rev-list", "--reverse", "--first-parent", f"{good_c.sha}..{bad_c.sha}").split()
    if not shas:
        raise UsageError(f"{bad} is not a descendant of {good}: nothing to bisect")
    commits = [Commit(s, _git(repo, "log", "-1", "--format=%s", s)) for s in shas]
    result = BisectResult(good_c, bad_c, commits, threshold_pct, bar_pct=threshold_pct)
    folder = make_run_dir(options.out_dir, options.keep_runs)
    result.folder = folder
    trees = _Trees(repo)
    try:
        with raise_on_signals():
            return _search(result, commits, good_c, bad_c, trees, rel_script, rel_cwd, args, options, rounds,
                           threshold_pct, audit_options, exact, folder, say)
    except StopRequested as stop:  # a stop signal: what was compared is kept and said
        result.interrupted = stop.signum
        result.culprit = result.parent = result.diff = None
        decided = [f"{c.commit.short} {c.verdict}" for c in result.comparisons if c.verdict != "skip"]
        result.conclusion = (f"stopped by {signal_name(stop.signum)} after {len(result.comparisons)} comparison(s): "
                             "no conclusion" + (f" (decided so far: {', '.join(decided)})" if decided else ""))
        return result
    finally:
        trees.close()
        finish_run_dir(folder)


def _search(result: BisectResult, commits: list[Commit], good_c: Commit, bad_c: Commit, trees: _Trees,
            rel_script: str, rel_cwd: str, args: list[str], options: RunOptions, rounds: Rounds, threshold_pct: float,
            audit_options: RunOptions | None, exact: bool, folder: str, say: Callable[[str], None]) -> BisectResult:
    """The last commit timed against good, then the binary search between them, then the culprit audited."""
    def place(commit: Commit) -> tuple[str, str]:
        tree = trees.of(commit)
        return os.path.join(tree, rel_script), os.path.join(tree, rel_cwd)

    def compare(commit: Commit) -> Comparison:
        say(f"timing {commit.short} against {good_c.short} …")
        (a_script, a_cwd), (b_script, b_cwd) = place(good_c), place(commit)
        variants = [Variant("A", None, a_script, a_cwd), Variant(commit.short, None, b_script, b_cwd)]
        if not os.path.isfile(b_script):
            return _record(result, Comparison(commit, "skip", f"{rel_script} does not exist there", None, 0))
        v = run_ab(a_script, args, variants, os.path.join(folder, commit.short), options,
                   replace(rounds, threshold_pct=result.bar_pct), say)
        if v.interrupted:  # stopped inside its rounds: what was timed is kept, and the bisection ends
            speed = v.verdicts[0].speed if v.verdicts else None
            _record(result, Comparison(commit, "skip", f"stopped by {signal_name(v.interrupted)}", speed, v.rounds))
            raise StopRequested(v.interrupted)
        return _record(result, _judge(commit, v, result.bar_pct))

    last = compare(commits[-1])
    if last.verdict != "bad":
        result.conclusion = (f"no regression: {bad_c.short} is not slower than {good_c.short} by more than "
                             f"{threshold_pct:g} % ({last.why})" if last.verdict == "good" else
                             f"inconclusive: {bad_c.short} against {good_c.short}: {last.why}")
        return result
    if not exact and last.speed is not None and last.speed.mean_a_ms:
        # bad from a quarter of the regression's low end on: runs of a busy machine differ by several %,
        # so a bar at 5 % would leave harmless commits undecided when the regression is +100 %
        result.bar_pct = max(threshold_pct, SHARE_OF_REGRESSION * 100.0 * last.speed.low_ms / last.speed.mean_a_ms)
    lo, hi, skipped = -1, len(commits) - 1, set()
    while hi - lo > 1:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_ or len(result.comparisons) >= result.most_comparisons:  # skips spent the budget
            break
        mid = min(open_, key=lambda i: (abs(i - (lo + hi) / 2), i))
        verdict = compare(commits[mid]).verdict
        if verdict == "bad":
            hi = mid
        elif verdict == "good":
            lo = mid
        else:
            skipped.add(mid)
    left = [commits[i] for i in range(lo + 1, hi + 1)]
    if len(left) > 1:
        result.candidates = left
        why = ("no more comparisons allowed: ceil(log2 N)+1" if len(result.comparisons) >= result.most_comparisons
               else "the commits between could not be decided")
        result.conclusion = (f"the regression is in one of {len(left)} commits: "
                             f"{', '.join(c.short for c in left)} ({why}; run again on a quieter machine, "
                             f"or with --good/--bad around them)")
        return result
    result.culprit = commits[hi]
    result.parent = commits[hi - 1] if hi > 0 else good_c
    result.conclusion = f"{result.culprit.short} is the first commit slower than {good_c.short} by more than " \
                        f"{result.bar_pct:.3g} %"
    say(f"auditing {result.culprit.short} and its parent …")
    result.diff = _audit_pair(result.parent, result.culprit, place, trees, args,
                              audit_options or RunOptions(), folder)
    return result


BUSY_SHARE = 0.25  # more runs or steps than this waited for a CPU: the comparison is not trusted


def _record(result: BisectResult, comparison: Comparison) -> Comparison:
    result.comparisons.append(comparison)
    return comparison


def _busy_bar(threshold_pct: float, busy_share: float) -> float:
    """The bar a change's interval must clear to be called a regression on a busy machine: steps that waited
    for a CPU are left out, but what remains still carries the load's drift between the runs. Under two busy
    loops on 2 cores (49 % of the runs or steps waiting) a history without any regression timed a harmless
    commit at +75 % [+44, +110] against a +25 % bar; a real +250 % regression stays far above this bar."""
    return threshold_pct * (1.0 + 2.0 * busy_share) if busy_share > BUSY_SHARE else threshold_pct


def _judge(commit: Commit, v, threshold_pct: float) -> Comparison:
    """bad: the interval of the change lies wholly above the threshold; good: wholly below it; else skip."""
    if v.baseline_failure:
        raise UsageError(f"the script fails at the good commit: {v.baseline_failure}")
    if not v.verdicts:
        return Comparison(commit, "skip", v.stopped_because or "not measured", None, v.rounds)
    verdict = v.verdicts[0]
    if verdict.broke:
        return Comparison(commit, "skip", f"the script fails there: {verdict.broke}", None, v.rounds)
    s = verdict.speed
    if s is None or math.isnan(s.low_ms) or not s.mean_a_ms:
        if v.busy_share > BUSY_SHARE:  # no interval at all: the steps that waited for a CPU were left out
            return Comparison(commit, "skip", f"the machine was too busy to time it: {100 * v.busy_share:.0f} % of "
                              "the runs or steps waited for a CPU held by other processes", s, v.rounds)
        return Comparison(commit, "skip", "too few steps for an interval", s, v.rounds)
    low, high = 100.0 * s.low_ms / s.mean_a_ms, 100.0 * s.high_ms / s.mean_a_ms
    change = f"{100.0 * s.delta_ms / s.mean_a_ms:+.1f} % [{low:+.1f}, {high:+.1f}]"
    if low > threshold_pct:
        if v.rounds < REGRESSION_ROUNDS:  # the rounds allowed ran out first (--max-rounds, --max-time)
            return Comparison(commit, "skip", f"{change}: above +{threshold_pct:.3g} % in {v.rounds} round(s), and a "
                              f"regression is called on {REGRESSION_ROUNDS} at least", s, v.rounds)
        busy_bar = _busy_bar(threshold_pct, v.busy_share)
        if low <= busy_bar:  # above the bar, but not by more than the load has shifted harmless commits
            return Comparison(commit, "skip", f"{change}: above +{threshold_pct:.3g} %, but the machine was too busy to "
                              f"be sure: {100 * v.busy_share:.0f} % of the runs or steps waited for a CPU held by other "
                              f"processes, and on a machine this busy a regression is called above +{busy_bar:.3g} %",
                              s, v.rounds)
        return Comparison(commit, "bad", f"{change}: wholly above +{threshold_pct:.3g} %", s, v.rounds)
    if high < threshold_pct:
        return Comparison(commit, "good", f"{change}: wholly below +{threshold_pct:.3g} %", s, v.rounds)
    # load widens an interval, it never vetoes a clear one: "too busy" only for one that straddles the bar
    if v.busy_share > BUSY_SHARE:  # the runs timed the machine's other work more than this commit
        return Comparison(commit, "skip", f"{change}: the interval holds +{threshold_pct:.3g} % and the machine was "
                          f"too busy to narrow it: {100 * v.busy_share:.0f} % of the runs or steps waited for a CPU "
                          "held by other processes", s, v.rounds)
    return Comparison(commit, "skip", f"{change}: the interval holds +{threshold_pct:.3g} % ({v.stopped_because})",
                      s, v.rounds)


def _audit_pair(parent: Commit, culprit: Commit, place, trees: _Trees, args: list[str], options: RunOptions,
                folder: str) -> Diff:
    """The parent and the culprit audited (profiled runs), then compared; paths shown relative to the tree."""
    dirs: list[str] = []
    for commit in (parent, culprit):
        script, cwd = place(commit)
        report = audit(script, args, replace(options, out_dir=os.path.join(folder, f"audit-{commit.short}"), cwd=cwd))
        if not report.run_dir:
            raise UsageError(f"the audit of {commit.short} left no run folder to compare")
        dirs.append(report.run_dir)
    out = diff(dirs[0], dirs[1])
    for change in out.findings:  # worktree paths (gone at the end) as paths in the repository
        for tree in trees.paths.values():
            if change.where and change.where.startswith(tree + os.sep):
                change.where = change.where[len(tree) + 1:]
            change.message = change.message.replace(tree + os.sep, "")
    return out
