"""CUDA graphs replay what eager code computes (run with --full on the emulated device): a whole step captured
with a capturable Adam against an eager twin, make_graphed_callables against eager twins, and a read of a device
value inside a capture refused as a GPU refuses it. Exits non-zero (an AssertionError) on any difference."""
import copy

import torch
from torch import nn


def whole_step():
    torch.manual_seed(0)
    device = "cuda"
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(0.0), nn.Linear(32, 4)).to(device)
    twin = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)
    opt_twin = torch.optim.Adam(twin.parameters(), lr=1e-2)
    static_x = torch.zeros(8, 16, device=device)
    static_y = torch.zeros(8, dtype=torch.long, device=device)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(30)]

    def step(m, o, x, y):
        o.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        return loss

    for x, y in data[:3]:  # warm-up, eagerly, both
        static_x.copy_(x)
        static_y.copy_(y)
        step(model, opt, static_x, static_y)
        step(twin, opt_twin, x.to(device), y.to(device))
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        assert torch.cuda.is_current_stream_capturing()
        static_loss = nn.functional.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    assert not torch.cuda.is_current_stream_capturing()
    step(twin, opt_twin, data[2][0].to(device), data[2][1].to(device))  # the capture's own step, on data[2]
    worst = 0.0
    for x, y in data[3:]:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        eager = step(twin, opt_twin, x.to(device), y.to(device))
        worst = max(worst, abs(static_loss.item() - eager.item()))
    params = max((a - b).abs().max().item() for a, b in zip(model.parameters(), twin.parameters()))
    print("whole step: worst loss difference", worst, "parameters", params)
    assert worst < 1e-4 and params < 1e-4, (worst, params)
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            model(static_x).sum().item()
    except RuntimeError as exc:
        print("a read in a capture:", exc)
        assert "operation not permitted when stream is capturing" in str(exc)
    else:
        raise AssertionError("a read in a capture was not refused")


def graphed_callables():
    torch.manual_seed(0)
    device = "cuda"
    first, second = nn.Linear(16, 32).to(device), nn.Linear(32, 4).to(device)
    twins = copy.deepcopy(first), copy.deepcopy(second)
    params = [*first.parameters(), *second.parameters()]
    twin_params = [*twins[0].parameters(), *twins[1].parameters()]
    opt, opt_twin = torch.optim.SGD(params, lr=0.1), torch.optim.SGD(twin_params, lr=0.1)
    x = torch.randn(8, 16, device=device)
    h = torch.randn(8, 32, device=device, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables((first, second), ((x,), (h,)))
    worst = 0.0
    for _ in range(20):
        data, target = torch.randn(8, 16, device=device), torch.randint(0, 4, (8,), device=device)
        losses = []
        for (m1, m2), o in ((graphed, opt), (twins, opt_twin)):
            o.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(m2(torch.relu(m1(data))), target)
            loss.backward()
            o.step()
            losses.append(loss.item())
        worst = max(worst, abs(losses[0] - losses[1]))
    diff = max((a - b).abs().max().item() for a, b in zip(params, twin_params))
    print("graphed callables: worst loss difference", worst, "parameters", diff)
    assert worst < 1e-4 and diff < 1e-4, (worst, diff)


whole_step()
graphed_callables()
print("cuda graphs: all match")
