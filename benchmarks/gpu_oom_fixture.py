"""Record, on a real GPU, the allocator snapshot perfaudit's OOM watch reads when a script runs out of memory
(tests/data/h100_runs/), and check the watch on it.

    python benchmarks/gpu_oom_fixture.py OUT.json.gz [SCRIPT [ARGS...]]

The script (default benchmarks/gpu_scripts/big_vocab_lm.py, whose logits do not fit) runs in this process with
the OOM watch installed as `perfaudit run` installs it; what the watch was given at the OOM (the snapshot's
segments and live blocks with their stacks, the blocks' categories) is saved with its summary, the device and
torch's counters, so that a test replays a real OOM on a machine without a GPU.
"""
from __future__ import annotations

import gc
import gzip
import json
import runpy
import sys

import torch

from perfaudit.collect.probes import oom


def main() -> None:
    out = sys.argv[1]
    script, *args = sys.argv[2:] or ["benchmarks/gpu_scripts/big_vocab_lm.py"]
    captured: dict = {}
    summarize = oom.live_blocks_at_oom

    def capture(snapshot, device, categories):
        keep_block = ("address", "size", "requested_size", "state", "frames")
        captured["snapshot"] = {"segments": [
            {"device": s.get("device"), "address": s.get("address"), "total_size": s.get("total_size"),
             "segment_type": s.get("segment_type"),
             "blocks": [{k: b[k] for k in keep_block if k in b} for b in s.get("blocks") or []]}
            for s in snapshot.get("segments") or []]}
        captured.update(device=device, categories={str(a): c for a, c in categories.items()})
        return summarize(snapshot, device, categories)
    oom.live_blocks_at_oom = capture
    watch = oom.OomWatch(lambda: [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)])
    watch.install()
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        print("the script did not run out of memory")
    except torch.OutOfMemoryError as exc:
        result = {"outcome": "raised", "exception": type(exc).__name__, "message": str(exc).splitlines()[0]}
        watch.attach(result)
        captured.update(result=result.get("oom"), message=result["message"], device_name=torch.cuda.get_device_name(),
                        torch=torch.__version__, max_allocated=torch.cuda.max_memory_allocated())
        with gzip.open(out, "wt") as f:
            json.dump(captured, f)
        at = result.get("oom") or {}
        print({k: v for k, v in at.items() if k != "top_sites"})
        for site in at.get("top_sites", [])[:5]:
            print(site)


if __name__ == "__main__":
    main()
