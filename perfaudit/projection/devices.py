"""The GPUs perfaudit knows (devices.yaml): peak math per precision, memory bandwidth, SMs, the PCIe link."""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from functools import cache

import yaml


@dataclass(frozen=True)
class Device:
    name: str
    tflops: dict          # precision -> dense TFLOP/s
    memory_gbs: float     # peak memory bandwidth, GB/s
    sms: int
    pcie: int             # the host link's PCIe generation
    match: tuple
    sgemm_efficiency: float | None = None   # measured share of the FP32 peak an FP32 GEMM reaches (devices.yaml)
    memory_gib: float = 0.0       # its memory (datasheet)
    compute_capability: float = 0.0  # NVIDIA's (9.0: Hopper); 0: not an NVIDIA GPU, or not in the table
    memory_bytes: int = 0         # its memory as the device reports it (a recorded trace's), where known
    memory_efficiency: float | None = None  # measured share of peak bandwidth a streaming kernel reaches
    tdp_w: float = 0.0            # the board's maximum power (datasheet); 0: not in the table
    memory_kind: str = ""        # hbm or gddr (datasheet); "": not in the table
    nvlink_gbs: float = 0.0       # NVLink (AMD: Infinity Fabric) per GPU, one direction, GB/s (datasheet); 0: none
    nccl_busbw_gbs: float = 0.0   # an all-reduce's bus bandwidth across a node, measured (nccl-tests); 0: not known

    @property
    def reported_memory(self) -> int:
        """The total memory torch.cuda reports for this device (total_memory, mem_get_info): as a trace of it
        recorded it, else the datasheet's GiB."""
        return self.memory_bytes or int(self.memory_gib * (1 << 30))

    def peak_flops(self, precision: str) -> float:
        """FLOP/s of the matrix units for `precision`; a precision the device has no units for runs at the
        nearest it has (TF32 on a V100 runs as FP32, BF16 as FP32 too)."""
        for p in {"fp8": ("fp8", "fp16", "bf16"), "bf16": ("bf16", "fp32"), "fp16": ("fp16",),
                  "tf32": ("tf32", "fp32")}.get(precision, ()) + ("fp32",):
            if p in self.tflops:
                return self.tflops[p] * 1e12
        return self.tflops.get("fp32", 1.0) * 1e12


@cache
def table() -> list[dict]:
    """devices.yaml's entries, as written (one source each)."""
    with open(os.path.join(os.path.dirname(__file__), "devices.yaml"), encoding="utf-8") as f:
        return yaml.load(f.read(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["devices"]  # libyaml when present


def _tokens(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.upper()).split()


def entry_for(name: str | None) -> dict | None:
    """The entry whose match tokens appear, in order, in the device's reported name ("NVIDIA A100-SXM4-80GB"
    is an A100 80GB, "NVIDIA A10G" is not an A10); None for a device the table does not know."""
    if not name:
        return None
    have = _tokens(name)
    for entry in table():
        for pattern in entry["match"]:
            want = _tokens(pattern)
            if any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
                return entry
    return None


# AMD Instinct parts as their GPUs report themselves when the name is generic ("AMD Radeon Graphics"): the
# architecture (gcnArchName, else HIP's major.minor with a 64-wide wavefront) and the compute units, which
# say the part and whether one device is the whole package or one of its dies (an MI250 shows as two GPUs)
_AMD = (("gfx90a", 9, 0, 104, "MI250", 2), ("gfx90a", 9, 0, 110, "MI250X", 2), ("gfx942", 9, 4, 304, "MI300X", 1))


def entry_by_architecture(props: dict | None) -> dict | None:
    """The table's entry (per die where a package has two) for a device the name does not identify, from the
    trace's deviceProperties; None when they do not say."""
    if not isinstance(props, dict):
        return None
    arch = str(props.get("gcnArchName") or "").split(":")[0]
    units, warp = props.get("numSms"), props.get("warpSize")
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    for gfx, want_major, want_minor, want_units, name, dies in _AMD:
        if units != want_units or not (arch == gfx or (not arch and warp == 64 and (major, minor) == (want_major, want_minor))):
            continue
        entry = next((e for e in table() if e["name"] == name), None)
        if entry is None or dies == 1:
            return entry
        return {**entry, "name": f"{name} (one of its {dies} dies, {gfx})",
                "tflops": {k: v / dies for k, v in entry["tflops"].items()}, "memory_gbs": entry["memory_gbs"] / dies,
                "memory_gib": entry["memory_gib"] / dies, "sms": entry["sms"] // dies}
    return None


def _device(entry: dict) -> Device:
    def measured(key: str) -> float | None:
        return float(entry[key]) if entry.get(key) is not None else None
    return Device(entry["name"], dict(entry["tflops"]), float(entry["memory_gbs"]), int(entry["sms"]), int(entry["pcie"]),
                  tuple(entry["match"]), measured("sgemm_efficiency"), float(entry.get("memory_gib", 0.0)),
                  float(entry.get("compute_capability", 0.0)), int(entry.get("memory_bytes", 0)),
                  measured("memory_efficiency"), float(entry.get("tdp_w", 0.0)), str(entry.get("memory_kind", "")),
                  float(entry.get("nvlink_gbs", 0.0)), float(entry.get("nccl_busbw_gbs", 0.0)))


def device_named(name: str | None) -> Device | None:
    """The device a reported name (a trace's deviceProperties, torch.cuda.get_device_name) is; None if unknown."""
    entry = entry_for(name)
    return _device(entry) if entry else None


def target(name: str) -> Device:
    """The device `--target NAME` names: an entry's name in any case, with `-`/`_` for spaces ("h100-sxm"),
    or a name the device reports. ValueError naming the nearest names when there is none."""
    wanted = _tokens(name)
    for entry in table():
        if _tokens(entry["name"]) == wanted:
            return _device(entry)
    found = entry_for(name)
    if found:
        return _device(found)
    names = [e["name"] for e in table()]
    near = difflib.get_close_matches(name.upper(), [n.upper() for n in names], n=3, cutoff=0.3)
    hint = f"; did you mean {', '.join(n for n in names if n.upper() in near)}?" if near else ""
    raise ValueError(f"unknown GPU '{name}'{hint} (known: {', '.join(names)})")

