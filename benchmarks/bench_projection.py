"""How good the projection onto a named GPU is, on public measurements (docs/accuracy.md, "Projection").

    python benchmarks/bench_projection.py [--traces DIR] [--size-mb 200] [--no-overhead]

1. Identity: each public GPU trace with recorded shapes, projected onto its own GPU (a) from its measured
   kernels (the simulation replays its host timeline) and (b) from its ops' shapes through the kernel model
   (what a CPU run gets): the projected step against the measured one.
2. Across GPUs, per op: the ops (name, shapes, dtypes) the A100 and V100 traces of one model share; the V100
   time projected from the A100's measured time (damped onto the model, as --target does; or times the model's
   ratio), from the model alone, and by plain roofline; time-weighted error. The same over NeuSight's labels
   as pairs of GPUs.
3. Per op, held out by GPU: NeuSight's labels (benchmarks/calibrate_projection.py).
4. The bottleneck class: projected (identity, from the kernels) against the class the measured timeline
   gives (facts gpu.step_breakdown: compute, copies, sync wait, data wait, other idle; collectives), on the
   public traces and perfaudit's own samples recorded on an H100 (tests/data/h100_runs/traces/).
5. Overhead: `analyze` on a large trace with and without `--target`, in one run.
"""
from __future__ import annotations

import ast
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calibrate_projection import main as neusight_main  # noqa: E402

from perfaudit.projection import devices  # noqa: E402
from perfaudit.projection.kernels import calibration, kernel_us, retargeted_us, roofline_us  # noqa: E402
from perfaudit.projection.model import Inputs, Projector, kernel_precision  # noqa: E402
from perfaudit.projection.timeline import Launched, _groups, _Index  # noqa: E402
from perfaudit.projection.work import work_of  # noqa: E402
from perfaudit.trace.parser import load_trace  # noqa: E402

ROOT = Path(sys.argv[sys.argv.index("--traces") + 1]) if "--traces" in sys.argv else \
    Path(__file__).resolve().parents[1] / "tests" / "data" / "gpu_traces"
SHAPED = ["hta/trace_diff_control_a100_rank3", "hta/trace_diff_test_v100_rank1", "hta/negative_queue_a100_rank0",
          "tracelens_h100/bert_small_inference_h100", "tracelens_h100/owlv2_inference_h100",
          "tracelens_h100/qwen_0.5b_inference_h100", "param/dlrm_8ranks/worker0"]
ALL_GPU = SHAPED + ["hta/nccl_data_a100_rank0", "hta/ns_resolution_v100_rank0", "hta/df_index_resolver_v100_rank1",
                    "hta/alexnet_a100", "param/resnet_2080ti", "param/linear_2080ti"]


def _load(name: str):
    return load_trace(str(ROOT / f"{name}.json.gz"), op_shapes=True)


def tf32_of(trace) -> bool:
    return any(kernel_precision(e.name) == "tf32" for e in trace.device if e.kind == "kernel")


def identity() -> None:
    print("\n1. Identity: projected onto the GPU each trace was recorded on")
    print(f"{'trace':<44}{'measured':>10}{'replayed':>10}{'err':>7}{'shapes':>10}{'err':>7}")
    replay_err, shape_err = [], []
    for name in SHAPED:
        trace = _load(name)
        device = devices.device_named(trace.device_properties.get("name"))
        if device is None:
            continue
        inputs = Inputs(tf32_matmul=tf32_of(trace))
        replay = Projector(trace, trace.measured_steps, device, inputs, device).run()
        cpu_like = _without_device(trace)
        shapes = Projector(cpu_like, cpu_like.measured_steps, device, inputs).run()
        m = replay.measured_step_ms
        e1, e2 = replay.step_ms / m - 1, shapes.step_ms / m - 1
        replay_err.append(abs(e1))
        shape_err.append(abs(e2))
        print(f"{name:<44}{m:>9.1f} {replay.step_ms:>9.1f}{e1:>+7.0%}{shapes.step_ms:>10.1f}{e2:>+7.0%}")
    print(f"{'median |error|':<44}{'':>10}{'':>10}{statistics.median(replay_err):>7.1%}{'':>10}"
          f"{statistics.median(shape_err):>7.1%}")


def _without_device(trace):
    """The trace as a CPU run would record it: no kernels, no runtime calls (ops' host times stay: the
    projection replaces them by the model's dispatch cost)."""
    from copy import copy
    cpu = copy(trace)
    cpu.device = []
    cpu.host = [e for e in trace.host if e.kind != "runtime"]
    cpu._host_by_name = None
    return cpu


def per_op(trace) -> dict:
    """(op, shapes, dtypes) -> [occurrences, measured kernel µs, the op] over the measured steps."""
    launched, index = Launched(trace), _Index(trace)
    out: dict = {}
    for step in trace.measured_steps:
        for root in index.roots(step):
            for g in _groups(root):
                us = sum(ev.dur for call in launched.inside(g)
                         for ev in launched.by_corr.get(call.args.get("correlation"), ()) if ev.kind == "kernel")
                if us <= 0 or "Input Dims" not in g.args or g.name.startswith("c10d::"):
                    continue
                key = (g.name, str(g.args.get("Input Dims")), str(g.args.get("Input type")))
                slot = out.setdefault(key, [0, 0.0, g])
                slot[0] += 1
                slot[1] += us
    return out


def _shaped(key: tuple) -> bool:
    """An op-and-shape key whose shapes say what the op does: a tensor list's shapes are not recorded
    (`aten::cat`'s [[], []] is any concatenation; the two traces' cat under that key took 165 and 736 µs)."""
    try:
        dims = ast.literal_eval(key[1])
    except (ValueError, SyntaxError):
        return False
    return any(d != [] for d in dims)   # scalars' [] aside


def across() -> None:
    print("\n2. Across GPUs, per op: A100 (HTA trace_diff control) -> V100 (trace_diff test)")
    a, v = _load(SHAPED[0]), _load(SHAPED[1])
    a100, v100 = devices.device_named(a.device_properties["name"]), devices.device_named(v.device_properties["name"])
    ops_a, ops_v = per_op(a), per_op(v)
    shared = set(ops_a) & set(ops_v)
    common = sorted(k for k in shared if _shaped(k))
    cal, tf32 = calibration(), tf32_of(a)
    err = defaultdict(float)
    total = 0.0
    by_kind = defaultdict(lambda: [0.0, 0.0, 0.0])
    for key in common:
        n_a, us_a, op = ops_a[key]
        n_v, us_v, _ = ops_v[key]
        measured_a, measured_v = us_a / n_a, us_v / n_v
        w_a, w_v = work_of(op, tf32), work_of(op, False)   # a V100 has no TF32: its GEMMs run in FP32
        projected = retargeted_us(measured_a, w_a, w_v, a100, v100, cal) or measured_a
        scaled = measured_a * kernel_us(w_v, v100, cal) / kernel_us(w_a, a100, cal)
        model = kernel_us(w_v, v100, cal)
        roof = roofline_us(w_v, v100)
        peak = measured_a * (roofline_us(w_v, v100) / max(roofline_us(w_a, a100), 1e-9))
        weight = n_v  # time-weighted over the V100's occurrences
        total += measured_v * weight
        for label, pred in (("projected", projected), ("scaled", scaled), ("model", model), ("roofline", roof),
                            ("peak ratio", peak)):
            err[label] += abs(pred - measured_v) * weight
        k = by_kind[w_v.kind]
        k[0] += measured_v * weight
        k[1] += abs(projected - measured_v) * weight
        k[2] += abs(roof - measured_v) * weight
    print(f"{len(common)} op-and-shape keys in common ({len(shared) - len(common)} more whose shapes were not "
          f"recorded), {total / 1e3:.1f} ms of V100 kernel time")
    _print_errors(err, total)
    for kind, (t, s, r) in by_kind.items():
        print(f"    {kind:<9} {t / 1e3:7.1f} ms: projected {s / t:6.1%}, roofline {r / t:6.1%}")
    neusight_pairs()


_LABELS = {"projected": "projected (the measured time, damped, onto the model: what --target does)",
           "scaled": "scaled (the measured time times the model's ratio)", "model": "the model alone",
           "roofline": "plain roofline", "peak ratio": "the measured time times the peaks' ratio"}


def _print_errors(err: dict, total: float) -> None:
    for label, value in err.items():
        print(f"  {_LABELS[label]:<76} time-weighted error {value / total:6.1%}")


def neusight_pairs() -> None:
    """Every op NeuSight measured on two GPUs, each GPU's time projected from the other's measurement."""
    from neusight import rows
    by: dict = defaultdict(dict)
    for cls, name, work, us in rows():
        if us <= 50_000:   # as calibrate_projection.py: kernels over 50 ms are clock-throttled
            by[(cls, work.flops, work.bytes, work.gemm)][name] = (work, us)
    cal, err, total, pairs = calibration(), defaultdict(float), 0.0, 0
    for measured in by.values():
        for src_name, (work, us_src) in measured.items():
            src = devices.device_named(src_name)
            for dst_name, (_, us_dst) in measured.items():
                if dst_name == src_name:
                    continue
                dst = devices.device_named(dst_name)
                model_src, model_dst = kernel_us(work, src, cal), kernel_us(work, dst, cal)
                total += us_dst
                pairs += 1
                for label, pred in (("projected", retargeted_us(us_src, work, work, src, dst, cal) or us_src),
                                    ("scaled", us_src * model_dst / model_src), ("model", model_dst),
                                    ("roofline", roofline_us(work, dst))):
                    err[label] += abs(pred - us_dst)
    print(f"NeuSight's labels as pairs of GPUs: {pairs} (op, shape, GPU -> other GPU) pairs")
    _print_errors(err, total)


def bottlenecks() -> None:
    from perfaudit.facts.registry import Context
    print("\n4. Bottleneck: projected (identity, measured kernels) vs measured timeline")
    agree = n = 0
    h100 = ROOT.parent / "h100_runs" / "traces"  # perfaudit's own samples recorded on an H100 (README there)
    for path in [ROOT / f"{name}.json.gz" for name in ALL_GPU] + sorted(h100.glob("*.json.gz")):
        name = str(path.relative_to(ROOT if ROOT in path.parents else h100.parents[1]))[:-len(".json.gz")]
        trace = load_trace(str(path))
        device = devices.device_named(trace.device_properties.get("name"))
        if device is None:
            continue
        measured = measured_class(Context(trace, None, ()))
        projected = Projector(trace, trace.measured_steps, device, Inputs(tf32_matmul=tf32_of(trace)), device).run()
        ok = projected.projection.bottleneck == measured
        agree += ok
        n += 1
        print(f"  {name:<44} measured {measured:<14} projected {projected.projection.bottleneck:<14}"
              f"{'' if ok else '  differs'}")
    print(f"  agreement {agree}/{n} ({agree / n:.0%})")


def measured_class(ctx) -> str:
    b = ctx.get("gpu.step_breakdown")
    comm = 0.0
    try:
        comm = ctx.get("comm.exposed")["exposed_ms"]
    except Exception:  # no collectives
        pass
    weights = {"gpu": b["compute"] - comm, "communication": comm, "copies": b["copies"], "sync": b["sync_wait"],
               "data": b["data_wait"], "host": b["other_idle"] + b.get("alloc_wait", 0.0)}
    return max(weights, key=weights.get)


def overhead(size_mb: float) -> None:
    """`analyze` on a large trace (bench.py's: the steps of the HTA A100 trace repeated), in fresh processes,
    alternating: no projection, the default (onto the GPU it was recorded on) and onto another GPU."""
    import tempfile

    from bench import SOURCE, build_trace, measure
    print(f"\n5. Overhead on analyze ({size_mb:.0f} MB trace built from {SOURCE.name}, best of 3, fresh processes)")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.json"
        build_trace(SOURCE, size_mb, big)
        times: dict = {}
        for _ in range(3):
            for target in ("none", "auto", "H100 SXM"):
                code = f"from perfaudit.api import analyze\nr = analyze([{str(big)!r}], target={target!r})"
                times.setdefault(target, []).append(measure(code))
    base = min(s for s, _ in times["none"])
    for target in ("auto", "H100 SXM"):
        best = min(s for s, _ in times[target])
        rss = max(r for _, r in times[target]) / max(r for _, r in times["none"])
        print(f"  --target {target:<9} {best:6.2f} s against {base:.2f} s without: +{best / base - 1:.0%} time, "
              f"peak RSS x{rss:.2f}")


if __name__ == "__main__":
    identity()
    across()
    print("\n3. Per op, held out by GPU (NeuSight)")
    neusight_main()
    bottlenecks()
    if "--no-overhead" not in sys.argv:
        overhead(float(sys.argv[sys.argv.index("--size-mb") + 1]) if "--size-mb" in sys.argv else 200.0)
