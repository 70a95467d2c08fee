"""Facts of the training loop's own machinery: how gradients are cleared, how the optimizer steps."""
