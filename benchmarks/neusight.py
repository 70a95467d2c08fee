"""NeuSight's measured per-op latencies (sitar-lab/NeuSight @ 6945927, MIT, scripts/asplos/data/dataset/test:
linear, bmm, elem, ln, softmax on eight GPUs, fp32), a sample of up to 150 rows per op file and GPU, as the
projection's kernel model sees them: one `Work` and the measured µs each."""
from __future__ import annotations

import csv
import gzip
from pathlib import Path

from perfaudit.projection.devices import device_named
from perfaudit.projection.kernels import Work

DATA = Path(__file__).with_name("data") / "neusight_ops.csv.gz"
THREE_ARRAYS = {"add", "mul", "div", "pow"}   # two inputs and an output; the `…u` ops and activations: one input


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
                arrays = 3 if r["op"] in THREE_ARRAYS else 2
                work = Work("memory", bytes=4.0 * arrays * b * m)
                cls = "memory"
            out.append((cls, device.name, work, us))
    return out
