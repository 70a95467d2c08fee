"""Static checks, registered like facts: one small function per check, keyed by the AST node type it
reads, reporting under the id of the rule whose runtime evidence would confirm it (bandit's
`@checks("Call")`). The walker (`perfaudit.static.walk`) keeps the scope a check needs to know."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hit:
    rule: str
    line: int
    message: str
    severity: str | None = None  # where the rule's own is too strong for what the source alone shows


@dataclass
class Scope:
    """Where the walker stands: inside a loop, a training step, a logging branch."""
    loops: int = 0
    steps: list[bool] = field(default_factory=lambda: [False])  # innermost loop/function: one training step?
    logging: int = 0                       # inside `if step % N == 0:` branches
    host_vars: set[str] = field(default_factory=set)  # names bound to tensors created on the host
    dicts: dict[str, dict | None] = field(default_factory=dict)  # names bound to dicts spelled out (None: unknown)

    @property
    def in_step(self) -> bool:
        """Code that runs every training step (not in a logging branch)."""
        return self.steps[-1] and not self.logging


Check = Callable[[ast.AST, Scope], Iterable[Hit]]


@dataclass(frozen=True)
class CheckSpec:
    rule: str
    node: type
    fn: Check


CHECKS: dict[type, list[CheckSpec]] = {}


def check(rule: str, node: type):
    """Register `fn(node, scope) -> hits` for every `node` of that type the walker meets."""
    def register(fn: Check) -> Check:
        CHECKS.setdefault(node, []).append(CheckSpec(rule, node, fn))
        return fn
    return register


def hit(rule: str, node: ast.stmt | ast.expr, message: str) -> Hit:
    return Hit(rule, node.lineno, message)
