"""Speed and memory of perfaudit against baselines measured in the same run.

    python benchmarks/bench.py                 # full: a 1 GB trace, the HTA comparison, run overhead
    python benchmarks/bench.py --size-mb 40    # small (CI)

1. Builds a large uncompressed trace by replicating the ProfilerSteps of a real one
   (tests/data/gpu_traces/hta/negative_queue_a100_rank0.json.gz), shifted in time.
2. Analyses it with `perfaudit analyze` and loads it with plain `json.load`, each in a fresh process,
   and prints wall time and peak RSS of both and their ratios.
3. Loads the original trace and two real ones of a few MB with HolisticTraceAnalysis' TraceAnalysis and its
   temporal breakdown when HTA is installed (`--hta-python` an interpreter of a venv with it), against
   `perfaudit analyze` on each; prints the kernel-name classification cache's hit rate.
4. Analyses 1, 16 and 64 rank traces (the shared dlrm ranks, repeated) serially and with --jobs 2,
   and prints wall time and peak RSS: memory per rank must stay flat as ranks grow.
5. Times `perfaudit run` on a sample script against a plain torch.profiler run of the same script
   with the same window and profiler settings.
Ratios, not absolute timings, are the result: both sides run on the same machine in the same run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "gpu_traces"
SOURCE = TRACES / "hta" / "negative_queue_a100_rank0.json.gz"
SAMPLE = ROOT / "sample_scripts" / "sync_bad.py"


def build_trace(src: Path, size_mb: float, out: Path, compact: bool = False) -> int:
    """Write a trace of about size_mb by repeating src's events; returns the number of events. Compact:
    no spaces and no line breaks (as `json.dump` writes by default), instead of one event per line."""
    dumps = (lambda o: json.dumps(o, separators=(",", ":"))) if compact else json.dumps
    newline = "" if compact else "\n"
    data = json.loads(gzip.open(src).read().decode("utf-8", "replace"))
    events = data.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    encoded = [dumps(e) for e in events]
    target = size_mb * 1e6
    written = count = 0
    with open(out, "w") as f:
        f.write(dumps(data)[:-1] + ', "traceEvents": [' + newline)
        copy = 0
        while written < target:
            shift = copy * span
            for e, text in zip(events, encoded):
                if copy and isinstance(e.get("ts"), (int, float)):
                    e2 = dict(e, ts=e["ts"] + shift)
                    if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                        e2["name"] = f"ProfilerStep#{copy * 1000 + int(e2['name'].split('#')[1])}"
                    text = dumps(e2)
                elif copy:
                    continue
                f.write(("," if count else "") + text + newline)
                written += len(text) + 1 + len(newline)
                count += 1
            copy += 1
        f.write("]}" + newline)
    return count


def measure(code: str, python: str = sys.executable) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a fresh Python process running code."""
    # peak RSS from /proc (VmHWM: this process's own, fresh at exec); ru_maxrss is carried over from
    # the forking parent on Linux, so a big benchmark process would inflate every later figure
    wrapper = (f"import resource, time, sys\nt = time.perf_counter()\n{code}\n"
               "el = time.perf_counter() - t\n"
               "try:\n"
               "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
               "    rss = int(hwm) / 1024\n"
               "except (OSError, IndexError):\n"
               "    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
               "print(el, rss)")
    proc = subprocess.run([python, "-c", wrapper], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    seconds, rss = proc.stdout.strip().splitlines()[-1].split()
    return float(seconds), float(rss)


def bench_analyze(path: Path) -> dict:
    return {
        "read (the floor)": measure(f"f = open({str(path)!r}, 'rb')\nwhile f.read(1 << 24): pass"),
        "json.load": measure(f"import json\nd = json.load(open({str(path)!r}))"),
        "parse, fast path": measure(f"from perfaudit.trace import parser\ntr = parser.load_trace({str(path)!r})"),
        "parse, general": measure(f"from perfaudit.trace import parser\n"
                                  f"tr = parser.load_trace({str(path)!r}, fast_path=False)"),
        "perfaudit analyze": measure(f"from perfaudit.api import analyze\nr = analyze([{str(path)!r}])"),
    }


def bench_gzip(path: Path) -> dict:
    """The same trace gzipped (level 1, as fast as it gets): decompression alone with zlib and with
    ISA-L (what perfaudit reads .gz with when its wheel is there), and perfaudit analyze on the .gz."""
    from isal import igzip
    gz = path.with_suffix(".json.gz")
    with open(path, "rb") as src, igzip.open(gz, "wb", compresslevel=1) as dst:
        while chunk := src.read(1 << 24):
            dst.write(chunk)
    drain = "\nwhile f.read(1 << 24): pass"
    out = {"gunzip, zlib": measure(f"import gzip\nf = gzip.open({str(gz)!r}, 'rb'){drain}"),
           "gunzip, ISA-L": measure(f"from isal import igzip\nf = igzip.open({str(gz)!r}, 'rb'){drain}"),
           "perfaudit analyze .gz": measure(f"from perfaudit.api import analyze\nr = analyze([{str(gz)!r}])")}
    gz.unlink()
    return out


RANKS = TRACES / "param" / "dlrm_8ranks"


def bench_ranks(counts=(1, 16, 64)) -> list[tuple]:
    """(ranks, jobs, seconds, peak RSS MB) for folders of rank traces made from the dlrm ranks."""
    workers = sorted(RANKS.glob("*.json.gz"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            folder = Path(tmp) / f"ranks{n}"
            folder.mkdir()
            for i in range(n):
                os.symlink(workers[i % len(workers)], folder / f"rank{i:03d}.json.gz")
            for jobs in (1, 2):
                seconds, rss = measure(f"from perfaudit.api import analyze\nr = analyze([{str(folder)!r}], jobs={jobs})")
                rows.append((n, jobs, seconds, rss))
    return rows


# the HTA comparison's traces: the shared A100 trace the large one is built from, and real ones of a few MB
HTA_TRACES = [SOURCE, TRACES / "hta" / "df_index_resolver_v100_rank1.json.gz",
              TRACES / "hta" / "nccl_data_a100_rank0.json.gz"]


def hta_version(python: str) -> str | None:
    proc = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def bench_hta(src: Path, python: str) -> tuple:
    """HTA's TraceAnalysis loading the trace and its temporal breakdown (its closest analysis to
    perfaudit's step breakdown), in `python` (an interpreter where HTA is installed); start-up
    included on both sides."""
    with tempfile.TemporaryDirectory() as tmp:  # best of 3 on both sides: this machine is shared
        os.symlink(src, Path(tmp) / "rank0.json.gz")
        hta_t = min(measure(f"from hta.trace_analysis import TraceAnalysis\n"
                            f"TraceAnalysis(trace_dir={tmp!r}).get_temporal_breakdown(visualize=False)", python)
                    for _ in range(3))
    ours = min(measure(f"from perfaudit.api import analyze\nr = analyze([{str(src)!r}])") for _ in range(3))
    return hta_t, ours, cli_seconds(src)


def cli_seconds(trace: Path, repeats: int = 3) -> float:
    """Wall seconds of `perfaudit analyze TRACE` as a user types it (interpreter start, CLI, console report
    included), best of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "perfaudit", "analyze", str(trace)], capture_output=True, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
    return best


def classification_hits(path: Path) -> str:
    """Kernel-name classification over one analysis: kernel events, distinct names, regex classifications
    (each distinct name once per question: precision, collective, elementwise, architecture), and the share
    of the kernel events classified without running a regex of their own."""
    code = (f"from perfaudit.api import analyze\nfrom perfaudit.facts.gpu import kernels\n"
            f"from perfaudit.trace import load_trace\nr = analyze([{str(path)!r}])\n"
            f"k = [e.name for e in load_trace({str(path)!r}).device if e.kind == 'kernel']\n"
            "print(len(k), len(set(k)), kernels.stats['misses'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    events, names, regex = (int(x) for x in proc.stdout.split()[-3:])
    rate = 100.0 * (1 - regex / events) if events else 0.0
    return (f"{events:,} kernel events, {names:,} distinct names, {regex:,} regex classifications "
            f"(each name once per question, never per event): {rate:.2f} % of the events classified "
            "without a regex run of their own")


PLAIN = """
import runpy, sys, torch
from torch.profiler import profile, ProfilerActivity
from torch.optim.optimizer import register_optimizer_step_post_hook
WARMUP, STEPS = {warmup}, {steps}
prof = profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True,
               schedule=torch.profiler.schedule(wait=0, warmup=WARMUP, active=STEPS, repeat=1))
class Done(BaseException): pass
count = [0]
def hook(opt, args, kwargs):
    prof.step(); count[0] += 1
    if count[0] >= WARMUP + STEPS: raise Done()
register_optimizer_step_post_hook(hook)
sys.argv = [{script!r}]
prof.start()
try:
    runpy.run_path({script!r}, run_name="__main__")
except Done:
    pass
prof.stop()
prof.export_chrome_trace({out!r})
"""


def bench_run(warmup: int = 2, steps: int = 5, repeats: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        plain_code = PLAIN.format(warmup=warmup, steps=steps, script=str(SAMPLE), out=f"{tmp}/plain.json")
        plain_file = Path(tmp) / "plain.py"
        plain_file.write_text(plain_code)
        times = {"plain torch.profiler": [], "perfaudit run": []}
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, str(plain_file)], check=True, capture_output=True, cwd=ROOT)
            times["plain torch.profiler"].append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "perfaudit", "run", str(SAMPLE), "--warmup", str(warmup),
                            "--steps", str(steps), "--out-dir", f"{tmp}/run", "--format", "json",
                            "--output", f"{tmp}/r.json"], check=True, capture_output=True, cwd=ROOT)
            times["perfaudit run"].append(time.perf_counter() - t)
    return {k: min(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1000)
    parser.add_argument("--skip-run", action="store_true", help="skip the run-overhead comparison")
    parser.add_argument("--skip-analyze", action="store_true", help="skip the large-trace comparison")
    parser.add_argument("--skip-ranks", action="store_true", help="skip the many-ranks comparison")
    parser.add_argument("--ranks", default="1,16,64", help="rank counts of the many-ranks comparison")
    parser.add_argument("--hta-python", default=sys.executable,
                        help="a Python with HolisticTraceAnalysis installed (default: this one)")
    args = parser.parse_args()
    if not SOURCE.exists():
        sys.exit(f"source trace not found: {SOURCE}")
    if not args.skip_analyze:
        with tempfile.TemporaryDirectory() as tmp:
            big = Path(tmp) / "big.json"
            events = build_trace(SOURCE, args.size_mb, big)
            size = big.stat().st_size / 1e6
            print(f"trace: {size:.0f} MB, {events:,} events (steps of {SOURCE.name} replicated)")
            result = bench_analyze(big)
            zipped = bench_gzip(big)
            big.unlink()
            build_trace(SOURCE, args.size_mb, big, compact=True)
            compact = {"json.load": measure(f"import json\nd = json.load(open({str(big)!r}))"),
                       "perfaudit analyze": measure(f"from perfaudit.api import analyze\nr = analyze([{str(big)!r}])")}
            compact_mb = big.stat().st_size / 1e6
        (jt, jr), (pt, pr) = result["json.load"], result["perfaudit analyze"]
        print(f"{'':24}{'seconds':>10}{'peak RSS MB':>14}{'MB/s':>10}")
        for name, (seconds, rss) in result.items():
            print(f"{name:24}{seconds:>10.2f}{rss:>14.0f}{size / seconds:>10.0f}")
        print(f"ratio perfaudit/json.load: time {pt / jt:.2f}x, peak RSS {pr / jr:.2f}x; "
              f"perfaudit peak RSS / file size {pr / size:.2f}; fast path vs general parser: "
              f"{result['parse, general'][0] / result['parse, fast path'][0]:.1f}x faster")
        (cj, cjr), (cp, cpr) = compact["json.load"], compact["perfaudit analyze"]
        print(f"the same events compact ({compact_mb:.0f} MB, no line breaks): json.load {cj:.2f} s, {cjr:.0f} MB; "
              f"perfaudit analyze {cp:.2f} s, {cpr:.0f} MB; ratio time {cp / cj:.2f}x, peak RSS {cpr / cjr:.2f}x")
        print(f"kernel-name classification on {SOURCE.name}: {classification_hits(SOURCE)}")
        for name, (seconds, rss) in zipped.items():
            print(f"{name:24}{seconds:>10.2f}{rss:>14.0f}{size / seconds:>10.0f}  (MB/s of the trace unzipped)")
    if not args.skip_ranks and RANKS.exists():
        print(f"{'ranks':>6}{'jobs':>6}{'seconds':>10}{'peak RSS MB':>14}")
        for n, jobs, seconds, rss in bench_ranks(tuple(int(n) for n in args.ranks.split(","))):
            print(f"{n:>6}{jobs:>6}{seconds:>10.2f}{rss:>14.0f}")
    version = hta_version(args.hta_python)
    if version is None:
        print("HTA: not installed (pip install HolisticTraceAnalysis==0.5.0 in a venv, then --hta-python it)")
    for src in HTA_TRACES if version else ():
        (ht, hr), (ot, orr), cli = bench_hta(src, args.hta_python)
        mb = len(gzip.open(src).read()) / 1e6
        print(f"HTA {version} TraceAnalysis + temporal breakdown on {src.name} ({mb:.0f} MB unzipped): {ht:.2f} s, "
              f"{hr:.0f} MB; perfaudit analyze {ot:.2f} s, {orr:.0f} MB; perfaudit is {ht / ot:.1f}x faster "
              f"(the CLI as typed, interpreter start and console report included: {cli:.2f} s, {ht / cli:.1f}x)")
    if not args.skip_run:
        run = bench_run()
        plain, ours = run["plain torch.profiler"], run["perfaudit run"]
        print(f"run overhead on {SAMPLE.name} (2 warm-up + 5 steps, stacks and shapes, best of 3): plain "
              f"profiler {plain:.2f} s, perfaudit run {ours:.2f} s, ratio {ours / plain:.2f}x")


if __name__ == "__main__":
    main()
