"""`perfaudit mcp`: a Model Context Protocol server on stdio, so that a coding agent can audit training
scripts as a user does: `audit` (run a script), `analyze` (traces), `explain` (a rule), `fix` (the edits as
a diff, never written), `verify` (A/B runs of the fixes) and `plan` (the batch that fits, or the block to
checkpoint, each run before it is offered). Each returns the JSON a command writes with
`--format json` (findings with file:line, cost per step, fix) and the report as Markdown, which agents
read better than a console table. Thin over the library API, as the CLI is; the MCP SDK is an optional
extra (`pip install 'perfaudit[mcp]'`)."""
from __future__ import annotations

from typing import Any

from .errors import UsageError

MAX_TEXT = 4096  # characters in one argument (a path, a flag)
MAX_ARGS = 256   # items in one list argument (a script's command line, the traces)

INSTRUCTIONS = ("perfaudit audits PyTorch training performance. `audit` runs a training script for a short "
                "profiled window (a few steps) and returns ranked findings: what is slow, where (file:line), "
                "what it costs per step and the change to make. `fix` returns the mechanical edits as a unified "
                "diff (nothing is written); `verify` measures them (step time and loss, A/B runs); `plan` finds the "
                "largest batch that fits the GPU (or the block to checkpoint) by running it; `explain` documents a "
                "rule; `analyze` reads torch.profiler traces recorded elsewhere.")


def build_server():
    try:
        from mcp.server.fastmcp import FastMCP
    except ImportError:
        raise UsageError("perfaudit mcp needs the MCP SDK: pip install 'perfaudit[mcp]'") from None
    from . import api
    from .report.json_report import to_dict
    from .report.markdown import render as markdown

    server = FastMCP("perfaudit", instructions=INSTRUCTIONS)
    from . import __version__
    server._mcp_server.version = __version__  # the server's own version; FastMCP would report the SDK's

    def bounded(**values) -> None:
        """An agent's arguments, bounded before anything runs (a 64 MB string once cost 2.85 GB and came
        back whole in the error): each text a path or a flag, each list a command line. Each call is a
        command of its own: what an earlier call read is no input of this one (files.read_as_input)."""
        api.forget_inputs()
        for name, value in values.items():
            texts = value if isinstance(value, list) else [value]
            if isinstance(value, list) and len(value) > MAX_ARGS:
                raise UsageError(f"{name}: at most {MAX_ARGS} items, not {len(value)}")
            for text in texts:
                if isinstance(text, str) and len(text) > MAX_TEXT:
                    raise UsageError(f"{name}: at most {MAX_TEXT} characters, not {len(text)}")

    def report_result(report) -> dict[str, Any]:
        return {"report": to_dict(report), "markdown": markdown(report)}

    @server.tool()
    def audit(script: str, args: list[str] | None = None, warmup: int = 2, steps: int = 5,
              device: str = "auto", timeout: float = 600.0) -> dict[str, Any]:
        """Run a PyTorch training script (a .py file or a notebook) for `warmup` then `steps` training steps
        under the profiler and return the ranked findings (JSON report and Markdown). `args` are the
        script's own command-line arguments."""
        bounded(script=script, args=args or [], device=device)
        settings = api.prepare()
        api.check_script(script)
        options = api.run_options(settings, warmup, steps, False, timeout, None, device=device)
        return report_result(api.audit(script, args or [], options, settings.rules, None, settings.gate))

    @server.tool()
    def analyze(paths: list[str]) -> dict[str, Any]:
        """Apply the rules to torch.profiler / Kineto traces (*.json or *.json.gz files, or folders of them,
        e.g. one per rank of a distributed job)."""
        bounded(paths=paths)
        settings = api.prepare()
        return report_result(api.analyze(paths, settings.rules, (), settings.gate))

    @server.tool()
    def explain(rule: str) -> str:
        """The documentation of a rule (SYNC001) or of the rules for a tip (T01), as Markdown: what, why,
        an example, what to use instead, references."""
        from .report.docs import rule_markdown
        bounded(rule=rule)
        return "\n\n".join(rule_markdown(r) for r in api.rules_for(rule, None))

    @server.tool()
    def fix(script: str, args: list[str] | None = None, warmup: int = 2, steps: int = 5) -> dict[str, Any]:
        """Audit the script and return the mechanical fixes for its findings as a unified diff. Nothing is
        written: apply the diff yourself, then `verify`."""
        bounded(script=script, args=args or [])
        settings = api.prepare()
        api.check_fixable(script, None, False)
        options = api.run_options(settings, warmup, steps)
        report, plan = api.fix(script, args or [], options, settings.rules, {r.id for r in settings.rules})
        return {"diff": plan.diff(), "files": [f.path for f in plan.files], **report_result(report)}

    @server.tool()
    def verify(script: str, args: list[str] | None = None, rounds: int = 3, max_rounds: int = 12,
               max_time: float = 120.0, steps: int = 15, plan_file: str | None = None) -> dict[str, Any]:
        """Measure the fixes before trusting them: A/B runs of the script as it is and fixed (never written),
        step time with a 95 % interval and the loss compared. Takes minutes. With `plan_file` (a `plan` tool's
        result saved as JSON, or `perfaudit plan -o`), the plan instead: speed, loss and its step's peak memory."""
        import json

        from .report.verify_report import render_json
        bounded(script=script, args=args or [], plan_file=plan_file)
        api.check_rounds(rounds, max_rounds, max_time)
        settings = api.prepare()
        api.check_script(script)
        if plan_file is not None:
            from .report.plan_report import verification_dict
            spec = api.read_plan(plan_file)
            options = api.run_options(settings, 3, steps, for_rules=False)
            options.seed = 0
            result = api.verify_plan(script, args or [], spec, options,
                                     api.Rounds(min=rounds, max=max(max_rounds, rounds), max_time_s=max_time))
            return verification_dict(result)
        audit_options = api.run_options(settings)
        timing_options = api.run_options(settings, 3, steps, for_rules=False)
        plan_rounds = api.Rounds(min=rounds, max=max(max_rounds, rounds), max_time_s=max_time)
        report, _, result = api.verify(script, args or [], audit_options, timing_options, plan_rounds,
                                       settings.rules, {r.id for r in settings.rules})
        return {"verification": json.loads(render_json(result)), **report_result(report)}

    @server.tool()
    def plan(script: str, args: list[str] | None = None, checkpoint: bool = False, target: str = "auto",
             device: str = "auto", timeout: float = 600.0, memory_budget_gb: float | None = None) -> dict[str, Any]:
        """Find, by running the script, the largest batch that fits the GPU with a 10 % margin (tip T12), or
        with `checkpoint` the repeated block whose activation checkpointing frees the most memory (tip T14).
        Runs the script two to four times (a minute or more); a plan is offered only when its own run fit,
        else `why_not` says why. `memory_budget_gb`: what a step may reserve, in place of the target's memory."""
        from .report.plan_report import checkpoint_dict
        from .report.plan_report import to_dict as plan_dict
        bounded(script=script, args=args or [], target=target, device=device)
        settings = api.prepare()
        api.check_script(script)
        options = api.run_options(settings, timeout=timeout, device=device, target=target)
        options.record_shapes = options.target != "none"
        budget = api.checked_budget(memory_budget_gb)
        if checkpoint:
            return checkpoint_dict(api.plan_checkpoint(script, args or [], options, None, budget))
        return plan_dict(api.plan_batch(script, args or [], options, None, budget))

    return server


def serve() -> None:
    """Serve on stdin/stdout until the client closes them."""
    build_server().run("stdio")
