"""The tip catalogue: ids and titles, so rules can name the tips they implement, and what each asks (docs/tips.md)."""

TIPS = {
    "T01": "Host-device synchronisation inside the step",
    "T02": "Zero-filling gradients instead of setting them to None",
    "T03": "Conv/Linear bias directly followed by BatchNorm",
    "T04": "Pageable host memory and blocking host-to-device copies",
    "T05": "Data loading in the main process (DataLoader workers)",
    "T06": "Input pipeline still the bottleneck with workers",
    "T07": "Debug APIs left on in real training",
    "T08": "cudnn.benchmark and fixed vs varying input shapes",
    "T09": "No mixed precision on a tensor-core GPU",
    "T10": "Non-fused optimizer",
    "T11": "Many small unfused pointwise ops",
    "T12": "Batch too small for the device",
    "T13": "Varying batch shapes",
    "T14": "Memory-bound model: activation checkpointing",
    "T15": "nn.DataParallel instead of DistributedDataParallel",
    "T16": "Unbalanced ranks in distributed training",
    "T17": "Tensors created on the CPU then moved to the device",
    "T18": "torch.cuda.empty_cache() called during training",
    "T19": ".cpu()/.numpy() used only to drop the graph",
    "T20": "Measure before changing; check convergence after",
    "T21": "Use the vendor's container image (CUDA/cuDNN versions)",
    "T22": "Pinning memory reserves host RAM",
    "T23": "For small datasets the gain from pinning is negligible",
    "T24": "LR schedules and AdamW instead of Adam with L2",
    "T25": "torch.compile graph breaks inside the training step",
    "T26": "Recompilation during training",
    "T27": "DistributedDataParallel set up for the worst case",
    "T28": "Communication left exposed (not overlapped, or gloo for CUDA tensors)",
    "T29": "Slow start: seconds before the first training step",
    "T30": "Allocator churn: device memory allocated and freed every step",
    "T31": "Model FLOPs left unused (MFU) and where the step goes",
}

# What each tip asks of a training script, in a sentence (the docs' tip catalogue, docs/tips.md)
ASKS = {
    "T01": "Keep values on the device inside the step: no `.item()`, `.cpu()`, `.tolist()`, `print` or Python "
           "`if` on a CUDA tensor, no blocking `.to()` back to the host, so the host never waits for the GPU.",
    "T02": "Drop gradients with `zero_grad(set_to_none=True)` (the default since torch 2.0) or `p.grad = None` "
           "instead of writing zeros into them.",
    "T03": "Build a convolution or linear layer that feeds BatchNorm with `bias=False`: the normalisation "
           "cancels the bias.",
    "T04": "Load batches into pinned memory (`pin_memory=True`) and copy them with `non_blocking=True`.",
    "T05": "Load data in DataLoader worker processes (`num_workers`, `persistent_workers=True`), the count "
           "found by measurement.",
    "T06": "When workers still leave the step waiting, make loading itself cheaper: formats, decoding, caching, "
           "augmentation on the GPU.",
    "T07": "Turn debug APIs off for real training: anomaly detection, nested profilers, `emit_nvtx`, "
           "`gradcheck`.",
    "T08": "Set `cudnn.benchmark=True` when input shapes are fixed, and off when they change every step.",
    "T09": "Use mixed precision (`torch.autocast` with bf16, or fp16 with a GradScaler) on a tensor-core GPU, "
           "and check training still converges.",
    "T10": "Use the optimizer's fused (or foreach) implementation instead of its per-parameter loop.",
    "T11": "Fuse runs of small pointwise ops (`torch.compile`, fused layers) so the GPU is not launch-bound.",
    "T12": "Raise the batch size while memory allows, scaling the learning rate with it.",
    "T13": "Feed batches of fixed shapes where possible, or pad to a few sizes.",
    "T14": "Trade compute for memory with activation checkpointing when memory caps the batch.",
    "T15": "Use DistributedDataParallel instead of `nn.DataParallel`.",
    "T16": "Balance the work of a distributed job's ranks: the slowest sets everyone's step.",
    "T17": "Create tensors on the device they are used on (`device=`), not on the host and then moved.",
    "T18": "Do not call `torch.cuda.empty_cache()` in the training loop.",
    "T19": "Use `.detach()`, not `.cpu()`/`.numpy()`, to drop a tensor's graph.",
    "T20": "Measure before changing anything, and check that training still converges after each change.",
    "T21": "Run on a known-good software stack (the vendor's container): matching CUDA and cuDNN, tensor cores "
           "used.",
    "T22": "Pin memory with care: pinned host RAM is locked, so keep batches and prefetching modest.",
    "T23": "Expect little from pinning on small datasets: rank fixes by their measured cost.",
    "T24": "Prefer AdamW to Adam with L2 regularisation, and a learning-rate schedule (convergence, not speed).",
    "T25": "Remove `torch.compile` graph breaks inside the step, or move their cause out of the compiled region.",
    "T26": "Stop recompiling during training: stable Python values, `dynamic=True` or `mark_dynamic` for shapes "
           "that change.",
    "T27": "Configure DistributedDataParallel for the job: no `find_unused_parameters` without unused "
           "parameters, `no_sync()` when accumulating gradients, gradients as bucket views.",
    "T28": "Overlap communication with the backward pass, and use NCCL for CUDA tensors.",
    "T29": "Make the start-up fast: vectorise or cache per-sample preparation before the first step.",
    "T30": "Keep the caching allocator on and let it reuse memory: no per-step `cudaMalloc`/`cudaFree`.",
    "T31": "Know the model FLOPs utilisation and which of the other tips the rest of the step goes to.",
}

# Where the tips come from (docs/tips.md); each rule names its own references too
SOURCES = (
    "Five practitioners' guides to faster PyTorch training: a Russian single-GPU checklist, a Chinese summary "
    "of NVIDIA's ECCV 2020 mixed-precision tutorial, an English memo of a 2021 faster-training guide, a "
    "Chinese Lightning-flavoured article and a Russian post on memory pinning (T01-T24)",
    "The PyTorch performance tuning guide: "
    "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "What practitioners hit since (T25-T31): torch.compile's graph breaks and recompiles, DDP's options, "
    "exposed communication, slow starts, allocator churn and MFU, from the PyTorch documentation, "
    "HolisticTraceAnalysis and the TensorBoard profiler plugin",
)
