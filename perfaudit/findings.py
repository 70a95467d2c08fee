"""What an audit produces: the result types shared by the engine, the API and the reporters."""
from __future__ import annotations

from dataclasses import dataclass, field

from .outcome import Outcome, is_failure

SEVERITIES = ("info", "warning", "error")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


# the place a finding names when no frame located it (evaluate.py); the static pass may locate it later
UNKNOWN_WHERE = "an unknown line (no recorded Python stack located it)"

@dataclass(frozen=True)
class Location:
    path: str
    line: int
    code: str = ""
    detail: str = ""
    count_per_step: float | None = None
    ms_per_step: float | None = None
    exact: bool = True  # False: the line of the enclosing function, the call itself was not found


@dataclass(frozen=True)
class Cost:
    ms_per_step: float | None      # estimated time saved per step by the fix
    share_of_step: float | None    # the same as a share of the mean step
    estimated: bool = False        # True: a model of the cost (e.g. a CPU run), not a measurement
    projected_ms: float | None = None     # what the fix saves per step on the projection's target GPU
    projected_share: float | None = None  # the same as a share of the projected step
    projected_on: str | None = None       # the target GPU's name


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    tips: tuple[str, ...]
    severity: str
    message: str
    fix: str
    cost: Cost
    locations: tuple[Location, ...] = ()
    notes: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict, hash=False, compare=False)
    trace: str | None = None  # which trace, when several were analysed
    # the mechanical edit for it (`perfaudit fix`): {"kind": …, "params": {…}} with the run's values
    autofix: dict | None = field(default=None, hash=False, compare=False)
    # what `perfaudit verify` measured for its fix: saved_ms, interval_ms, speedup_pct, verdict, loss,
    # loss_detail, device, together (the rules measured with it); replaces the estimate in the ranking
    verified: dict | None = field(default=None, hash=False, compare=False)

    @property
    def saving_ms(self) -> float | None:
        """What fixing it saves per step: measured by verify when it was, else the estimate."""
        if self.verified is not None:
            return self.verified["saved_ms"]
        return self.cost.ms_per_step

    @property
    def location(self) -> Location | None:
        return self.locations[0] if self.locations else None


@dataclass(frozen=True)
class Skipped:
    rule: str
    reason: str


def ranking_ms(f: Finding) -> float | None:
    """What orders findings of one severity: the saving projected on the target GPU when the run was
    projected (what matters there, not on the machine that measured it), else the saving measured or
    estimated here."""
    return f.cost.projected_ms if f.cost.projected_ms is not None else f.saving_ms


def rank(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then biggest saving (projected on the target GPU, else verified, else estimated),
    then those without a figure: an `info` finding never stands above a warning, however large its estimate."""
    return sorted(findings, key=lambda f: (
        -severity_rank(f.severity),
        ranking_ms(f) is None,
        -(ranking_ms(f) or 0.0),
        f.rule,
    ))


@dataclass
class TraceSummary:
    """What one trace shows in the report header."""
    path: str
    device: str                  # "cpu", or the GPU's name
    rank: int | None
    steps: int
    step_source: str
    step_ms: float | None
    breakdown: dict | None
    has_stacks: bool
    environment: dict = field(default_factory=dict)
    gpu_breakdown: dict | None = None   # compute, copies, sync_wait, data_wait, other_idle (ms/step)
    per_step: list[dict] = field(default_factory=list)      # host phases of each measured step (ms)
    gpu_per_step: list[dict] = field(default_factory=list)  # GPU time of each measured step (ms)
    compile: dict | None = None         # torch.compile: compile seconds before/inside the window (facts.compiled)
    excluded: list[dict] = field(default_factory=list)  # steps left out of the figures: {step, why}
    busy_measured: int = 0              # measured steps that waited for a CPU (no quieter ones came)
    threads: dict | None = None         # intra-op threads fitted to a busy machine's free cores
    training: bool | None = None        # False: an inference trace (no backward, no optimizer step)
    mfu: dict | None = None             # model FLOPs, achieved TFLOP/s, MFU and its ledger (facts.mfu)
    op_times: dict | None = None        # ms per step by kernel or op name (facts.op_times), for `diff` only
    memory: dict | None = None          # device memory of one step on the emulated CUDA path (memory.emulated)
    projection: dict | None = None      # the steps projected onto a named GPU (facts.gpu.projection)
    unprofiled: list[dict] = field(default_factory=list)  # steps timed without the profiler: {wall_ms, waited_ms}

    @property
    def busy_machine(self) -> str | None:
        """A line when the machine was busier than its CPUs during the run (load average above the
        CPU count, or steps left out because they waited for a CPU)."""
        env = self.environment or {}
        load, cpus = env.get("load_avg"), env.get("cpu_count")
        waited = [e for e in self.excluded if "waited" in str(e.get("why"))]
        if not (isinstance(load, (int, float)) and cpus and load > cpus) and not waited and not self.busy_measured \
                and not self.threads:
            return None
        text = f"busy: load average {load:.1f} on {cpus} CPUs" if isinstance(load, (int, float)) and cpus else "busy"
        if waited:
            text += (f"; {len(waited)} step(s) that waited for a CPU held by other processes were left out, "
                     "the figures are from the undisturbed ones")
        if self.busy_measured:
            text += (f"; {self.busy_measured} of the measured steps waited for a CPU too (no quieter ones came): "
                     "the figures are each phase's undisturbed time (its first quartile over every step); run "
                     "again on a quieter machine for firmer figures")
        if self.threads and self.threads.get("default"):
            text += (f"; the script ran with {self.threads['used']} intra-op thread(s) instead of "
                     f"{self.threads['default']}, as many as the free cores")
        return text


@dataclass
class Report:
    """The finished report of `run`, `analyze` or `lint`: ranked findings, what was skipped and why,
    the traces read, and for a run what happened to the script."""
    findings: list[Finding]
    skipped: list[Skipped]
    traces: list[TraceSummary]
    script: str | None = None
    outcome: dict | None = None      # what happened to the script (perfaudit run only; see outcome.py)
    run_dir: str | None = None
    notes: list[str] = field(default_factory=list)
    files: int | None = None         # lint: how many files were read
    command: str | None = None       # the command line that made it (shown in the HTML report)
    static_rules: list[str] = field(default_factory=list)  # lint: the rules whose static checks ran
    ranks: list[dict] = field(default_factory=list)  # several ranks: step, compute, collective ms per rank
    straggler: dict | None = None    # several ranks: the rank the others wait for (job.imbalance)
    stop_signal: int | None = None   # the signal that stopped the run (Ctrl-C: SIGINT, SIGTERM, SIGHUP)
    internal_errors: list[dict] = field(default_factory=list)  # perfaudit's own errors in the audited process
    source_roots: list[str] = field(default_factory=list)  # folders whose files a report may quote (HTML context)
    unread: list[str] = field(default_factory=list)  # lint: files that could not be read or parsed
    stored_steps: int | None = None  # a report read back from its JSON (no traces): the steps it measured

    def worst(self) -> str | None:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)

    def fails(self, fail_on: str) -> bool:
        worst = self.worst()
        return fail_on != "never" and worst is not None and severity_rank(worst) >= severity_rank(fail_on)

    @property
    def script_failed(self) -> bool:
        """The script raised, exited non-zero, crashed or timed out (in the window or after it, or on its CUDA
        path before a run of its CPU branch was reported)."""
        outcome = self.outcome or {}
        return is_failure(outcome) or is_failure(outcome.get("after_window")) or is_failure(outcome.get("gpu_path"))

    @property
    def outcome_kind(self) -> Outcome | None:
        return Outcome.of(self.outcome)

    @property
    def measured(self) -> bool:
        """Whether any training step was measured (false for a run that never started training)."""
        return any(t.steps for t in self.traces) or bool(self.stored_steps)
