"""Decide where one training step ends, from what the script does, without touching its code.

Steps are optimizer steps whenever any optimizer steps: one step is one pass over every optimizer the
script uses in an iteration (a GAN's two optimizers count once), whichever optimizer it is, including
one built later (a fine-tuning phase after a short pre-training: the window starts again with it).
Only when no optimizer is ever built do weaker markers count: each `backward()`, else each DataLoader
batch, else each call of a top-level module under `no_grad` (inference). Built but never stepped (a
hand-written update), an optimizer lets `backward()` count after a while.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable

OPTIMIZER, BACKWARD, BATCH, FORWARD = "optimizer", "backward", "dataloader", "inference"
CLOSURE = "closure"   # an optimizer that takes a closure (LBFGS) evaluates it several times a step
_RANK = {CLOSURE: 0, OPTIMIZER: 0, BACKWARD: 1, BATCH: 2, FORWARD: 3}
# backward() calls without any optimizer step after which an optimizer that was built is taken as
# unused (the script updates the weights by hand)
UNUSED_OPTIMIZER_BACKWARDS = 20


class StepDetector:
    def __init__(self, on_boundary: Callable[[], None], on_restart: Callable[[str], None] = lambda why: None):
        self._on_boundary = on_boundary
        self._on_restart = on_restart    # steps counted so far belong to another phase: start the window again
        self.source: str | None = None
        self.optimizers_built = 0
        self._seen = dict.fromkeys(_RANK, 0)
        self._order: list[Hashable] = []  # optimizers in the order they step in one iteration
        self._order_known = False

    # -- what the probes report ------------------------------------------------------------------
    def optimizer_built(self) -> None:
        self.optimizers_built += 1

    def closure_step(self) -> None:
        """A backward ran inside optimizer.step(closure) (LBFGS, Lightning's automatic optimization): from now
        on a step is one closure call (one backward), since one optimizer step may run the whole training."""
        if self.source != CLOSURE:
            weaker = self.source
            self.source = CLOSURE
            if weaker is not None:
                self._on_restart("the optimizer takes a closure: a step is one closure call")

    def optimizer_stepped(self, key: Hashable) -> None:
        """`key` names the optimizer's role (class and parameters), so that a script that rebuilds its
        optimizer every epoch keeps one order."""
        if self.source == CLOSURE:
            return
        self._seen[OPTIMIZER] += 1
        if self.source != OPTIMIZER:
            weaker = self.source
            self.source, self._order, self._order_known = OPTIMIZER, [key], False
            if weaker is not None:
                self._on_restart(f"optimizer steps replace {weaker} steps")
            self._on_boundary()
            return
        if key not in self._order:
            if self._order_known:  # a new optimizer after the iteration was learned: a new phase
                self._order, self._order_known = [key], False
                self._on_restart("another optimizer started stepping")
                self._on_boundary()
                return
            self._order.append(key)
            self._on_restart("a second optimizer steps in the same iteration")
        elif not self._order_known:
            self._order_known = True   # an optimizer repeats: the iteration's order is known
        if key == self._order[-1]:
            self._on_boundary()

    def backward_done(self) -> None:
        if self.source == CLOSURE:
            self._on_boundary()
            return
        self._weak(BACKWARD)

    def batch_fetched(self) -> None:
        self._weak(BATCH)

    def inference_call(self) -> None:
        """A top-level module called with gradients off."""
        self._weak(FORWARD)

    # -- weaker markers ------------------------------------------------------------------------------
    @property
    def wants_inference_calls(self) -> bool:
        return not self.optimizers_built and not self._seen[BACKWARD] and not self._seen[OPTIMIZER]

    def _allowed(self, source: str) -> bool:
        if self._seen[OPTIMIZER]:
            return False
        if self.optimizers_built:  # training will step an optimizer, unless it never does
            return source == BACKWARD and self._seen[BACKWARD] >= UNUSED_OPTIMIZER_BACKWARDS
        return not any(self._seen[s] for s, rank in _RANK.items() if rank < _RANK[source])

    def _weak(self, source: str) -> None:
        self._seen[source] += 1
        if not self._allowed(source):
            return
        if self.source != source:
            if self._seen[source] < 2 and not self.optimizers_built:
                return  # wait: a stronger marker may still come in the first iteration
            weaker = self.source
            self.source = source
            if weaker is not None:
                self._on_restart(f"{source} steps replace {weaker} steps")
        self._on_boundary()
