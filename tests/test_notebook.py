"""`perfaudit run notebook.ipynb`: the code cells run in order as one script from the notebook's folder (its
imports of local modules work), magics and shell escapes skipped, and the findings are those of the same
code as a plain script, at the same lines, given as `notebook.ipynb[cell N]:line`."""
from __future__ import annotations

import json

from conftest import perfaudit

HELPERS = '''import torch


def make_data(n):
    torch.manual_seed(0)
    x = torch.randn(n, 32)
    return x, x[:, :4].argmax(1)
'''
SETUP = '''device = "cuda" if torch.cuda.is_available() else "cpu"
X, y = make_data(2048)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
'''
TRAIN = '''losses = []
for epoch in range(3):
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
print(sum(losses[-10:]) / 10)
'''


def _code(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": source.splitlines(True)}


def _notebook(folder, cells) -> None:
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "train.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                    "nbformat_minor": 5}, indent=1))


def _run(folder, target):
    out = folder / f"{target}.report.json"
    proc = perfaudit("run", target, "--warmup", "2", "--steps", "3", "--out-dir", str(folder / f"run-{target}"),
                     "-f", f"json={out}", cwd=folder)
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_a_notebook_gives_the_findings_of_the_same_code_as_a_script_at_its_cells_lines(tmp_path):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# A small classifier\n"]},
             _code("%matplotlib inline\nimport torch\nfrom torch import nn\nfrom helpers import make_data\n!echo hi"),
             _code(SETUP), {"cell_type": "markdown", "metadata": {}, "source": ["## Train\n"]},
             _code("%%time\n" + TRAIN), _code("%%bash\necho done")]
    _notebook(tmp_path, cells)
    (tmp_path / "train.py").write_text("import torch\nfrom torch import nn\nfrom helpers import make_data\n\n"
                                       + SETUP + "\n" + TRAIN)
    nb_proc, nb = _run(tmp_path, "train.ipynb")
    py_proc, py = _run(tmp_path, "train.py")
    assert nb is not None and py is not None, nb_proc.stderr + py_proc.stderr
    assert nb_proc.returncode == py_proc.returncode == 0, nb_proc.stdout + nb_proc.stderr
    # the findings at a line: a finding on the whole step (UTIL001) has no cell to map, and whether its ratio of
    # two measured times clears the threshold in two separate runs is the projection's to test, not this
    by_rule = {f["rule"]: f["location"] for f in py["findings"] if f["location"]}
    assert {"SYNC001", "COPY001", "DATA001"} <= set(by_rule)
    assert {f["rule"] for f in nb["findings"] if f["location"]} == set(by_rule)
    script_lines = (tmp_path / "train.py").read_text().splitlines()
    sources = {n: cell["source"] for n, cell in enumerate(cells, 1)}
    for f in nb["findings"]:
        where = f["location"]
        if where is None:
            assert f["rule"] not in by_rule, f["rule"]
            continue
        assert where["path"].startswith(str(tmp_path / "train.ipynb") + "[cell ")
        cell = int(where["path"].rsplit("[cell ", 1)[1].rstrip("]"))
        nb_line = sources[cell][where["line"] - 1].strip()
        assert nb_line == script_lines[by_rule[f["rule"]]["line"] - 1].strip(), f["rule"]
    assert "train.ipynb[cell 5]:10" in nb_proc.stdout  # losses.append(loss.item()): cell 5, line 10
    assert "cell 6 (%%bash) not run: not Python" in nb["notes"]
    assert (tmp_path / "run-train.ipynb" / "notebook.py").exists()


def test_a_syntax_error_in_a_cell_is_named_by_cell_and_line_and_a_non_notebook_is_refused(tmp_path):
    _notebook(tmp_path, [_code("import torch"), _code("x = 1\nfor i in range(3)\n    x += i")])
    proc = perfaudit("run", "train.ipynb", cwd=tmp_path)
    assert proc.returncode == 2 and "syntax error in " in proc.stderr and "train.ipynb[cell 2]:2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "other.ipynb").write_text('{"not": "a notebook"}')
    proc = perfaudit("run", "other.ipynb", cwd=tmp_path)
    assert proc.returncode == 2 and "not a notebook" in proc.stderr and "Traceback" not in proc.stderr
