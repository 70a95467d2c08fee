"""Sites: places in the user's code with the evidence measured there, aggregated over steps."""
from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..source import CallSite
from .registry import Context

_OWN_FRAMES = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Site:
    path: str | None          # None when the trace has no stacks: `detail` names the op instead
    line: int | None
    func: str | None
    code: str
    detail: str               # what happened there: ".item()", "aten::nonzero", "pageable HtoD copy"
    exact: bool = True        # False when only the enclosing function is known
    count: int = 0            # occurrences in the measured steps
    ms: float = 0.0           # time measured for them (host wait, copy or kernel time)
    steps_seen: set = field(default_factory=set)
    extra: dict = field(default_factory=dict)
    # the steps its evidence was counted over when not the measured ones: those recorded with Python stacks,
    # when the trace budget kept them for the first step only (Context.site_steps)
    over_steps: int | None = None

    def per_step(self, n_steps: int) -> dict:
        n = self.over_steps or n_steps
        return {"count_per_step": self.count / n, "ms_per_step": self.ms / n, "step_share": len(self.steps_seen) / n}


def site_from_probe(ctx: Context, where: dict | None, detail: str, **extra) -> Site:
    """A Site at the user line a live-process probe recorded ({path, line, func})."""
    where = where or {}
    path = ctx.source.display_path(where["path"]) if where.get("path") else None
    code = ctx.source.line_text(where["path"], where["line"]) if path and where.get("line") else ""
    return Site(path, where.get("line"), where.get("func"), code, detail, extra=extra)


class SiteCollector:
    """Groups evidence events by the user line they come from."""

    def __init__(self, ctx: Context, fallback_calls: Collection[str] = frozenset(), forms: tuple[str, ...] = (),
                 seen_lines: dict[tuple[str, str, str], list[int]] | None = None):
        self.ctx = ctx
        self.fallback = set(fallback_calls)
        self.forms = forms
        # (display path, function, detail) -> the lines where the run itself saw what an op of that detail without
        # a Python call of its own came from (the emulated device's `if tensor:` reads): before any source search
        self.seen_lines = seen_lines or {}
        self.sites: dict[tuple, Site] = {}

    def add_all(self, items: list[tuple], hints: dict[str, tuple[Collection[str], tuple]] | None = None,
                attributions: dict | None = None) -> None:
        """items: (anchor event to attribute, event that is counted, ms, detail). `hints` maps a
        detail to the (fallback calls, forms) to search when the op has no Python call of its own;
        `attributions` are the anchors' frames when the caller has them already."""
        if attributions is None:
            attributions = self.ctx.frames.attribute_all([item[0] for item in items]) if self.ctx.frames else {}
        located: dict[tuple, tuple] = {}  # one search of the source per call site, not per op it made
        own = self._own_frames(attributions)
        for anchor, counted, ms, detail in items:
            step = self.ctx.site_step_of(counted.ts)
            if step is None:  # not a measured step, or one without a line to give it: see Site.over_steps
                continue
            att = attributions.get(id(anchor))
            if att is None:
                key: tuple[str | None, Any] = (None, detail)
                site = self.sites.get(key) or Site(None, None, None, "", detail, exact=False)
            else:
                f = att.frame
                where = (f.path, f.line, f.func, att.via, att.via_path, detail)
                if where not in located:
                    fallback, forms = (hints or {}).get(detail, (self.fallback, self.forms))
                    seen = self.seen_lines.get((self.ctx.source.display_path(f.path), f.func, detail)) \
                        if att.via is None else None
                    calls, exact = ([CallSite(n, f.func, self.ctx.source.line_text(f.path, n)) for n in seen], True) \
                        if seen else self.ctx.source.locate(f.path, f.line, f.func, att.via, fallback, forms,
                                                            att.via_path)
                    theirs = own.get(f.path, set()) if f.func not in _OWN_FRAMES else set()
                    mine = [c for c in calls if c.line not in theirs]
                    located[where] = (mine or calls, exact)
                calls, exact = located[where]
                path = self.ctx.source.display_path(f.path)
                key = (path, tuple(c.line for c in calls))
                site = self.sites.get(key) or Site(path, calls[0].line, f.func, calls[0].code,
                                                   detail, exact, extra={"lines": list(dict.fromkeys(c.line for c in calls)),
                                                                         "calls": calls})
            site.count += 1
            site.ms += ms
            site.steps_seen.add(step)
            self.sites[key] = site

    def _own_frames(self, attributions: dict) -> dict[str, set[int]]:
        """Per file, the lines of the comprehensions and generator expressions that ran as frames of their own
        (before Python 3.12 a comprehension is one; a generator expression always is): a call there is theirs,
        not the enclosing function's."""
        starts: dict[str, set[int]] = {}
        for att in attributions.values():
            if att is not None and att.frame.func in _OWN_FRAMES:
                starts.setdefault(att.frame.path, set()).add(att.frame.line)
        spans: dict[str, set[int]] = {}
        for path, lines in starts.items():
            tree = self.ctx.source.tree(path)
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, _COMPREHENSIONS) and node.lineno in lines:
                    spans.setdefault(path, set()).update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        return spans

    def result(self) -> list[Site]:
        return stacked_only(self.ctx, sorted(self.sites.values(), key=lambda s: (-s.ms, -s.count)))


def stacked_only(ctx: Context, sites: list[Site]) -> list[Site]:
    """Sites counted over the steps recorded with Python stacks alone say so (their figures per step are
    over those steps), when the trace has steps without."""
    if ctx.site_steps is not ctx.steps:
        for site in sites:
            site.over_steps = len(ctx.site_steps)
    return sites
