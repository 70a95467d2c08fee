"""Device selection as shared training utilities do it: torch.accelerator when the torch has it."""
import torch


def pick_device() -> torch.device:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator()
    return torch.device("cpu")


def optimizer_kwargs(device: torch.device) -> dict:
    """fused=True where the fused kernel exists and pays: on CUDA."""
    return {"fused": True} if device.type == "cuda" else {}
