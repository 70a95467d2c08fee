"""What a run is asked to do (RunOptions) and what it left (RunResult): plain data, shared by the
runner, the use cases and the CLI without importing the runner itself."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunOptions:
    warmup: int = 2
    steps: int = 5
    full: bool = False
    timeout: float | None = 600.0
    out_dir: str | None = None
    with_stack: bool = True
    record_shapes: bool = True
    record_budget_s: float | None = 30.0   # stop recording after this long (fewer steps are fine)
    trace_budget_mb: float | None = 200.0  # uncompressed trace the window may write (fewer steps, then no stacks)
    keep_stacks: bool = False              # never drop Python stacks to fit that budget (only steps are cut)
    keep_runs: int = 10                    # run folders kept under .perfaudit/runs
    # "emulate-cuda": on a machine without a GPU the script sees one CUDA device, served by the CPU and
    # recorded (collect/emulation/emulate.py); "cpu": it runs as it would here; "auto" is resolved before the run
    device: str = "cpu"
    # the GPU the report projects the run onto (perfaudit/projection/): a name, "auto" or "none"
    target: str = "auto"
    # what the emulated device presents itself as (name, total_memory, capability, sms): the target's entry
    emulated_gpu: dict | None = None
    # verify: "timing" runs without the profiler (step times and losses), seeded, and may serve fixed
    # sources in place of the user's files (absolute path -> file holding the fixed text)
    mode: str = "profile"
    seed: int | None = None
    patched: dict[str, str] = field(default_factory=dict)
    # torchrun's options (`--nproc-per-node 2`, `--nnodes`, `--rdzv-endpoint` …): the script runs under
    # torch.distributed.run, one child per rank, each writing rank<R>.* files in the run folder
    launch: list[str] | None = None
    rule_ids: list[str] | None = None      # under torchrun, the rules each rank evaluates on its own trace
    rules_dirs: list[str] = field(default_factory=list)
    threads: int | None = None             # intra-op threads for the script (verify: the same in every run)
    watch: dict[str, list[int]] | None = None  # verify's exercise run: lines to see run (path -> lines)
    # verify's B of a fix that removes biases: where (path -> lines) a layer's bias draw is still made
    init_draws: dict[str, list[int]] | None = None
    cwd: str | None = None                 # the script's working directory (bisect: the same one in a commit's tree)
    min_measure_s: float = 0.0             # timing: measure steps for at least this long (more than `steps`)
    import_dir: str | None = None          # first on the script's sys.path instead of its folder (a notebook's)
    batch_scale: float | None = None       # a batch plan's run: every DataLoader's batch_size times this
    checkpoint_classes: list[str] | None = None  # a checkpointing plan's run: these module classes recompute
    checkpoint_first: int | None = None    # … only their first N instances in forward order (None: all)


@dataclass
class RunResult:
    script: str
    run_dir: str
    trace_path: str | None
    outcome: dict                      # what happened to the script (see outcome.py)
    log_path: str
    probes: dict = field(default_factory=dict)  # only when no trace was written
    timing: dict | None = None         # a timing run (verify): step times and losses
    stop_signal: int | None = None     # the signal that stopped perfaudit (SIGINT, SIGTERM, SIGHUP)
    rank_traces: list[str] = field(default_factory=list)     # under torchrun: each rank's trace
    rank_outcomes: dict[int, dict] = field(default_factory=dict)  # what happened to each rank
    emulation_failed: str | None = None  # the emulated run failed: why (this result is the plain run's)

    @property
    def interrupted(self) -> bool:
        return self.stop_signal is not None
