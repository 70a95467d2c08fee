"""The CUDA calls training scripts make, on the CUDA path: run by `perfaudit run` on a machine without
a GPU, every one must be served by the emulated device (tests/test_emulation.py)."""
import sys

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DataLoader, TensorDataset

assert torch.cuda.is_available() and torch.cuda.device_count() == 1, "no CUDA path"
assert torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == "cuda"
torch.cuda.set_device(0)
torch.cuda.manual_seed_all(0)
props = torch.cuda.get_device_properties(0)
assert torch.cuda.get_device_capability() == (props.major, props.minor) == (9, 0), "the default target is an H100"
print(torch.cuda.get_device_name(0), props.total_memory, torch.cuda.get_device_capability(), file=sys.stderr)
assert torch.cuda.is_bf16_supported()
device = torch.device("cuda", torch.cuda.current_device())
torch.backends.cudnn.benchmark = True
sampler = torch.Generator(device=device).manual_seed(0)  # seeded sampling on the device (diffusion code)
assert sampler.device.type == "cuda" and torch.Generator().device.type == "cpu"
assert torch.randn(4, device=device, generator=sampler).is_cuda
print(f"utilization {torch.cuda.utilization()} %", file=sys.stderr)  # NVML's readings, as monitoring code logs
torch.cuda.memory._record_memory_history(max_entries=1000)  # a memory-profiling script's history and snapshot
assert "segments" in torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
torch.cuda.nvtx.range_push("attention")  # ranges for Nsight
q = torch.randn(2, 4, 16, 8, device=device, requires_grad=True)
with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):  # a GPU kernel the CPU lacks
    nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
# the older switch, math off: training's dropout takes the CPU's math path only
with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=True):
    nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1).sum().backward()
with torch.cuda.nvtx.range("inner"):
    torch.cuda.nvtx.mark("marked")
torch.cuda.nvtx.range_pop()
adjacency = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.ones(3), (3, 3)).cuda()  # a GCN's
assert adjacency.is_cuda and torch.sparse.mm(adjacency, torch.randn(3, 4, device=device)).is_cuda
torch.cuda.profiler.start()  # Nsight's capture range, through the CUDA runtime's bindings
torch.cuda.profiler.stop()

model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)).to(device)
assert next(model.parameters()).is_cuda and next(model.parameters()).device.type == "cuda"
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
data = TensorDataset(torch.randn(256, 3, 16, 16), torch.randint(0, 10, (256,)))
loader = DataLoader(data, batch_size=32, shuffle=True, pin_memory=True, drop_last=True)
side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize()  # before timing the epochs (also at each epoch's end, which the window may not reach)
assert torch.zeros(2, device=device).cpu().device.type == "cpu"  # a read back, as at each epoch's end

for epoch in range(100):
    torch.cuda.reset_peak_memory_stats()
    for step, (x, y) in enumerate(loader):
        assert x.is_pinned()
        with torch.cuda.stream(side):
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())  # apex's data_prefetcher: the side stream's copy, used here
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        end.record()
        if step % 4 == 0:
            end.synchronize()
            used = torch.cuda.max_memory_allocated() + torch.cuda.memory_allocated() + torch.cuda.memory_reserved()
            print(f"{epoch}/{step} loss {loss.item():.3f} {start.elapsed_time(end):.2f} ms {used} B", file=sys.stderr)
    assert loss.device.type == "cuda" and loss.cpu().device.type == "cpu"
    torch.cuda.synchronize()
