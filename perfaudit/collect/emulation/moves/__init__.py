"""Where tensors cross onto the emulated device besides the placement mode's own moves: a sample moved in a
Dataset's `__getitem__` (samples.py), a checkpoint loaded onto the GPU (checkpoints.py), a device named by its
bare index (device_index.py), and a host operand meeting a device one, which a GPU refuses (same_device.py)."""
