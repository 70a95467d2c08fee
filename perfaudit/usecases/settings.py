"""What every reporting command needs before it runs: the project's configuration with the command
line's overrides, the rules it selects, the CI gate's options, and the cheapest recording the
selected rules need."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..collect.run.options import RunOptions
from ..engine.loader import Rule, load_rules
from ..errors import UsageError
from ..policy import baseline as baseline_file
from ..policy.config import DEVICES, FAIL_ON, Config, apply_to_rules, checked_target, load_config
from ..policy.gate import GateOptions
from ..tips import TIPS


@dataclass
class Settings:
    config: Config
    all_rules: list[Rule]    # every rule loaded (reporters document them)
    rules: list[Rule]        # those selected, with the configured thresholds
    gate: GateOptions

    @property
    def needs(self) -> set[str]:
        """What the selected rules need recorded: "stacks", "shapes"."""
        return set().union(*(r.needs() for r in self.rules)) if self.rules else set()

    def fail_on(self, flag: str | None) -> str:
        if flag is not None and flag not in FAIL_ON:  # every door (CLI, callbacks, MCP) checks it here
            raise UsageError(f"fail_on: expected one of {', '.join(FAIL_ON)}, not {shown(flag)}")
        return flag or self.config.fail_on or "never"


def prepare(config_path: str | None = None, rules_dirs: list[str] | None = None, select: list[str] | None = None,
            ignore: list[str] | None = None, baseline: str | None = None,
            baseline_write: str | None = None) -> Settings:
    """Configuration (--config, else perfaudit.toml, else pyproject.toml), --select replacing its
    selection and --ignore adding to it, the rules loaded and selected; a missing or corrupt baseline
    fails here, before anything runs."""
    cfg = load_config(config_path)
    if select:
        cfg.override("select", select, "--select")
    if ignore:
        cfg.override("ignore", ignore, "--ignore", extend=True)
    all_rules = load_rules(tuple(cfg.rules_dirs) + tuple(rules_dirs or ()))
    rules = apply_to_rules(cfg, all_rules)
    if baseline:
        baseline_file.read(baseline)
    return Settings(cfg, all_rules, rules, GateOptions(cfg, baseline, baseline_write))


def run_options(settings: Settings, warmup: int | None = None, steps: int | None = None, full: bool = False,
                timeout: float | None = 600.0, out_dir: str | None = None, stack: bool = True,
                for_rules: bool = True, **extra) -> RunOptions:
    """The run's options: the flags, else the configuration, else the defaults; Python stacks and input
    shapes only when a selected rule reads them (`for_rules`), so recording costs no more than needed."""
    _check_count(warmup, "warmup", 0)
    _check_count(steps, "steps", 1)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout < 0):
        raise UsageError(f"timeout: expected seconds (0 or more; 0: never), not {shown(timeout)}")
    if out_dir is not None and not isinstance(out_dir, str):
        raise UsageError(f"out_dir: expected a folder's path, not {shown(out_dir)}")
    cfg = settings.config
    needs = settings.needs if for_rules else set()
    device = extra.pop("device", None) or cfg.device
    target = checked_target(extra.pop("target", None), "--target") if extra.get("target") else (cfg.target or "auto")
    extra.pop("target", None)
    if device not in DEVICES:
        raise UsageError(f"--device: expected one of {', '.join(DEVICES)}, not '{device}'")
    options = RunOptions(warmup=warmup if warmup is not None else (cfg.warmup if cfg.warmup is not None else 2),
                         steps=steps if steps is not None else (cfg.steps or 5), full=full,
                         timeout=timeout or None, out_dir=out_dir, with_stack=stack and "stacks" in needs,
                         record_shapes="shapes" in needs, keep_runs=cfg.keep_runs,
                         device=device, target=target)
    for key, value in extra.items():
        if value is not None:
            setattr(options, key, value)
    return options


def shown(value) -> str:
    """A value as an error message quotes it: never more than a line, whatever was passed."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_count(value, name: str, least: int) -> None:
    """The options every door passes (the CLI's flags, the callbacks' and the MCP tools' arguments): one
    check, the CLI's bounds."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise UsageError(f"{name}: expected a whole number of at least {least}, not {shown(value)}")


def check_rounds(rounds, max_rounds, max_time) -> None:
    """verify's and bisect's rounds, as the CLI bounds them (for the doors without its flags)."""
    _check_count(rounds, "rounds", 1)
    _check_count(max_rounds, "max_rounds", 1)
    if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or not math.isfinite(max_time) \
            or max_time < 0:
        raise UsageError(f"max_time: expected seconds (0 or more), not {shown(max_time)}")


def checked_budget(gb) -> int | None:
    """A plan's memory budget in GB (None: the target's memory), as bytes; bounded for the doors without a flag."""
    if gb is None:
        return None
    if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not math.isfinite(gb) or not 0 < gb < 1e6:
        raise UsageError(f"memory_budget_gb: expected GB (more than 0), not {shown(gb)}")
    return int(gb * 1e9)


def rules_catalogue(rules_dirs: list[str] | None = None) -> list[Rule]:
    """Every rule, by id."""
    return sorted(load_rules(tuple(rules_dirs or ())), key=lambda r: r.id)


def rules_for(rule_or_tip: str, rules_dirs: list[str] | None = None) -> list[Rule]:
    """The rule with this id, or the rules implementing this tip; UsageError naming the nearest."""
    import difflib

    rules = {r.id: r for r in load_rules(tuple(rules_dirs or ()))}
    key = rule_or_tip.upper()
    if key in rules:
        return [rules[key]]
    if key in TIPS:
        chosen = [r for r in rules.values() if key in r.tips]
        if not chosen:
            raise UsageError(f"tip {key} ({TIPS[key]}) has no rule yet")
        return chosen
    near = difflib.get_close_matches(key, list(rules) + list(TIPS), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else "; `perfaudit rules` lists them"
    raise UsageError(f"unknown rule or tip '{rule_or_tip}'{hint}")
