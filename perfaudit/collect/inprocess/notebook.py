"""A Jupyter notebook as the script `perfaudit run` runs: its code cells in order, written to one Python file
(no kernel: as `jupyter nbconvert --to script` would), IPython's line magics and shell escapes made no-ops
on their own lines so every other line keeps its place, and a map back from the file's lines to
(cell, line in the cell), so that findings point at `notebook.ipynb[cell 5]:3`. Cells are numbered as
Jupyter Lab and VS Code show them: every cell counts, markdown too, from 1."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import TypedDict

from ... import untrusted
from ...errors import UsageError

_MAGIC = re.compile(r"^(\s*)([%!].*)$")           # %matplotlib inline, !pip install …, %time x = f()
_ASSIGNED_MAGIC = re.compile(r"^(\s*)([\w.]+\s*=\s*[%!].*)$")  # files = !ls, t = %timeit -o f()
_KEEP_BODY = {"%%time", "%%timeit", "%%capture", "%%prun"}   # cell magics whose body is Python to run


@dataclass
class NotebookScript:
    notebook: str                       # the .ipynb (absolute)
    path: str                           # the Python file written
    lines: list[tuple[int, int]] = field(default_factory=list)  # file line - 1 -> (cell, line in cell)
    skipped: list[str] = field(default_factory=list)            # what was not run, for the report's notes

    def label(self, cell: int) -> str:
        return f"{self.notebook}[cell {cell}]"

    def place(self, line: int) -> tuple[str, int] | None:
        """The notebook place of a line of the written file (1-based), or None past its end."""
        if 1 <= line <= len(self.lines):
            cell, at = self.lines[line - 1]
            return self.label(cell), at
        return None


class _Cell(TypedDict, total=False):
    cell_type: str
    source: str | list[str]


class _Notebook(TypedDict):
    cells: list[_Cell]


def read_cells(notebook: str) -> list[_Cell]:
    """The notebook's cells, read as hostile (perfaudit.untrusted): a cell that is not an object, a source
    that is not text, metadata nested past any notebook's: one line saying where."""
    try:
        return untrusted.load(notebook, _Notebook, "a notebook in nbformat 4")["cells"]
    except FileNotFoundError:
        raise UsageError(f"cannot read {notebook}: no such file") from None


def check_notebook(notebook: str, compile_or_fail) -> str:
    """A notebook `perfaudit run` can run: readable, nbformat 4, and its code cells compile (a syntax
    error named as notebook.ipynb[cell N]:line)."""
    text, converted = convert(notebook, notebook)
    compile_or_fail(text.encode(), notebook, lambda line: "{}:{}".format(*(converted.place(line) or (notebook, line))))
    return converted.notebook


def _source(cell: _Cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def convert(notebook: str, path: str) -> tuple[str, NotebookScript]:
    """The notebook's code cells as the text of one script (to be written at `path`) and the map back."""
    out = NotebookScript(os.path.abspath(notebook), path)
    text: list[str] = []
    for number, cell in enumerate(read_cells(notebook), 1):
        if cell.get("cell_type") != "code":
            continue
        lines = _source(cell).splitlines()
        magic = lines[0].split()[0] if lines and lines[0].startswith("%%") else None
        if magic and magic not in _KEEP_BODY:  # %%bash, %%writefile, %%html …: not Python
            out.skipped.append(f"cell {number} ({magic}) not run: not Python")
            lines = ["pass  # " + line if i == 0 else "# " + line for i, line in enumerate(lines)]
        for at, line in enumerate(lines, 1):
            if magic and at == 1 and magic in _KEEP_BODY:
                line = "pass  # " + line
            elif (m := _MAGIC.match(line) or _ASSIGNED_MAGIC.match(line)) and not line.lstrip().startswith("#"):
                line = f"{m.group(1)}pass  # {m.group(2)}"
            text.append(line)
            out.lines.append((number, at))
        text.append("")  # cells stay apart, as nbconvert writes them
        out.lines.append((number, len(lines) + 1))
    return "\n".join(text) + "\n", out


def write_script(notebook: str, folder: str) -> NotebookScript:
    """Write the notebook's code cells to FOLDER/<name>.py and return the map back to the cells."""
    name = os.path.splitext(os.path.basename(notebook))[0] + ".py"
    text, out = convert(notebook, os.path.join(folder, name))
    os.makedirs(folder, exist_ok=True)
    with open(out.path, "w", encoding="utf-8") as f:
        f.write(text)
    return out


def _replace_paths(text: str, script: NotebookScript) -> str:
    def put(m: re.Match) -> str:
        place = script.place(int(m.group(1)))
        return f"{place[0]}:{place[1]}" if place else m.group(0)
    forms = {script.path, os.path.relpath(script.path)}  # messages may name it relative to the working folder
    return re.sub("(?:" + "|".join(map(re.escape, sorted(forms, key=len, reverse=True))) + r"):(\d+)", put, text)


def relocate(findings: list, script: NotebookScript) -> list:
    """The findings with their places in the written file put back in the notebook's cells."""
    out = []
    for f in findings:
        locations = []
        for loc in f.locations:
            place = script.place(loc.line) if os.path.abspath(loc.path) == script.path else None
            locations.append(replace(loc, path=place[0], line=place[1]) if place else loc)
        out.append(replace(f, locations=tuple(locations), message=_replace_paths(f.message, script),
                           notes=tuple(_replace_paths(n, script) for n in f.notes)))
    return out
