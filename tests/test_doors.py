"""Every door into perfaudit checks the options the CLI checks, in one place (usecases/settings.py): the
framework callbacks refuse a bad option when they are built, not steps into the training; and a callback
inside the user's own `torch.profiler.profile()` stands aside and says so, leaving the user's trace whole."""
from __future__ import annotations

import pytest
import torch

from perfaudit import api
from perfaudit.errors import UsageError


@pytest.mark.parametrize("options,word", [
    ({"fail_on": "bogus"}, "fail_on"), ({"steps": 0}, "steps"), ({"warmup": -1}, "warmup"),
    ({"steps": "5"}, "steps"), ({"out_dir": 7}, "out_dir"), ({"action": "explode"}, "action"),
])
def test_a_bad_option_is_refused_when_the_audit_is_built(options, word):
    with pytest.raises(UsageError, match=word):
        api.WindowAudit(None, **options)


def test_the_lightning_callback_refuses_a_bad_fail_on_at_construction():
    pytest.importorskip("lightning", reason="Lightning is installed with .[test]")
    from perfaudit.integrations.lightning import PerfauditCallback
    with pytest.raises(UsageError, match="fail_on: expected one of info, warning, error, never, not 'bogus'"):
        PerfauditCallback(fail_on="bogus")


def test_an_audit_inside_the_users_own_profiler_stands_aside_and_leaves_its_trace():
    model = torch.nn.Linear(16, 16)
    audit = api.WindowAudit(None, steps=2, warmup=1)
    with torch.profiler.profile() as prof:
        assert audit.start() is False
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
    assert "torch profiler is already recording" in (audit.standing_aside or "")
    assert any(e.key == "aten::addmm" for e in prof.key_averages()), "the user's trace lost its events"
    assert audit.session is None and audit.end() is None
