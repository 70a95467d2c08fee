"""How reliably `perfaudit bisect` finds the commit that slowed training, over seeded histories.

    python benchmarks/bisect_bench.py                      # 12-, 20- and 32-commit histories, 3 seeds, default 5 %
    python benchmarks/bisect_bench.py --sizes 12 --seeds 1 --clean 1 --busy 2

Each case builds a git history of a tiny training script (tests/bisect_repo.py): harmless commits around
one, placed at random, that reads the loss and 3000 weights on the host every step and sorts them; a clean case has no
such commit. It runs `perfaudit bisect` with its defaults (threshold 5 %, verify's adaptive rounds) and
prints, per case, the verdict against the truth, the A/B comparisons against the ⌈log2 N⌉+1 bound, the
timed pairs and the wall time; then the totals. `--busy N` keeps N busy-looping processes running beside
it, as on a shared machine. A case is right when bisect names the culprit (regression) or names none
(clean); "one of K commits" is counted apart: honest, not wrong, but not a hit.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from bisect_repo import make_history  # noqa: E402


def _spin() -> None:
    while True:
        pass


def run_case(work: Path, commits: int, culprit: int | None, seed: int, extra: list[str]) -> dict:
    repo = work / f"repo-{commits}-{seed}-{'clean' if culprit is None else culprit}"
    history = make_history(repo, commits=commits, culprit=culprit, seed=seed)
    out = repo.parent / (repo.name + ".json")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "perfaudit", "bisect", "train.py", "--good", history["good"],
                           "--bad", history["bad"], "--quiet", "--out-dir", str(repo.parent / (repo.name + "-runs")),
                           "-o", str(out), *extra], cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - start
    result = json.loads(out.read_text()) if out.exists() else None
    if result is None:
        return {"outcome": "error", "why": (proc.stderr or proc.stdout).strip().splitlines()[-1:], "wall_s": wall}
    if history["culprit"] is None:
        outcome = "right" if result["culprit"] is None and not result["candidates"] else "WRONG"
    elif result["culprit"] == history["culprit"]:
        outcome = "right"
    elif history["culprit"] in (result.get("candidates") or []):
        outcome = f"one of {len(result['candidates'])}"
    else:
        outcome = "WRONG"
    return {"outcome": outcome, "comparisons": len(result["comparisons"]), "bound": result["most_comparisons"],
            "pairs": result["timed_pairs"], "wall_s": wall, "conclusion": result["conclusion"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="12,20,32", help="commits after the good one, comma-separated")
    parser.add_argument("--seeds", type=int, default=3, help="seeded regression histories per size")
    parser.add_argument("--clean", type=int, default=3, help="histories without a regression (sizes in turn)")
    parser.add_argument("--busy", type=int, default=0, help="busy-looping processes beside the benchmark")
    parser.add_argument("bisect_args", nargs="*", help="extra `perfaudit bisect` options, after --")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = []
    for size in sizes:
        for seed in range(1, args.seeds + 1):
            cases.append((size, random.Random(seed * 1000 + size).randrange(size), seed))
    cases += [(sizes[i % len(sizes)], None, 100 + i) for i in range(args.clean)]
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    tally: dict[str, int] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bisect-bench-") as tmp:
            print(f"{'commits':>7} {'culprit':>7} {'seed':>4}  {'outcome':<12} {'A/B':>5} {'pairs':>5} {'wall s':>7}")
            for commits, culprit, seed in cases:
                row = run_case(Path(tmp), commits, culprit, seed, args.bisect_args)
                tally[row["outcome"]] = tally.get(row["outcome"], 0) + 1
                ab = f"{row['comparisons']}/{row['bound']}" if "comparisons" in row else "-"
                print(f"{commits:>7} {'-' if culprit is None else culprit:>7} {seed:>4}  {row['outcome']:<12} {ab:>5} "
                      f"{row.get('pairs', '-'):>5} {row['wall_s']:>7.0f}", flush=True)
                if row["outcome"] != "right":
                    print(f"        {row.get('conclusion') or row.get('why')}", flush=True)
    finally:
        for p in spinners:
            p.terminate()
    print("totals: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())) + f" of {len(cases)} cases"
          + (f" (beside {args.busy} busy processes)" if args.busy else ""))


if __name__ == "__main__":
    main()
