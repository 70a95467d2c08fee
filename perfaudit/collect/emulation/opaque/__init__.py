"""Code the placement mode cannot see into: torch.compile's graphs (the mode would be traced into them),
TorchScript (its interpreter calls ATen from C++) and CUDA graphs' replays (the captured aten ops, run again).
Each runs as it does on a GPU; what it returns is on the device when what it was given, or the module it runs,
is."""
