"""Small git histories of a tiny training script for `perfaudit bisect`: harmless commits around one that
makes every step slower (a host sync and host work: per-step logging of a weight's statistics). Used by
tests/test_bisect.py and benchmarks/bisect_bench.py."""
from __future__ import annotations

import random
import subprocess
from pathlib import Path

BASE = '''import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
data, target = torch.randn(256, 256), torch.randn(256, 1)
history = []
for step in range(100_000):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    # LOG
'''
# the regression: every step reads the loss and a weight's values on the host, and sorts their squares in
# Python (as long as reading them one by one took unprofiled, 15-19 ms a step for 10,000; under the profiler one
# read a value made a trace of 10,000 events a step, 26 s a run, where a comprehension is one event)
SLOW = ('history.append(loss.item())\n'
        '    weights = model[0].weight.detach().flatten()[:READS].tolist()  # per-step statistics\n'
        '    spread = sorted([w * w for w in weights * 10])')
HARMLESS = [
    ("a comment on the data", lambda s: s.replace("data, target", "# a fixed batch\ndata, target", 1)),
    ("a named constant", lambda s: s.replace("range(100_000)", "range(STEPS)", 1)
     .replace("history = []", "STEPS = 100_000\nhistory = []", 1)),
    ("a docstring", lambda s: '"""Train a small regressor."""\n' + s),
    ("import os", lambda s: s.replace("import torch\n", "import os\n\nimport torch\n", 1)),
    ("a seed constant", lambda s: s.replace("manual_seed(0)", "manual_seed(SEED)", 1)
     .replace("torch.manual_seed", "SEED = 0\ntorch.manual_seed", 1)),
    ("a comment on the loop", lambda s: s.replace("for step in", "# the training loop\nfor step in", 1)),
    ("a hidden size constant", lambda s: s.replace("nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1)",
                                                   "nn.Linear(256, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1)", 1)
     .replace("model =", "HIDDEN = 512\nmodel =", 1)),
    ("a comment on the optimizer", lambda s: s.replace("optimizer = ", "# plain SGD\noptimizer = ", 1)),
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_history(repo: Path, commits: int, culprit: int | None, seed: int = 0, reads: int = 3000) -> dict:
    """A repository whose first commit is good, then `commits` more; the one at index `culprit` (0-based
    among them; None: none) adds the slow logging (`reads` weight values read one by one per step).
    Returns {"good", "bad", "culprit" (sha or None)}."""
    rng = random.Random(seed)
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "test")
    text = BASE.replace("LR", "0.01")
    (repo / "train.py").write_text(text)
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "a small regressor")
    good = _git(repo, "rev-parse", "HEAD")
    found = None
    for i in range(commits):
        if i == culprit:
            text = text.replace("# LOG", SLOW.replace("READS", str(reads)), 1)
            message = "log the loss and weight statistics every step"
        else:
            message, edit = HARMLESS[rng.randrange(len(HARMLESS))]
            edited = edit(text)
            text = edited if edited != text else text + f"# note {i}\n"
        (repo / "train.py").write_text(text)
        _git(repo, "commit", "-q", "-am", message)
        if i == culprit:
            found = _git(repo, "rev-parse", "HEAD")
    return {"good": good, "bad": _git(repo, "rev-parse", "HEAD"), "culprit": found}
