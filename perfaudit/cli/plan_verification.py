"""`perfaudit verify SCRIPT --plan FILE`: the part of `verify` that checks a plan of `perfaudit plan -o`
(verify/plan_verify.py) instead of the fixes."""
from __future__ import annotations

import json

import typer

from .. import api
from ..errors import EXIT_FINDINGS, EXIT_OK, EXIT_SCRIPT_FAILED
from ..report import outputs
from .common import out, status


def verify_plan(script: str, args: list[str], plan_file: str, output: str | None, config: str | None,
                timeout: float, out_dir: str | None, warmup: int, steps: int, seed: int,
                rounds: tuple[int, int, float, float], quiet: bool) -> None:
    """`perfaudit verify SCRIPT --plan FILE` (called by `verify`): the plan's A/B rounds and peaks; exits 0 when
    it ran as predicted, 1 when not, 3 when the script as it is did not reach its window."""
    from ..report.plan_report import render_verification, verification_dict
    outputs.check_writable([output] if output else [], protected=(script, plan_file))
    settings = api.prepare(config, None, None, None)
    api.check_script(script)
    spec = api.read_plan(plan_file)
    options = api.run_options(settings, warmup, steps, timeout=timeout, out_dir=out_dir, for_rules=False)
    options.seed = seed
    least, most, max_time, tolerance = rounds
    plan_rounds = api.Rounds(min=least, max=max(most, least), max_time_s=max_time, tolerance_pct=tolerance)
    with status(f"verifying the plan on {script} …", quiet) as line:
        result = api.verify_plan(script, args, spec, options, plan_rounds,
                                 lambda text: line.update(f"verifying the plan on {script}: {text}"))
    render_verification(result, out)
    if output:
        outputs.write_text(output, json.dumps(verification_dict(result), indent=2))
    if result.timing.interrupted:
        raise typer.Exit(128 + result.timing.interrupted)
    if result.timing.baseline_failure:
        raise typer.Exit(EXIT_SCRIPT_FAILED)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_FINDINGS)
