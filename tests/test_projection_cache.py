"""MEM001's projected saving: torch.cuda.empty_cache() gives the cached segments with nothing in them back to the
driver (a cudaFree each), and the next step takes them again (a cudaMalloc each). The emulated device replays its
tracked steps through a model of torch's caching allocator, which says how many a call gives back."""
from __future__ import annotations

import gzip
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from perfaudit.collect.emulation.memory.caching_allocator import CachingAllocator
from perfaudit.projection.kernels import calibration


def test_empty_cache_gives_back_the_segments_with_nothing_in_them():
    """A segment that still holds a block stays (its free part too); a whole free one goes back, and a later
    request that no cached block fits takes a new segment from the driver."""
    allocator = CachingAllocator()
    big = allocator.malloc(12 << 20)      # a large pool segment of its own (12 MiB)
    kept = allocator.malloc(4 << 20)      # a 20 MiB segment, 16 MiB of it free after the split
    weights = allocator.malloc(1000)      # a 2 MiB small-pool segment
    allocator.free(big)
    assert allocator.reserved == (12 + 20 + 2) << 20
    assert allocator.empty_cache() == (1, 12 << 20)
    assert allocator.reserved == (20 + 2) << 20 and allocator.allocated == (4 << 20) + 1024
    again = allocator.malloc(18 << 20)    # more than the 16 MiB left free beside `kept`: a new segment
    assert allocator.reserved == (18 + 20 + 2) << 20
    for block in (kept, weights, again):
        allocator.free(block)
    assert allocator.empty_cache() == (3, 40 << 20)
    assert allocator.empty_cache() == (0, 0) and allocator.reserved == 0


def test_mem001_is_ranked_by_the_segments_each_call_gives_back_and_takes_again(realistic_reports):
    """cache_clearing_trainer.py empties the cache after every step: its activations' 20 MiB segment goes back
    each time and the next step takes it again. MEM001's projected saving is a cudaFree and a cudaMalloc for each
    such segment (calibration.yaml, measured on an H100), and its note says what the allocator gave back."""
    report = realistic_reports["cache_clearing_trainer.py"]["run"]
    mem = next(f for f in report["findings"] if f["rule"] == "MEM001")
    note = next(n for n in mem["notes"] if "allocator" in n)
    segments = float(note.split(" gives back ")[1].split(" ")[0])
    assert segments >= 1 and "MiB) at each call" in note, note
    cal = calibration()
    per_call = segments * (cal["cuda_free_us"] + cal["cuda_malloc_us"]) / 1e3
    assert 0.9 * per_call <= mem["projected_ms_per_step"] <= 1.1 * per_call, (mem, per_call)


def test_an_empty_cache_that_gives_back_nothing_projects_nothing_as_on_the_h100(sample_report):
    """sample_scripts/empty_cache_bad.py's tiny model keeps every tensor in segments that also hold its weights:
    the allocator model gives back nothing, and on an H100 (tests/data/h100_runs) its steps made no cudaMalloc
    nor cudaFree at all. MEM001 still fires (the call is in the loop) with a projected saving of nothing."""
    mem = next(f for f in sample_report("empty_cache_bad.py")["findings"] if f["rule"] == "MEM001")
    assert any("gives back nothing" in n for n in mem["notes"]), mem["notes"]
    assert mem["projected_ms_per_step"] == 0.0, mem
    trace = json.load(gzip.open(ROOT / "tests" / "data" / "h100_runs" / "traces" / "empty_cache_bad.json.gz"))
    assert not [e for e in trace["traceEvents"] if e.get("name") in ("cudaMalloc", "cudaFree")]
    assert any(e.get("name") == "cudaLaunchKernel" for e in trace["traceEvents"])  # the runtime's calls were recorded


_ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 40), st.floats(allow_nan=True),
                              st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4)), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(emptied=st.one_of(_ANY, st.fixed_dictionaries({"calls": st.integers(-2, 5), "segments": st.integers(-2, 50),
                                                      "bytes": st.integers(-2, 1 << 40)})))
def test_a_hostile_record_of_emptied_caches_gives_a_count_or_nothing(emptied):
    """The device memory record is read from the trace, the user's file: anything there gives MEM001's count of
    segments a call gives back, or none (the record refused), never an error nor a negative count."""
    from perfaudit.facts import Context, Missing
    from perfaudit.probe_schema import checked_probes
    from perfaudit.trace.model import Trace
    memory = {"peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "by_category": {}, "top_sites": [],
              "empty_cache": emptied}
    probes, _ = checked_probes({"device_memory": memory})
    ctx = Context(Trace(path="t.json", meta={"perfaudit": {"probes": probes}}), None, ())
    try:
        release = ctx.get("mem.empty_cache_release")
    except Missing:
        return
    assert release["segments"] >= 0 and release["mib"] >= 0, release
