"""Fit the kernel model's efficiencies (perfaudit/projection/calibration.yaml) on public measurements and
print the per-op error held out by GPU, beside plain roofline's.

    python benchmarks/calibrate_projection.py          # print the errors with the shipped calibration
    python benchmarks/calibrate_projection.py --fit    # refit on all GPUs and print what to ship (the
                                                       # calibration's values, and each GPU's measured ones)
    python benchmarks/calibrate_projection.py --all    # kernels over 50 ms too (clock throttling shows)

Memory-bound ops (the floor and the bandwidth efficiency) and fp32 matrix ops come from NeuSight's labels
(benchmarks/neusight.py). Error is time-weighted: sum |projected - measured| / sum measured, per GPU, fitted
on the other GPUs, that GPU's own measured efficiencies (devices.yaml) dropped."""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import replace
from math import log

from neusight import rows

from perfaudit.projection.devices import device_named
from perfaudit.projection.kernels import calibration, kernel_us, roofline_us

GRID = {
    "kernel_floor_us": [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0],
    "memory_efficiency": [0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95],
    "matmul_fp32": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
}
# a GPU's own efficiencies, where its labels are measured: a finer grid (the 70 W cards sit far below)
OWN = [round(0.3 + 0.025 * i, 3) for i in range(27)]
# the FP32 share a GPU's power allows (kernels.fp32_share): the full share, and the watts per peak TFLOP/s it
# needs
POWER = {"full_share": [round(0.6 + 0.025 * i, 3) for i in range(15)],
         "full_w_per_tflop": [4, 6, 8, 10, 12, 14, 16, 18, 20, 24, 28, 32]}


def _cal(floor, mem, mm, power: dict | None = None, by_kind: dict | None = None) -> dict:
    """The shipped calibration with these values (nothing shipped from a fit leaks into a held-out one: the
    memory kinds' shares are `by_kind`, none when not given)."""
    cal = {k: (dict(v) if isinstance(v, dict) else v) for k, v in calibration().items()}
    cal.update(kernel_floor_us=floor, memory_efficiency=mem, memory_efficiency_by_kind=dict(by_kind or {}))
    cal["matmul"]["fp32"] = mm
    if power is not None:
        cal["matmul"]["fp32_power"] = power
    return cal


def error(data, cal, model=kernel_us, unseen: bool = False) -> float:
    """Time-weighted error; `unseen`: as for a GPU nothing was measured on (its own efficiencies dropped)."""
    measured = sum(us for _, _, _, us in data)
    if not measured:
        return 0.0
    total = 0.0
    for _, d, w, us in data:
        device = device_named(d)
        if unseen:
            device = _unseen(device)
        total += abs((model(w, device) if model is roofline_us else model(w, device, cal)) - us)
    return total / measured


def _unseen(device):
    return replace(device, sgemm_efficiency=None, memory_efficiency=None)


def log_error(data, cal, device=None) -> float:
    """The mean |log(projected / measured)|: what the fit minimises, so that no GPU's large times outweigh
    the others' (the printed error is time-weighted). `device`: every row on this one."""
    return sum(abs(log(kernel_us(w, device or _unseen(device_named(d)), cal) / us))
               for _, d, w, us in data) / max(len(data), 1)


def fit(data) -> tuple[dict, dict]:
    """The calibration's values and each GPU's measured efficiencies (devices.yaml `memory_efficiency`: the
    bandwidth share its memory-bound ops reach; `sgemm_efficiency`: the FP32 share its GEMMs reach). The
    floor is fitted with every GPU at its own bandwidth share; the calibration's efficiencies, what a GPU
    with no labels gets, are the median GPU's."""
    gpus = sorted({r[1] for r in data})
    rows_of = {(g, cls): [r for r in data if r[1] == g and r[0] == cls] for g in gpus for cls in ("memory", "matmul")}

    def own(gpu: str, cls: str, cal: dict) -> tuple[float, float] | None:
        part = rows_of[(gpu, cls)]
        if not part:
            return None
        key = "memory_efficiency" if cls == "memory" else "sgemm_efficiency"
        device = _unseen(device_named(gpu))
        return min((log_error(part, cal, replace(device, **{key: e})) * len(part), e) for e in OWN)

    def floor_error(floor: float) -> float:
        cal = _cal(floor, 0.75, 0.75)
        return sum(found[0] for g in gpus if (found := own(g, "memory", cal)))

    floor = min(GRID["kernel_floor_us"], key=floor_error)
    base = _cal(floor, 0.75, 0.75)
    measured = {g: {key: (found[1] if (found := own(g, cls, base)) else None)
                    for key, cls in (("memory_efficiency", "memory"), ("sgemm_efficiency", "matmul"))} for g in gpus}
    pooled = {cls: [r for r in data if r[0] == cls] for cls in ("memory", "matmul")}
    mem = min(GRID["memory_efficiency"], key=lambda e: log_error(pooled["memory"], _cal(floor, e, 0.75)))
    mm = min(GRID["matmul_fp32"], key=lambda e: log_error(pooled["matmul"], _cal(floor, mem, e, {})))
    power = min(({"full_share": a, "full_w_per_tflop": w} for a in POWER["full_share"] for w in POWER["full_w_per_tflop"]),
                key=lambda p: log_error(pooled["matmul"], _cal(floor, mem, mm, p)))
    kind_of = {g: device_named(g).memory_kind for g in gpus}
    by_kind = {}
    for kind in sorted(set(kind_of.values()) - {""}):
        part = [r for r in pooled["memory"] if kind_of[r[1]] == kind]
        if part:
            by_kind[kind] = min(OWN, key=lambda e: log_error(part, _cal(floor, e, 0.75)))
    return _cal(floor, mem, mm, power, by_kind), measured


LONG_US = 50_000  # kernels longer than a training step's are where a card's clock throttles (P100: 11 s GEMMs)


def main() -> None:
    data = rows()
    if "--all" not in sys.argv:
        data = [r for r in data if r[3] <= LONG_US]
    by_gpu = defaultdict(list)
    for r in data:
        by_gpu[r[1]].append(r)
    shipped = calibration()
    print("time-weighted per-op error; held out: fitted on the other GPUs, the GPU's own measured efficiencies "
          "dropped (its FP32 share from its power, its bandwidth share from its memory kind); one share: the same, "
          "every unmeasured GPU at the median GPU's shares; shipped: calibration.yaml and devices.yaml as shipped")
    print(f"{'GPU':<16}{'class':<8}{'rows':>6}{'held out':>10}{'one share':>10}{'shipped':>9}{'roofline':>10}")
    totals = defaultdict(lambda: [0.0] * 5)
    for gpu, own in sorted(by_gpu.items()):
        held, _ = fit([r for r in data if r[1] != gpu])
        flat = _cal(held["kernel_floor_us"], held["memory_efficiency"], held["matmul"]["fp32"], {})
        for cls in ("matmul", "memory"):
            part = [r for r in own if r[0] == cls]
            errors = (error(part, held, unseen=True), error(part, flat, unseen=True), error(part, shipped),
                      error(part, None, roofline_us))
            print(f"{gpu:<16}{cls:<8}{len(part):>6}" + "".join(f"{e:>{w}.1%}" for e, w in zip(errors, (9, 10, 9, 10))))
            acc = totals[cls]
            acc[0] += sum(us for *_, us in part)
            for i, e in enumerate(errors, 1):
                acc[i] += e * sum(us for *_, us in part)
    rows_out = [*totals.items(), ("all", [sum(v[i] for v in totals.values()) for i in range(5)])]
    for cls, (t, *sums) in rows_out:
        print(f"{'all GPUs':<16}{cls:<8}{'':>6}" + "".join(f"{x / t:>{w}.1%}" for x, w in zip(sums, (9, 10, 9, 10))))
    if "--fit" in sys.argv:
        cal, measured = fit(data)
        print("fitted on all:", {k: cal[k] for k in ("kernel_floor_us", "memory_efficiency", "memory_efficiency_by_kind")},
              "matmul fp32", cal["matmul"]["fp32"], "fp32_power", cal["matmul"]["fp32_power"])
        for gpu, own in measured.items():
            print(f"  {gpu:<16} measured: {own}")


if __name__ == "__main__":
    main()
