"""Decide where one training step ends, from what the script does, without touching its code.

Sources, best first: optimizer steps (one step is one pass over every optimizer the script uses,
so two optimizers stepping per iteration count once), then `backward()` calls, then DataLoader
batches. A weaker source is used only while no stronger one has been seen.
"""
from __future__ import annotations

from collections.abc import Callable

OPTIMIZER, BACKWARD, BATCH = "optimizer", "backward", "dataloader"
_RANK = {OPTIMIZER: 0, BACKWARD: 1, BATCH: 2}


class StepDetector:
    def __init__(self, on_boundary: Callable[[], None], on_relearn: Callable[[], None] = lambda: None):
        self._on_boundary = on_boundary
        self._on_relearn = on_relearn
        self.source: str | None = None
        self._seen: dict[str, int] = {OPTIMIZER: 0, BACKWARD: 0, BATCH: 0}
        self._order: list[int] = []     # optimizers in the order they step in one iteration
        self._order_known = False

    def _use(self, source: str) -> bool:
        """Whether `source` marks steps now; a stronger source takes over once seen."""
        self._seen[source] += 1
        stronger = [s for s, n in self._seen.items() if n and _RANK[s] < _RANK[source]]
        if stronger:
            return False
        if self.source is None or _RANK[source] < _RANK[self.source]:
            if source != OPTIMIZER and self._seen[source] < 2:
                return False  # wait: a stronger marker may still come in the first iteration
            self.source = source
        return self.source == source

    def optimizer_stepped(self, optimizer_id: int) -> None:
        if not self._use(OPTIMIZER):
            return
        if not self._order_known:
            if optimizer_id in self._order:
                self._order_known = True  # an optimizer repeats: the iteration's order is known
            else:
                self._order.append(optimizer_id)
                if len(self._order) > 1:
                    self._on_relearn()
        if optimizer_id == self._order[-1]:
            self._on_boundary()

    def backward_done(self) -> None:
        if self._use(BACKWARD):
            self._on_boundary()

    def batch_fetched(self) -> None:
        if self._use(BATCH):
            self._on_boundary()
