"""Shared fixtures: the real CLI, run once per sample script and once per shared trace."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

# a bug in a fact fails the test instead of skipping its rules (perfaudit.facts.registry)
os.environ["PERFAUDIT_STRICT"] = "1"

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"   # beside the repository in this workplace only: never needed
TRACES = ROOT / "tests" / "data" / "gpu_traces"   # real GPU traces of other projects, with their licenses
SAMPLES = ROOT / "sample_scripts"


def run_trace_json(path) -> dict:
    """A trace a run wrote, as JSON, read through perfaudit's own repairing stream: the profiler now and then
    writes an event name json.loads rejects (a stray quote), which perfaudit reads and the tests must too."""
    import gzip
    import io

    from perfaudit.trace.streams import _Repair
    with gzip.open(path) as f:
        return json.load(io.BufferedReader(_Repair(f)))


def pytest_configure(config) -> None:
    """Before any test (in the controller only): perfaudit's modules compiled to bytecode. Hundreds of tests
    start `perfaudit run`, two processes each that import perfaudit, and a machine that keeps Python from
    writing bytecode (PYTHONDONTWRITEBYTECODE, as CI's does) compiled its 250 modules again in every one:
    0.5 s a process."""
    if not hasattr(config, "workerinput"):
        import compileall
        compileall.compile_dir(str(ROOT / "perfaudit"), quiet=1)


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker more than the CPUs. Most tests wait on a `perfaudit run` child, which is
    not all CPU (start-up I/O, the profiler's export, timeouts): a spare worker keeps the cores busy."""
    return (os.cpu_count() or 1) + 1


def perfaudit(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "perfaudit", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def sarif_schemas() -> list[dict]:
    """The SARIF schemas a log is checked against: the fields perfaudit relies on (its own, always), and the
    official OASIS schema where a copy sits beside the repository (this project's workplace)."""
    schemas = [json.loads((ROOT / "tests" / "data" / "sarif-fields.schema.json").read_text())]
    official = SHARED / "schemas" / "sarif-schema-2.1.0.json"
    if official.exists():
        schemas.append(json.loads(official.read_text()))
    return schemas


def needs_program(*names: str, why: str) -> str:
    """The path of the first program found. Outside CI a missing program skips the test with the
    reason (the README's two commands do not install it); under CI (`CI=true`, set by .ci/run, which
    installs it) the test is required and fails instead."""
    import shutil
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    message = f"{names[0]} is not installed ({why})"
    if IN_CI:
        pytest.fail(f"{message}: .ci/run should have installed it")
    pytest.skip(message)


def needs_cxx() -> str:
    """torch.compile's default backend (inductor) builds C++ on the CPU, with `$CXX` or g++ (its own default), and
    hashes its precompiled header with `openssl sha512` (torch/_inductor/codecache.py)."""
    needs_program("openssl", why="torch.compile's inductor hashes its C++ header with it")
    return needs_program(os.environ.get("CXX") or "g++", why="torch.compile's inductor builds C++ on the CPU")


def matching_processes(pattern: str) -> list[str]:
    """The pids whose command line matches the regular expression `pattern`, as `pgrep -f` gives them, read
    from /proc (procps is not everywhere): a zombie's empty command line matches nothing, as for pgrep."""
    import re
    wanted, me = re.compile(pattern), str(os.getpid())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if cmdline and wanted.search(cmdline.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")):
            found.append(pid)
    return found


def on_a_small_disk(command: str, folder, size: str) -> subprocess.CompletedProcess:
    """`command` with a `size` tmpfs mounted at `folder`, in a namespace of the test's own (`unshare`, no
    privilege needed): a real full file system."""
    unshare = needs_program("unshare", why="mounts a small tmpfs for a full disk")
    return subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                           f"mount -t tmpfs -o size={size} tmpfs {folder} && exec {command}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def needs_shared(path: Path) -> Path:
    """A file the tests carry (tests/data/gpu_traces): missing, the clone is broken, not the machine."""
    assert path.exists(), f"{path} is missing from the repository"
    return path


WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1 … when the suite runs in parallel (pytest -n)


def once(path: Path, make) -> None:
    """Make `path` (with `make()`) once across every test process: the first to take its lock makes it,
    the others wait and then read it. Session fixtures of parallel workers share their results so."""
    from filelock import FileLock
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            make()


@cache
def _run_json(kind: str, target: str, out_dir: str, extra: tuple = ()) -> dict:
    name = Path(target).name + ("-" + "-".join(extra) if extra else "")
    report = Path(out_dir) / (name + ".report.json")
    done = Path(out_dir) / (name + ".rc")
    if kind == "run":  # the console report too (name.console.txt), as a user sees it
        args = ["run", target, "--warmup", "2", "--steps", "3", "--out-dir", str(Path(out_dir) / Path(target).stem),
                "-f", f"json={report}", *extra]
    else:
        args = ["analyze", target, "--format", "json", "--output", str(report), *extra]

    def make():
        proc = perfaudit(*args)
        assert report.exists(), f"no report for {target}: rc={proc.returncode}\n{proc.stderr}\n{proc.stdout[-2000:]}"
        if kind == "run":
            (Path(out_dir) / (name + ".console.txt")).write_text(proc.stdout)
        done.write_text(str(proc.returncode))

    once(done, make)
    data = json.loads(report.read_text())
    data["_exit_code"] = int(done.read_text())
    return data


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory) -> Path:
    """A folder shared by every test process of this session (the same as tmp for a serial run)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if WORKER else base


@pytest.fixture(scope="session")
def run_dir(shared_tmp) -> str:
    folder = shared_tmp / "runs"
    folder.mkdir(exist_ok=True)
    return str(folder)


@pytest.fixture(scope="session")
def sample_report(run_dir):
    """report(script_name) -> the JSON report of `perfaudit run` on that sample script (cached, and
    shared between parallel test processes: each sample runs once per session)."""
    scripts = sorted(p.name for p in SAMPLES.glob("*.py"))
    if WORKER:  # parallel processes warm the cache from opposite ends, one script at a time each
        for script in (scripts if int(WORKER[2:] or 0) % 2 == 0 else scripts[::-1]):
            _run_json("run", str(SAMPLES / script), run_dir)
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda s: _run_json("run", str(SAMPLES / s), run_dir), scripts))
    return lambda name: _run_json("run", str(SAMPLES / name), run_dir)


def survivors(pattern: str, run_dir: str) -> list[str]:
    """The processes matching `pattern` (as `pgrep -f`) that belong to the run in `run_dir`: a run's children and
    its DataLoader workers carry its run folder in their environment; other tests run the same scripts beside it."""
    left = []
    for pid in matching_processes(pattern):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if run_dir.encode() in environ:
            left.append(pid)
    return left


@pytest.fixture(scope="session")
def job_report(run_dir):
    """report(script path under the repo, nproc) -> the JSON report of `perfaudit run --nproc-per-node`
    (torchrun, gloo on the CPU; cached)."""
    return lambda script, nproc: _run_json("run", str(ROOT / script), run_dir, ("--nproc-per-node", str(nproc)))


@pytest.fixture(scope="session")
def trace_report(run_dir):
    """report(relative trace path under shared/) -> the JSON report of `perfaudit analyze` (cached)."""
    def get(rel: str) -> dict:
        path = needs_shared(ROOT / rel)
        return _run_json("analyze", str(path), run_dir)
    return get


REALISTIC = ROOT / "tests" / "realistic"
# scripts of the reliability suite that are realistic too (a fine-tuning phase, a trainer that
# evaluates and prepares before training)
REALISTIC_SCRIPTS = sorted(REALISTIC.glob("*.py")) + [ROOT / "tests" / "scripts" / "finetune.py",
                                                      ROOT / "tests" / "scripts" / "validate_first.py"]


@cache
def _realistic_report(out_dir: str, path: Path) -> dict:
    """One script's run (default window, as a user runs it) and lint reports, made once per session
    (parallel test processes share them). Scripts run beside other tests: their findings must not
    depend on how busy the machine is."""
    from perfaudit import api
    from perfaudit.report.json_report import render
    out = Path(out_dir) / f"{path.stem}.json"
    lint_out = Path(out_dir) / f"{path.stem}.lint.json"
    done = Path(out_dir) / f"{path.stem}.rc"

    def make():
        proc = perfaudit("run", str(path), "--out-dir", str(Path(out_dir) / path.stem), "-f", f"json={out}",
                         timeout=300)
        assert out.exists(), f"{path.name}: rc={proc.returncode}\n{proc.stderr[-2000:]}"
        lint_out.write_text(render(api.lint([str(path)])))  # what `perfaudit lint -f json` writes
        done.write_text(str(proc.returncode))

    once(done, make)
    return {"run": json.loads(out.read_text()), "lint": json.loads(lint_out.read_text()), "rc": int(done.read_text()),
            "run_dir": str(Path(out_dir) / path.stem), "report_path": str(out)}


class RealisticReports(dict):
    """name -> {"run": JSON report, "lint": JSON report, "rc", "run_dir", "report_path"}, made on first use."""

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir

    def __missing__(self, name: str) -> dict:
        self[name] = _realistic_report(self.out_dir, next(p for p in REALISTIC_SCRIPTS if p.name == name))
        return self[name]


@pytest.fixture(scope="session")
def realistic_reports(shared_tmp) -> RealisticReports:
    folder = shared_tmp / "realistic"
    folder.mkdir(exist_ok=True)
    return RealisticReports(str(folder))
