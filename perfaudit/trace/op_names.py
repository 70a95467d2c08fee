"""Names of the aten ops whose recorded arguments the facts read (the parser keeps those, drops the rest)."""
from __future__ import annotations

MM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
ATTENTION_OPS = frozenset({"aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                           "aten::_scaled_dot_product_cudnn_attention",
                           "aten::_scaled_dot_product_flash_attention_for_cpu"})
ATTENTION_BACKWARD_OPS = frozenset(f"{name}_backward" for name in ATTENTION_OPS)
# recurrent layers: their flags too (layers, directions, batch_first), and the sequence number their backward shares
RNN_OPS = ("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu")
RNN_BACKWARD_OPS = frozenset({"aten::_cudnn_rnn_backward", "aten::mkldnn_rnn_layer_backward"})
# the profiler's range around each DataLoader fetch (torch names it after the loader's iterator)
DATALOADER = "enumerate(DataLoader)#"
# facts.flops counts their FLOPs
FLOP_OPS = MM_OPS | CONV_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS | frozenset(RNN_OPS) | RNN_BACKWARD_OPS

# input shapes compared across steps (facts.shapes) and FLOPs (facts.flops); a convolution's stride,
# padding and dilation too
_SHAPED = ("aten::cudnn_convolution", "aten::_convolution", "aten::mkldnn_convolution", "aten::linear",
           "aten::matmul", "aten::embedding", *sorted(FLOP_OPS - CONV_OPS))
OP_ARGS: dict[str, tuple[str, ...]] = {**dict.fromkeys(_SHAPED, ("Input Dims", "Input type")),
                                       **dict.fromkeys(CONV_OPS, ("Input Dims", "Input type", "Concrete Inputs")),
                                       **dict.fromkeys(RNN_OPS, ("Input Dims", "Input type", "Concrete Inputs",
                                                                 "Sequence number"))}
# every other op's shapes and dtypes, kept only when asked (a projection from a CPU trace reads each op's bytes),
# and its sequence number (a recurrent layer's backward nodes are found by theirs: projection/rnn.py)
ANY_OP_ARGS: tuple[str, ...] = ("Input Dims", "Input type", "Sequence number")
