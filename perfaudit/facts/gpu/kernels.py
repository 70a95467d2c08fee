"""What a GPU kernel is, from its name: a collective, a matrix kernel and its precision, a small
elementwise kernel, the architecture it was built for. Each distinct name is classified once (names are
long C++ templates that repeat thousands of times in a trace), never event by event.

The names come from several vendors and libraries: NCCL/RCCL collectives, expert-parallel all-to-all
kernels (DeepEP's `dispatch`/`combine`), cuBLAS/cuDNN/CUTLASS (`sm80_xmma_…`, `volta_sgemm_…`),
hipBLASLt/Tensile on AMD (`Cijk_…`), Triton (`triton_poi_…`)."""
from __future__ import annotations

import re

_COLLECTIVE = re.compile(
    r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoallv?|sendrecv|broadcast_kernel"
    r"|deep_?ep|(?:intra|inter)node::(?:dispatch|combine)|moe_?(?:dispatch|combine)|c10d::", re.I)
_MATH = re.compile(r"gemm|conv|cutlass|xmma|cudnn|wgrad|dgrad|fprop|matmul|gemv|mma|Cijk_|hipblaslt", re.I)
_HALF = re.compile(r"h884|h1688|h16816|hmma|fp16|bf16|f16|half|bfloat|e4m3|e5m2|fp8|Cijk_\w*?_(?:HH|BB|HHS|BBS|HSS|BSS)_")
_HALF_I = re.compile(r"h884|h1688|h16816|hmma|fp16|bf16|f16|half|bfloat|e4m3|e5m2|fp8", re.I)
_TF32 = re.compile(r"tf32|s1688|s16816|s884|xf32", re.I)
_ELEMENTWISE = re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|fill|copy_kernel", re.I)
# the architecture a kernel was compiled for, when its name says: (compute capability, tensor cores)
_ARCH = ((re.compile(r"\bsm_?100|blackwell", re.I), 10.0), (re.compile(r"\bsm_?90|hopper", re.I), 9.0),
         (re.compile(r"\bsm_?89|ada", re.I), 8.9), (re.compile(r"\bsm_?8[06]|ampere", re.I), 8.0),
         (re.compile(r"\bsm_?75|turing", re.I), 7.5), (re.compile(r"\bsm_?7[02]|volta", re.I), 7.0),
         (re.compile(r"\bsm_?6\d|pascal|maxwell", re.I), 6.0))
_AMD = re.compile(r"Cijk_|hipblaslt|rocblas|\bMIOpen|rccl|__amd_", re.I)

_cache: dict[tuple[str, str], object] = {}
stats = {"lookups": 0, "misses": 0}  # the classification cache's hit rate (benchmarks/bench.py prints it)


def _cached(kind: str, name: str, compute):
    stats["lookups"] += 1
    key = (kind, name)
    try:
        return _cache[key]
    except KeyError:
        stats["misses"] += 1
        value = _cache[key] = compute(name)
        return value


def is_collective(name: str) -> bool:
    return _cached("collective", name, lambda n: bool(_COLLECTIVE.search(n)))


def kernel_class(name: str) -> str | None:
    """"half", "tf32" or "fp32" for a matrix kernel (GEMM/conv), None for any other kernel."""
    def classify(n: str) -> str | None:
        if _COLLECTIVE.search(n) or not _MATH.search(n):
            return None
        return "half" if _HALF_I.search(n) or _HALF.search(n) else "tf32" if _TF32.search(n) else "fp32"
    return _cached("class", name, classify)


def is_small_elementwise(name: str) -> bool:
    return _cached("elementwise", name, lambda n: bool(_ELEMENTWISE.search(n)))


def architecture(name: str) -> float | None:
    """The compute capability a kernel's name says it was built for (an AMD matrix kernel counts as one
    with matrix cores, 9.0); None when the name does not say."""
    def arch(n: str) -> float | None:
        if _AMD.search(n):
            return 9.0
        return next((cap for pattern, cap in _ARCH if pattern.search(n)), None)
    return _cached("arch", name, arch)


def is_amd(name: str) -> bool:
    return _cached("amd", name, lambda n: bool(_AMD.search(n)))
