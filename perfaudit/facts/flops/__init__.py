"""FLOPs and MFU: the model's FLOPs per step, where they and the time go, the utilisation of the peak."""
