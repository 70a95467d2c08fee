"""How long one GPU kernel takes on a device, from what it does (`Work`): matrix ops, convolutions and
attention by their FLOPs against the device's peak for the precision, with the wave quantisation of their
output tiles over the SMs; every other op by the bytes it moves against memory bandwidth; a floor per
kernel. The efficiencies are data (calibration.yaml), fitted on public measurements, with their sources."""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from math import ceil, isfinite

import yaml

from .devices import Device

MATH_KINDS = ("matmul", "conv", "attention")
# the math precision of a recorded 16- or 8-bit dtype (float32: fp32, or tf32 where allowed)
PRECISION = {"c10::Half": "fp16", "c10::BFloat16": "bf16", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}


@dataclass(frozen=True, slots=True)
class Work:
    """What one kernel (or one op's kernels) does on the GPU."""
    kind: str            # matmul, conv, attention, memory, copy (host<->device), none
    flops: float = 0.0
    bytes: float = 0.0
    precision: str = "fp32"   # the math's precision: fp32, tf32, bf16, fp16, fp8
    gemm: tuple = ()     # a matrix op's (batch, m, n, k): how its work spreads over the SMs; (): not known
    kernels: int = 1     # kernel launches


@cache
def calibration() -> dict:
    """calibration.yaml, read once (libyaml when present): shared by every caller, so never changed."""
    with open(os.path.join(os.path.dirname(__file__), "calibration.yaml"), encoding="utf-8") as f:
        return yaml.load(f.read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def wave_utilisation(tiles: int, sms: int) -> float:
    """The share of the SMs' time a matrix op's output tiles keep busy: 132 tiles on 132 SMs fill one wave,
    133 take two waves, the second nearly empty."""
    if tiles <= 0 or sms <= 0:
        return 1.0
    waves = ceil(tiles / sms)
    return tiles / (waves * sms)


def gemm_utilisation(gemm: tuple, sms: int, cal: dict) -> float:
    """How well a matrix op of this shape can fill the GPU: the best of the tilings a GEMM library chooses
    from (large tiles are the most efficient per FLOP, small ones fill more SMs), each with split-K where
    the reduction is long; 1 when the shape is not known."""
    if not gemm or sms <= 0:
        return 1.0
    batch, m, n, k = gemm
    best = 0.0
    for tile, efficiency in cal["matmul"]["tilings"]:
        tiles = batch * ceil(m / tile) * ceil(n / tile)
        split = max(1, min(cal["matmul"]["max_split_k"], k // cal["matmul"]["split_k_depth"])) if tiles < sms else 1
        best = max(best, efficiency * wave_utilisation(tiles * split, sms))
    return best


def fp32_share(device: Device, cal: dict) -> float:
    """The share of its FP32 peak the device's FP32 GEMMs reach: measured, else what its TDP sustains (power ~
    clock cubed: under `full_w_per_tflop` W per peak TFLOP/s, the full share times the ratio's cube root)."""
    power, peak = cal["matmul"].get("fp32_power"), device.tflops.get("fp32", 0.0)
    if device.sgemm_efficiency or not power or device.tdp_w <= 0 or peak <= 0:
        return device.sgemm_efficiency or cal["matmul"]["fp32"]
    return power["full_share"] * min(1.0, device.tdp_w / peak / power["full_w_per_tflop"]) ** (1.0 / 3.0)


def kernel_us(work: Work, device: Device, cal: dict | None = None) -> float:
    """The kernel's time on `device`, µs."""
    cal = cal or calibration()
    if work.kind == "none" or not (isfinite(work.flops) and isfinite(work.bytes)):
        return 0.0
    floor = cal["kernel_floor_us"] * work.kernels
    # the bandwidth share: measured on this GPU, else its memory kind's (HBM, GDDR), else the median GPU's
    share = device.memory_efficiency or (cal.get("memory_efficiency_by_kind") or {}).get(device.memory_kind) \
        or cal["memory_efficiency"]
    memory = work.bytes / (device.memory_gbs * 1e3 * share)
    if work.kind in MATH_KINDS:
        # FP32: scaled by this device's FP32 share (its clocks, its SGEMM) against the median GPU's
        eff = cal[work.kind]["tensor"] if work.precision != "fp32" else \
            cal[work.kind]["fp32"] * fp32_share(device, cal) / cal["matmul"]["fp32"]
        util = gemm_utilisation(work.gemm, device.sms, cal)
        math = work.flops / (device.peak_flops(work.precision) * 1e-6 * eff * util)
        return max(math, memory, 0.0) + floor
    return max(memory, 0.0) + floor


def roofline_us(work: Work, device: Device) -> float:
    """Plain roofline, the baseline the calibrated model is measured against: the slower of peak math and
    peak bandwidth, no efficiency, no floor."""
    if work.kind == "none":
        return 0.0
    memory = work.bytes / (device.memory_gbs * 1e3)
    if work.kind in MATH_KINDS:
        return max(work.flops / (device.peak_flops(work.precision) * 1e-6), memory)
    return memory


def retargeted_us(measured_us: float, before: Work, after: Work, src: Device, dst: Device,
                  cal: dict | None = None) -> float | None:
    """An op's kernels measured at `measured_us` on `src`, on `dst` (`after`: its work there, in another
    precision say): the model's time on `dst` times a damped share of how far the measurement was from the
    model on `src`. On the same GPU the whole of it carries over (the op's own efficiency there); onto another
    GPU only `transfer_exponent` of it (in log terms): another architecture's library picks other kernels,
    and NeuSight's pairs of GPUs and the HTA A100/V100 pair both project better so than by the measured time
    times the model's ratio (calibration.yaml). None when the model does not see the op's work."""
    cal = cal or calibration()
    if not isfinite(measured_us) or measured_us <= 0 or (before.flops <= 0 and before.bytes <= 0):
        return None
    model_src, model_dst = kernel_us(before, src, cal), kernel_us(after, dst, cal)
    if not (isfinite(model_src) and isfinite(model_dst)) or model_src <= 0:
        return None
    alpha = 1.0 if src == dst else cal["transfer_exponent"]
    try:
        out = model_dst * (measured_us / model_src) ** alpha
    except OverflowError:  # a duration near the largest float: no time to project
        return None
    return out if isfinite(out) else None
