"""A recurrent layer projected as a GPU runs it (perfaudit/projection/rnn.py): one cuDNN call per layer and
direction, whose time follows the recurrence (a small GEMM and the gates' kernel per time step), not the CPU's
loop of small ops a CPU trace records (a bidirectional GRU's forward and backward: thousands of ops a step,
each projected as a kernel launch until then). The shapes are those real runs recorded."""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_trace_json
from perfaudit.api import analyze
from perfaudit.projection import devices
from perfaudit.projection.kernels import kernel_us
from perfaudit.projection.rnn import RnnShape, rnn_shape, rnn_us
from perfaudit.projection.work import op_flops
from perfaudit.trace.model import Event

# nn.LSTM(2, 64, num_layers=2, batch_first=True) on a [128, 48, 2] batch (a forecasting script's)
LSTM = {"Input Dims": [[128, 48, 2], [[2, 128, 64], [2, 128, 64]], [[256, 2], [256, 64], [256], [256], [256, 64],
                                                                    [256, 64], [256], [256]], [], [], [], [], [], []],
        "Input type": ["float", "TensorList", "TensorList", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", "", "True", "2", "0.1", "True", "False", "True"]}
# nn.GRU(128, 128, bidirectional=True) on a packed batch of 64 sequences, 21 steps at most (a seq2seq tutorial's batch)
GRU_PACKED = {"Input Dims": [[886, 128], [21], [2, 64, 128], [[384, 128], [384, 128], [384], [384], [384, 128],
                                                              [384, 128], [384], [384]], [], [], [], [], []],
              "Input type": ["float", "long int", "float", "TensorList", "Scalar", "Scalar", "Scalar", "Scalar",
                             "Scalar"],
              "Concrete Inputs": ["", "", "", "", "True", "1", "0.", "True", "True"]}


def _op(name: str, args: dict) -> Event:
    return Event("op", name, 0.0, 1.0, 1, 1, args)


def _model(work):
    return kernel_us(work, devices.target("H100 SXM"))


def test_a_recurrent_layers_shape_is_read_from_its_padded_and_packed_forms():
    assert rnn_shape(_op("aten::lstm", LSTM)) == RnnShape(steps=48, tokens=128 * 48, batch=128, features=2,
                                                          hidden=64, gates=4, layers=2, directions=1, state=64)
    assert rnn_shape(_op("aten::gru", GRU_PACKED)) == RnnShape(steps=21, tokens=886, batch=64, features=128,
                                                               hidden=128, gates=3, layers=1, directions=2, state=128)
    assert rnn_shape(_op("aten::lstm", {})) is None and rnn_shape(_op("aten::addmm", LSTM)) is None


def test_a_layer_launches_a_kernel_pair_per_time_step_and_its_backward_costs_more():
    forward, kernels = rnn_us(_op("aten::lstm", LSTM), _model)
    assert kernels == 2 * (1 + 2 * 48)  # two layers: one GEMM over the sequence, then a GEMM and the gates a step
    backward, back_kernels = rnn_us(_op("aten::lstm_backward", LSTM), _model)
    assert back_kernels == 2 * (3 + 2 * 48) and backward > forward > 0
    longer = {**LSTM, "Input Dims": [[128, 96, 2], *LSTM["Input Dims"][1:]]}
    assert 1.8 < rnn_us(_op("aten::lstm", longer), _model)[0] / forward < 2.2  # the recurrence: twice the steps


_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.text(max_size=4),
                                st.floats(allow_nan=True)), lambda inner: st.lists(inner, max_size=5), max_leaves=25)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::gru_backward", "aten::_cudnn_rnn_backward",
                        "aten::mkldnn_rnn_layer_backward"]),
       st.fixed_dictionaries({}, optional={"Input Dims": _value, "Input type": _value, "Concrete Inputs": _value}),
       st.integers(0, 2))
def test_hostile_recorded_arguments_give_no_shape_or_a_finite_time(name, args, base):
    """A trace is the user's file: whatever a recurrent op's recorded arguments hold, the model answers None or
    a finite, non-negative time, and finite FLOPs (mixed with a real layer's, to reach past the first checks)."""
    real = [LSTM, GRU_PACKED, {}][base]
    op = _op(name, {**real, **args})
    rnn_shape(op)
    timed = rnn_us(op, _model)
    assert timed is None or (math.isfinite(timed[0]) and timed[0] >= 0 and timed[1] > 0)
    flops = op_flops(op)
    assert math.isfinite(flops) and flops >= 0


def test_a_gru_scripts_projection_launches_what_cudnn_would(realistic_reports):
    """seq2seq_packed.py's emulated run: its bidirectional GRU encoder is one `aten::gru` a step, whose CPU
    implementation records ~14,000 ops a step forward and backward. Projected, the step launches a fraction of
    them (each layer's cuDNN kernels; the encoder's backward nodes none of their own)."""
    path = f"{realistic_reports['seq2seq_packed.py']['run_dir']}/trace.json.gz"
    events = run_trace_json(path)["traceEvents"]
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    cpu_ops = sum(1 for e in events if e.get("cat") == "cpu_op" and str(e.get("name")).startswith("aten::")) / steps
    projection = analyze([path]).traces[0].projection
    assert projection["small_kernels"]["kernels_per_step"] < 0.1 * cpu_ops, (projection["small_kernels"], cpu_ops)


def test_a_recurrent_layers_flops_are_counted_live_forward_and_backward():
    """torch's FlopCounterMode counts no LSTM (a forecaster's report said 0.00 GFLOP a step): perfaudit's live
    count adds every time step's products with each weight matrix, and twice that backward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from perfaudit.collect.probes.flops import flop_formulas
    lstm = torch.nn.LSTM(2, 64, num_layers=2, batch_first=True)
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        out, _ = lstm(torch.randn(8, 12, 2))
        forward = counter.get_total_flops()
        out.sum().backward()
    weights = 4 * 64 * (2 + 64) + 4 * 64 * (64 + 64)   # w_ih and w_hh of both layers
    assert forward == 2 * 8 * 12 * weights and counter.get_total_flops() == 3 * forward


def test_a_traces_recurrent_ops_carry_the_flops_the_live_count_gives():
    """A trace recorded elsewhere has no live count: its LSTM's forward op, and the backward op cuDNN (on a GPU)
    or oneDNN (on a CPU) records, give the same FLOPs from their shapes (a forecaster's by-module row had its
    LSTM missing, its head "100 % of forward FLOPs")."""
    weights = 4 * 64 * (2 + 64) + 4 * 64 * (64 + 64)
    assert op_flops(_op("aten::lstm", LSTM)) == 2 * 128 * 48 * weights
    cudnn = {"Input Dims": [[48, 128, 2], [[256, 2], [256, 64], [256], [256], [256, 64], [256, 64], [256], [256]],
                            [], [], [2, 128, 64], [2, 128, 64]]}
    assert op_flops(_op("aten::_cudnn_rnn_backward", cudnn)) == 2 * op_flops(_op("aten::lstm", LSTM))
    layer = {"Input Dims": [[48, 128, 2], [256, 2], [256, 64], [256], [256], [128, 64], [128, 64]]}
    assert op_flops(_op("aten::mkldnn_rnn_layer_backward", layer)) == 4 * 128 * 48 * 4 * 64 * (2 + 64)


def test_an_lstm_with_a_projection_recurs_over_its_projected_state():
    """nn.LSTM(2, 64, proj_size=16): h is 16 wide, the recurrence multiplies it and the next layer reads it."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from perfaudit.collect.probes.flops import flop_formulas
    lstm = torch.nn.LSTM(2, 64, num_layers=2, batch_first=True, proj_size=16)
    params = [list(p.shape) for p in lstm._flat_weights]
    args = {**LSTM, "Input Dims": [[128, 48, 2], [[2, 128, 16], [2, 128, 64]], params, [], [], [], [], [], []]}
    shape = rnn_shape(_op("aten::lstm", args))
    assert (shape.hidden, shape.state) == (64, 16)
    with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
        lstm(torch.randn(128, 48, 2))
    assert op_flops(_op("aten::lstm", args)) == counter.get_total_flops()
