"""Graph classification with a GCN-style network on random graphs, batched by hand the way PyG collates
(node features concatenated, edge indices offset, a `batch` vector of graph ids), the dataset made once before
training; pooling from a helper module that reads the graph count back each step (`int(batch.max())`), the
loss and accuracy summed with .item() every step."""
import random

import torch
from common.graph_ops import global_mean_pool, scatter_sum
from torch import nn


def random_graph(rng):
    n = rng.randint(10, 30)
    edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(3 * n)]
    x = torch.randn(n, 16)
    y = int(sum(a < b for a, b in edges) > len(edges) / 2)
    return x, torch.tensor(edges).t(), y


def make_batch(graphs):
    xs, eis, ys, batch = [], [], [], []
    offset = 0
    for i, (x, ei, y) in enumerate(graphs):
        xs.append(x)
        eis.append(ei + offset)
        ys.append(y)
        batch.append(torch.full((x.size(0),), i, dtype=torch.long))
        offset += x.size(0)
    return torch.cat(xs), torch.cat(eis, 1), torch.tensor(ys), torch.cat(batch)


class GraphConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.lin = nn.Linear(cin, cout)
        self.root = nn.Linear(cin, cout, bias=False)

    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = scatter_sum(x[src], dst, x.size(0))
        return self.lin(agg) + self.root(x)


class Net(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.convs = nn.ModuleList([GraphConv(16, hidden), GraphConv(hidden, hidden), GraphConv(hidden, hidden)])
        self.out = nn.Linear(hidden, 2)

    def forward(self, x, edge_index, batch):
        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
        return self.out(global_mean_pool(x, batch))


def main():
    rng = random.Random(0)
    data = [random_graph(rng) for _ in range(512)]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        rng.shuffle(data)
        total, correct = 0.0, 0
        for i in range(0, len(data), 32):
            x, ei, y, batch = (t.to(device) for t in make_batch(data[i:i + 32]))  # expect-run: COPY002
            logits = model(x, ei, batch)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * y.size(0)  # expect: SYNC001
            correct += (logits.argmax(-1) == y).sum().item()  # expect: SYNC001
        print(f"epoch {epoch} loss {total / len(data):.4f} acc {correct / len(data):.3f}")


if __name__ == "__main__":
    main()
