"""The convolution functions a TorchFunctionMode sees (nn.ConvNd's forward calls these) and a call's arguments
read by name: one reading for cuDNN's benchmark cache (cudnn_search.py), the 16-bit check (half_math.py) and the
gradients' formula (formula_grads.py)."""
from __future__ import annotations

import torch.nn.functional as F

# each one's spatial dimensions and whether it is transposed
CONVOLUTIONS = {F.conv1d: (1, False), F.conv2d: (2, False), F.conv3d: (3, False),
                F.conv_transpose1d: (1, True), F.conv_transpose2d: (2, True), F.conv_transpose3d: (3, True)}
# their parameters after input and weight, in order
PARAMETERS = {False: ("bias", "stride", "padding", "dilation", "groups"),
              True: ("bias", "stride", "padding", "output_padding", "groups", "dilation")}


def conv_options(after_weight: tuple, kwargs: dict, transposed: bool) -> dict:
    """The call's bias, stride, padding, dilation, groups (output_padding) by name, positional (the arguments
    after input and weight) or keyword."""
    return {**dict(zip(PARAMETERS[transposed], after_weight)), **kwargs}


def per_dim(value, dims: int, default: int) -> list[int]:
    """An int-or-sequence option (stride=2, padding=(1, 0)) as one int a spatial dimension; None is `default`."""
    if value is None:
        return [default] * dims
    if isinstance(value, int):
        return [value] * dims
    values = [int(v) for v in value]
    return values if len(values) == dims else [values[0]] * dims
