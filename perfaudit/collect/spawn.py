"""torch.multiprocessing.spawn / start_processes, the DDP tutorials' launcher
(`mp.spawn(train, args=(world_size,), nprocs=torch.cuda.device_count())`). Its processes are fresh interpreters
that perfaudit does not watch. With one process and `join=True` (one GPU, or the emulated device), the function
runs here as rank 0, as that process would have run it, so the run measures it; with more, the run stops at once
and says so (the report tells how to launch one rank)."""
from __future__ import annotations

import functools
import inspect
import os

from .userframes import user_site
from .wrap import patch


def guard_spawn(module, name: str, inline: list, on_spawn) -> None:
    """Wrap `module.name`: one joined process runs in this process (noted in `inline`: api and site), any other
    call goes to `on_spawn(api)` first."""
    original = getattr(module, name)
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    api = f"torch.multiprocessing.{name}"
    pid = os.getpid()

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        one = _one_joined_process(signature, args, kwargs) if os.getpid() == pid else None
        if one is None:
            on_spawn(api)
            return original(*args, **kwargs)
        fn, fn_args = one
        inline.append({"api": api, "site": user_site(2)})
        fn(0, *fn_args)
        return None  # what spawn(join=True) returns

    patch(module, name, wrapper)


def _one_joined_process(signature, args, kwargs):
    """(fn, its args) when the call starts one process and waits for it, else None."""
    if signature is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    given = bound.arguments
    fn, fn_args = given.get("fn"), given.get("args", ())
    if not callable(fn) or given.get("nprocs") != 1 or given.get("join") is not True:
        return None
    return fn, tuple(fn_args) if isinstance(fn_args, (tuple, list)) else (fn_args,)
