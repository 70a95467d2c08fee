"""The emulated CUDA device (`--device emulate-cuda`): the CUDA API served without a GPU, where the
script puts its tensors and what that costs, the memory a GPU would hold, and whose fault a failure is."""
