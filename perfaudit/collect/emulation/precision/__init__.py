"""The emulated device's 16-bit math: CUDA autocast followed on CPU tensors (autocast.py), and on a CPU without
fast 16-bit matrix math its matrix ops computed in float32 while keeping the 16-bit types (half_math.py)."""
