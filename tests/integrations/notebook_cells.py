"""Drive a notebook's cells through IPython as Jupyter would (`%load_ext perfaudit`, then `%%perfaudit`
on the training cell), and print what the cells left: the magic's report folder and the training's
progress. The cells are also written as one plain script, for `perfaudit run` to compare with."""
import json
import sys

from IPython.core.interactiveshell import InteractiveShell

SETUP = '''import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
'''
TRAIN = '''history = []
for epoch in range(3):
    for step, (x, y) in enumerate(loader):
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        history.append(loss.item())
print(f"trained {len(history)} steps")
'''

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "script":
        with open("train.py", "w") as f:
            f.write(SETUP + TRAIN)
        sys.exit(0)
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext perfaudit", store_history=True)
    shell.run_cell(SETUP, store_history=True)
    magic = "%%perfaudit --steps 3 --warmup 1" + (" --fail-on warning" if mode == "fail" else "")
    result = shell.run_cell(magic + "\n" + TRAIN, store_history=True)
    error = result.error_in_exec
    print(json.dumps({"steps_trained": len(shell.user_ns.get("history", [])),
                      "error": type(error).__name__ if error else None,
                      "cell": shell.execution_count - 1}))
