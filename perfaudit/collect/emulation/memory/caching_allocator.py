"""PyTorch's CUDA caching allocator, replayed: how much a GPU reserves for a sequence of allocations and frees.

What `torch.cuda.memory_reserved()` reports is the segments the allocator took from the driver and keeps (it
never gives one back unless asked: `empty_cache()`), and those depend on the order of requests, not only on
what is live at the peak: a freed block is reused for a smaller request (split) or not at all for a larger
one. This follows c10/cuda/CUDACachingAllocator.cpp's rules for one stream without expandable segments:
requests rounded up to 512 bytes; up to 1 MiB from a small pool of 2 MiB segments, larger ones from a large
pool (20 MiB segments below 10 MiB, else the request rounded up to 2 MiB); the smallest free block that fits
is taken (best fit), split when what remains is at least 512 bytes (small) or more than 1 MiB (large);
a freed block merges with free neighbours of its segment. Pure Python, no torch: the device memory replay
(device_memory.py) feeds it the step's timeline.
"""
from __future__ import annotations

from bisect import bisect_left, insort

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20

# What a training process holds on its GPU outside torch's caching allocator: the CUDA context (the driver's
# state, the kernels loaded so far) and the libraries' own memory once cuBLAS and cuDNN have run; torch's counters
# never see it, nvidia-smi does. Measured on an H100 80GB HBM3 (torch 2.11 + CUDA 13, driver 580, lazy module
# loading) after 23 steps of 22 training scripts: 749-771 MiB, median 751 (device used less torch's reserved;
# benchmarks/gpu_plain_steps.py, tests/data/h100_runs/plain_steps.json). PyTorch's maintainers give about 300-400 MB
# for the context alone (pytorch issues 107667, 109888); the libraries' handles and modules come on top.
CUDA_CONTEXT_BYTES = 750 << 20


def cublas_workspace_bytes(compute_capability: float) -> int:
    """The cuBLAS workspace torch takes from its caching allocator per handle and stream, without
    CUBLAS_WORKSPACE_CONFIG (ATen's CublasHandlePool.cpp): 32 MiB on sm90 (Hopper), else 8 MiB + 128 KiB;
    0 for a GPU that is not NVIDIA's (ROCm sizes hipBLAS's otherwise)."""
    if not compute_capability:
        return 0
    return 4096 * 8 * 1024 if compute_capability == 9.0 else 4096 * 1024 * 2 + 16 * 1024 * 8


def cublaslt_workspace_bytes(compute_capability: float) -> int:
    """cuBLASLt's workspace, one a process beside the first cuBLAS workspace: 1 MiB on sm90 with torch 2.11,
    allocated by the first matrix product and kept (seen in the H200's allocator stacks; every training script on
    an H100 and an H200 held exactly this much more than the emulated estimate). Not seen on other GPUs."""
    return 1 << 20 if compute_capability == 9.0 else 0


def round_size(nbytes: int) -> int:
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(nbytes: int) -> int:
    if nbytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if nbytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-nbytes // ROUND_LARGE) * ROUND_LARGE


class _Block:
    __slots__ = ("addr", "size", "free", "prev", "next", "small")

    def __init__(self, addr: int, size: int, small: bool):
        self.addr, self.size, self.free, self.small = addr, size, True, small
        self.prev: _Block | None = None
        self.next: _Block | None = None


class CachingAllocator:
    """`malloc(nbytes)` -> a handle, `free(handle)`; `reserved` and `allocated` as torch counts them, and
    their peaks."""

    def __init__(self):
        self._pools: dict[bool, list] = {True: [], False: []}  # small? -> sorted [(size, addr, block)]
        self._next_addr = 0
        self.reserved = self.allocated = self.peak_reserved = self.peak_allocated = 0

    def malloc(self, nbytes: int) -> _Block:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:  # nothing cached fits: a new segment from the driver
            seg = segment_size(size)
            block = _Block(self._next_addr, seg, small)
            self._next_addr += seg
            self.reserved += seg
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = _Block(block.addr + size, remaining, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            insort(pool, (rest.size, rest.addr, rest))
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: _Block) -> None:
        if block.free:
            return
        self.allocated -= block.size
        block.free = True
        pool = self._pools[block.small]
        for neighbour in (block.prev, block.next):  # merge with the free neighbours of its segment
            if neighbour is not None and neighbour.free:
                pool.remove((neighbour.size, neighbour.addr, neighbour))
                if neighbour is block.prev:
                    neighbour.size += block.size
                    neighbour.next = block.next
                    if block.next is not None:
                        block.next.prev = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
        insort(pool, (block.size, block.addr, block))

    def empty_cache(self) -> tuple[int, int]:
        """`torch.cuda.empty_cache()`: every segment with nothing allocated in it goes back to the driver (a
        cudaFree each; a segment that still holds a block stays whole). Returns (segments, bytes) released."""
        segments = released = 0
        for pool in self._pools.values():
            whole = [entry for entry in pool if entry[2].prev is None and entry[2].next is None]
            for entry in whole:
                pool.remove(entry)
                segments, released = segments + 1, released + entry[0]
        self.reserved -= released
        return segments, released
