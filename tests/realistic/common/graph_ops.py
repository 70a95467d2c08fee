"""Graph pooling and message passing in the shape of torch_geometric's (a library the step calls)."""
import torch


def global_mean_pool(x, batch, size=None):
    size = int(batch.max().item() + 1) if size is None else size
    out = torch.zeros(size, x.size(-1), device=x.device, dtype=x.dtype)
    out.index_add_(0, batch, x)
    count = torch.zeros(size, device=x.device, dtype=x.dtype).index_add_(0, batch, torch.ones_like(batch, dtype=x.dtype))
    return out / count.clamp(min=1).unsqueeze(-1)


def scatter_sum(src, index, dim_size):
    out = torch.zeros(dim_size, src.size(-1), device=src.device, dtype=src.dtype)
    return out.index_add_(0, index, src)
