"""NeuSight's measured per-op latencies (sitar-lab/NeuSight @ 6945927, MIT, scripts/asplos/data/dataset/test:
linear, bmm, elem, ln, softmax on eight GPUs, fp32), a sample of up to 150 rows per op file and GPU, as the
projection's kernel model sees them: one `Work` and the measured µs each."""
from __future__ import annotations

import csv
import gzip
from pathlib import Path

from perfaudit.projection.devices import device_named
from perfaudit.projection.kernels import Work
from perfaudit.projection.work import work_of
from perfaudit.trace.model import Event

DATA = Path(__file__).with_name("data") / "neusight_ops.csv.gz"
F = "float"
# each memory-bound op as the profiler records it (name, input types; "x": the [b, m] input, "w": an [m]
# weight): its bytes come from projection/work.py, as a CPU run's ops get theirs. `…u`: with a scalar.
OPS = {"add": ("aten::add", "xxs"), "mul": ("aten::mul", "xx"), "div": ("aten::div", "xx"), "pow": ("aten::pow", "xx"),
       "addu": ("aten::add", "xss"), "mulu": ("aten::mul", "xs"), "divu": ("aten::div", "xs"),
       "powu": ("aten::pow", "xs"), "gelu": ("aten::gelu", "xs"), "relu": ("aten::relu", "x"),
       "tanh": ("aten::tanh", "x"), "ln": ("aten::native_layer_norm", "xswws"), "softmax": ("aten::_softmax", "xss")}


def _op(op: str, b: int, m: int) -> Event:
    name, inputs = OPS[op]
    dims = [[b, m] if c == "x" else [m] if c == "w" else [] for c in inputs]
    types = [F if c in "xw" else "Scalar" for c in inputs]
    return Event("cpu_op", name, 0.0, 0.0, 0, 0, {"Input Dims": dims, "Input type": types})


def rows() -> list[tuple[str, str, Work, float]]:
    """(op class, device name in perfaudit's table, work, measured µs)."""
    out = []
    with gzip.open(DATA, "rt", newline="") as f:
        for r in csv.DictReader(f):
            device = device_named(r["device"])
            if device is None:
                continue
            b, m = int(r["b"]), int(r["m_or_h"])
            us = float(r["latency_ms"]) * 1e3
            if r["op"] in ("linear", "bmm"):
                n, k = int(r["n"]), int(r["k"])
                work = Work("matmul", flops=2.0 * b * m * n * k, bytes=4.0 * b * (m * k + k * n + m * n),
                            gemm=(b, m, n, k))
                cls = "matmul"
            else:
                work, cls = work_of(_op(r["op"], b, m)), "memory"
            out.append((cls, device.name, work, us))
    return out
