"""The emulated device's math as a GPU's libraries do it: CUDA autocast followed on CPU tensors (autocast.py), and
on a CPU without fast 16-bit matrix math its matrix ops and attention (half_math.py) and recurrent layers
(half_rnn.py) computed in float32 while keeping the 16-bit types; cuBLAS's determinism (determinism.py) and
cuDNN's benchmark searches (cudnn_search.py)."""
