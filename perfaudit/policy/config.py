"""Project configuration: `[tool.perfaudit]` in pyproject.toml, or perfaudit.toml, or --config FILE.

Keys (command-line flags override them):

    select = ["SYNC", "T05", "GRAD001"]   # rule ids, families (letters of the id) or tip ids
    ignore = ["OPT002"]
    fail-on = "warning"                   # info | warning | error | never
    warmup = 2
    steps = 5
    device = "auto"                       # auto | cpu | emulate-cuda (see `perfaudit run --device`)
    target = "H100 SXM"                   # the GPU a run is projected onto (see `--target`; "none": off)
    rules-dirs = ["perf_rules"]           # extra rule directories, relative to the config file
    [tool.perfaudit.severity]             # per-rule severity overrides
    SYNC001 = "error"
    [tool.perfaudit.thresholds.DATA001]   # per-rule threshold overrides
    min_share_pct = 10
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

from ..errors import UsageError
from ..findings import SEVERITIES

FAIL_ON = (*SEVERITIES, "never")
_KEYS = {"select", "ignore", "fail-on", "warmup", "steps", "rules-dirs", "severity", "thresholds",
         "allow-no-training", "keep-runs", "device", "target"}
DEVICES = ("auto", "cpu", "emulate-cuda")


@dataclass
class Config:
    path: str | None = None
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str | None = None
    warmup: int | None = None
    steps: int | None = None
    rules_dirs: list[str] = field(default_factory=list)
    allow_no_training: bool = False   # the gate passes a run that never reached a training step
    keep_runs: int = 10               # run folders kept under .perfaudit/runs (0: all)
    device: str = "auto"              # where a run without a GPU runs the script (collect/emulation/emulate.py)
    target: str | None = None         # the GPU runs are projected onto (perfaudit/projection/); None: auto
    severity: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, dict] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # "select"/"ignore" -> where they were set

    def override(self, key: str, ids: list[str], where: str, extend: bool = False) -> None:
        """Ids from the command line: `--select` replaces the config's selection, `--ignore` adds."""
        ids = [v.strip().upper() for item in ids for v in item.split(",") if v.strip()]
        setattr(self, key, (getattr(self, key) if extend else []) + ids)
        self.origin[key] = where if not extend or not self.origin.get(key) else f"{self.origin[key]} and {where}"

    def selects(self, rule) -> bool:
        """Whether a rule is selected: by id, family or tip id; `ignore` wins over `select`."""
        keys = {rule.id, rule.family, *rule.tips}
        if self.select and not keys & set(self.select):
            return False
        return not keys & set(self.ignore)


def _fail(where: str, key: str, why: str):
    raise UsageError(f"{where}: invalid key '{key}': {why}")


def _str_list(table: dict, key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        _fail(where, key, "expected a list of strings")
    return value


def _parse(table: dict, where: str) -> Config:
    unknown = set(table) - _KEYS
    if unknown:
        _fail(where, sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(_KEYS))})")
    cfg = Config(path=where)
    cfg.select = [s.upper() for s in _str_list(table, "select", where)]
    cfg.ignore = [s.upper() for s in _str_list(table, "ignore", where)]
    cfg.origin = {"select": where, "ignore": where}
    base = os.path.dirname(os.path.abspath(where))
    cfg.rules_dirs = [os.path.join(base, d) for d in _str_list(table, "rules-dirs", where)]
    if "fail-on" in table:
        if table["fail-on"] not in FAIL_ON:
            _fail(where, "fail-on", f"expected one of {', '.join(FAIL_ON)}")
        cfg.fail_on = table["fail-on"]
    if "allow-no-training" in table:
        if not isinstance(table["allow-no-training"], bool):
            _fail(where, "allow-no-training", "expected true or false")
        cfg.allow_no_training = table["allow-no-training"]
    if "keep-runs" in table:
        value = table["keep-runs"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            _fail(where, "keep-runs", "expected a non-negative integer (0 keeps every run)")
        cfg.keep_runs = value
    if "target" in table:
        cfg.target = checked_target(table["target"], f"{where}: target")
    if "device" in table:
        if table["device"] not in DEVICES:
            _fail(where, "device", f"expected one of {', '.join(DEVICES)}")
        cfg.device = table["device"]
    for key in ("warmup", "steps"):
        if key in table:
            value = table[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "warmup" else 1):
                _fail(where, key, "expected a non-negative integer" if key == "warmup" else "expected a positive integer")
            setattr(cfg, key, value)
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        _fail(where, "severity", "expected a table of RULE = severity")
    for rule, level in severity.items():
        if level not in SEVERITIES:
            _fail(where, f"severity.{rule}", f"expected one of {', '.join(SEVERITIES)}")
        cfg.severity[rule.upper()] = level
    thresholds = table.get("thresholds", {})
    if not isinstance(thresholds, dict):
        _fail(where, "thresholds", "expected tables of RULE.name = number")
    for rule, values in thresholds.items():
        if not isinstance(values, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            _fail(where, f"thresholds.{rule}", "expected a table of name = number")
        for name, value in values.items():
            if not math.isfinite(value):  # nan/inf compares false with everything: the rule would never fire
                _fail(where, f"thresholds.{rule}.{name}", f"expected a finite number, not {value}")
        cfg.thresholds[rule.upper()] = dict(values)
    return cfg


def _mentions_perfaudit(path: str) -> bool:
    """Whether a pyproject.toml can hold [tool.perfaudit]: most do not, and are then not parsed at all."""
    try:
        with open(path, "rb") as f:
            return b"perfaudit" in f.read()
    except OSError:
        return True  # _read says why it cannot be read


def _read(path: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from exc


def load_config(explicit: str | None = None, cwd: str = ".") -> Config:
    """--config FILE, else ./perfaudit.toml, else [tool.perfaudit] in ./pyproject.toml, else defaults."""
    if explicit:
        if not os.path.isfile(explicit):
            raise UsageError(f"config file not found: {explicit}")
        data = _read(explicit)
        table = data.get("tool", {}).get("perfaudit", data) if explicit.endswith("pyproject.toml") else data
        return _parse(table, explicit)
    own = os.path.join(cwd, "perfaudit.toml")
    if os.path.isfile(own):
        return _parse(_read(own), own)
    pyproject = os.path.join(cwd, "pyproject.toml")
    if os.path.isfile(pyproject) and _mentions_perfaudit(pyproject):
        table = _read(pyproject).get("tool", {}).get("perfaudit")
        if table is not None:
            return _parse(table, pyproject)
    return Config()


def apply_to_rules(cfg: Config, rules: list) -> list:
    """Selected rules, with threshold overrides checked against each rule's declared thresholds."""
    import difflib
    from dataclasses import replace

    from ..tips import TIPS
    known = {r.id for r in rules}
    for rule_id in list(cfg.severity) + list(cfg.thresholds):
        if rule_id not in known:
            _fail(cfg.path or "config", rule_id, "no such rule")
    names = known | {r.family for r in rules} | set(TIPS)
    for key in ("select", "ignore"):
        for name in getattr(cfg, key):
            if name not in names:  # a typo must not select nothing and pass the gate
                near = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.5)
                hint = f"; did you mean {', '.join(near)}?" if near else "; `perfaudit rules` lists them"
                raise UsageError(f"unknown rule, family or tip '{name}' in {key} "
                                 f"({cfg.origin.get(key) or cfg.path or 'config'}){hint}")
    out = []
    for rule in rules:
        if not cfg.selects(rule):
            continue
        overrides = cfg.thresholds.get(rule.id)
        if overrides:
            unknown = set(overrides) - set(rule.thresholds)
            if unknown:
                _fail(cfg.path or "config", f"thresholds.{rule.id}.{sorted(unknown)[0]}",
                      f"{rule.id} has no such threshold (it has: {', '.join(rule.thresholds) or 'none'})")
            rule = replace(rule, thresholds={**rule.thresholds, **overrides})
        out.append(rule)
    return out


def checked_target(value, where: str) -> str:
    """A GPU name devices.yaml knows (in any case, `-` or `_` for spaces), "auto" or "none"; UsageError
    naming the nearest names otherwise."""
    from ..projection.devices import target
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: expected a GPU name, auto or none")
    if value.strip().lower() in ("auto", "none"):
        return value.strip().lower()
    try:
        return target(value).name
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None

