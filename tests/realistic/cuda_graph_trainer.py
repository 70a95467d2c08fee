"""A whole training step captured as a CUDA graph, as the PyTorch docs and MLPerf-style code do: a warm-up on a
side stream, static input buffers, a capturable Adam, the forward, backward and update captured once and
replayed for every batch; eager on a machine without a GPU. Until the emulated device served CUDA graphs, the
capture failed there and only the CPU branch was audited; the window also needs the replays to count as steps
(no optimizer.step() runs after the capture)."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self, d_in: int = 64, hidden: int = 256, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class GraphedTrainer:
    def __init__(self, model, batch_size: int, device: torch.device, use_graphs: bool):
        self.model, self.device = model.to(device), device
        self.use_graphs = use_graphs and device.type == "cuda"
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, capturable=self.use_graphs)
        self.loss_fn = nn.CrossEntropyLoss()
        self.static_x = torch.zeros(batch_size, 64, device=device)
        self.static_y = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.graph = None

    def _step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(self.static_x), self.static_y)
        loss.backward()
        self.opt.step()
        return loss

    def capture(self, warmup_batches):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for x, y in warmup_batches:
                self.static_x.copy_(x)
                self.static_y.copy_(y)
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.loss_fn(self.model(self.static_x), self.static_y)
            self.static_loss.backward()
            self.opt.step()

    def train_step(self, x, y):
        self.static_x.copy_(x, non_blocking=True)
        self.static_y.copy_(y, non_blocking=True)
        if self.graph is not None:
            self.graph.replay()
            return self.static_loss
        return self._step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--no-graphs", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True,  # expect: DATA001
                        pin_memory=device.type == "cuda")
    trainer = GraphedTrainer(MLP(), args.batch_size, device, use_graphs=not args.no_graphs)
    if trainer.use_graphs:
        it = iter(loader)
        trainer.capture([next(it) for _ in range(3)])
    step, t0 = 0, time.time()
    while step < args.steps:
        for x, y in loader:
            loss = trainer.train_step(x, y)
            step += 1
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.4f} {time.time() - t0:.1f}s")  # ok: SYNC001
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
