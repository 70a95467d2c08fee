"""Load rule files: YAML as data (never evaluated), validated against the closed schema and against
the facts, thresholds and tips they name."""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..errors import RuleError
from ..facts import FACTS
from ..tips import TIPS
from .schema import RULE_SCHEMA
from .template import PLACEHOLDER, valid_spec

AGGREGATES = {"count_per_step", "ms_per_step", "share_pct", "n_sites", "details", "where", "lines",
              "step_ms", "n_steps", "device"}
SITE_FIELDS = {"count_per_step", "ms_per_step", "step_share", "exact"}
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


# a placeholder outside backticks quotes a run figure; inside a command (`num_workers={…}`) it is a value
_RUN_FIGURE = re.compile(r"(?:^|[^`{])\{[A-Za-z_][\w.]*(?::[^{}]*)?\}(?![^`]*`)")


@dataclass(frozen=True)
class Docs:
    """A rule's documentation, ruff's sections: what, why, example, use instead, references."""
    what: str
    why: str
    example: str
    use_instead: str
    references: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    """A positive or negative example, run by the test suite: a sample script or a trace. Where a
    script's finding must stand is marked in the script itself (`# expect: RULE`)."""
    expect: str                      # "fire" or "silent"
    script: str | None = None
    trace: str | None = None
    args: tuple[str, ...] = ()
    severity: str | None = None
    nproc: int | None = None         # run under torchrun with this many processes (a DDP sample)

    @property
    def target(self) -> str:
        return self.script or self.trace or ""


@dataclass(frozen=True)
class Rule:
    """A validated rule file. `spec` keeps the parts the engine reads as data (conditions, evidence,
    cost, notes); everything else is a typed field."""
    id: str
    title: str
    summary: str
    severity: str
    tips: tuple[str, ...]
    message: str
    fix: str
    docs: Docs
    examples: tuple[Example, ...]
    path: str
    scope: str = "trace"             # trace: each trace; job: the traces of several ranks; report: the gate
    thresholds: dict = field(default_factory=dict, compare=False)
    spec: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> Rule:
        docs = spec["docs"]
        return cls(spec["id"], spec["title"], spec["summary"], spec["severity"], tuple(spec["tips"]),
                   spec["message"], spec["fix"],
                   Docs(docs["what"], docs["why"], docs["example"], docs["use_instead"], tuple(docs["references"])),
                   tuple(Example(e["expect"], e.get("script"), e.get("trace"), tuple(e.get("args", ())),
                                 e.get("severity"), e.get("nproc")) for e in spec["examples"]),
                   path, spec.get("scope", "trace"), dict(spec.get("thresholds", {})), spec)

    @property
    def autofix(self) -> dict | None:
        """{kind, params}: the edit `perfaudit fix` makes for this rule's findings, if any."""
        return self.spec.get("autofix")

    @property
    def family(self) -> str:
        found = re.match(r"[A-Z]+", self.id)
        return found.group(0) if found else self.id

    @property
    def static_fix(self) -> str:
        """The fix text for a finding from the source alone: the sentences that quote run figures
        ("a batch took {…} ms") are left out; a figure inside a command becomes "N"."""
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z`])", self.fix.strip())
        kept = [t for t in sentences if not _RUN_FIGURE.search(t)]
        return PLACEHOLDER.sub("N", " ".join(kept) if kept else self.fix)

    def facts(self) -> set[str]:
        """Registered facts this rule reads (conditions, evidence, cost, templates)."""
        names = {c["fact"] for c in _conditions(self.spec.get("when"))}
        projected = [self.spec["projected"]] if "projected" in self.spec else []
        for item in self.spec.get("escalate", []) + self.spec.get("notes", []) + self.spec.get("fixes", []) + projected:
            names |= {c["fact"] for c in _conditions(item.get("when"))}
        names.add(self.spec.get("evidence", {}).get("sites"))
        names.add(self.spec.get("cost", {}).get("fact"))
        names |= set((self.autofix or {}).get("params", {}).values())
        for text in [self.message, self.fix] + [p["message"] for p in projected] + \
                [n["text"] for n in self.spec.get("notes", []) + self.spec.get("fixes", [])]:
            names |= {name for name, _ in PLACEHOLDER.findall(text)}
        out = set()
        for name in filter(None, names):
            parts = name.split(".")
            out |= {".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in FACTS}
        return out

    def needs(self) -> set[str]:
        """What a run must record for this rule: "stacks", "shapes", "probes"."""
        return {need for name in self.facts() for need in FACTS[name].needs}


def fact_exists(name: str) -> bool:
    """A registered fact, or a key path into one (`copy.h2d.pageable_ms`)."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in FACTS for i in range(len(parts), 0, -1))


def _conditions(node):
    if isinstance(node, dict):
        if "fact" in node:
            yield node
        for key in ("all", "any"):
            for child in node.get(key, []):
                yield from _conditions(child)
        if "not" in node:
            yield from _conditions(node["not"])


def _check_names(spec: dict, where: str) -> None:
    thresholds = spec.get("thresholds", {})
    conds = list(_conditions(spec.get("when")))
    for item in spec.get("escalate", []):
        conds += list(_conditions(item["when"]))
    for note in spec.get("notes", []) + spec.get("fixes", []):
        conds += list(_conditions(note.get("when")))
    if "projected" in spec:
        conds += list(_conditions(spec["projected"]["when"]))
    if isinstance(spec.get("cost", {}).get("estimated"), dict):
        conds += list(_conditions(spec["cost"]["estimated"]))
    for cond in conds:
        name = cond["fact"]
        if not (name.startswith("evidence.") or fact_exists(name)):
            raise RuleError(f"{where}: condition names unknown fact '{name}'")
    values = [c["value"] for c in conds] + [w["value"] for w in spec.get("evidence", {}).get("where", [])]
    values += [spec.get("cost", {}).get("per_unit_us"), spec.get("cost", {}).get("scale")]
    for value in values:
        if isinstance(value, dict) and value["threshold"] not in thresholds:
            raise RuleError(f"{where}: unknown threshold '{value['threshold']}' (declare it under thresholds)")
    for clause in spec.get("evidence", {}).get("where", []):
        if clause["field"] not in SITE_FIELDS and not clause["field"].startswith("extra."):  # a fact's own figure
            raise RuleError(f"{where}: evidence.where field '{clause['field']}' is not one of "
                            f"{sorted(SITE_FIELDS)} or extra.NAME")
    for key in ("sites",):
        name = spec.get("evidence", {}).get(key)
        if name and name not in FACTS:
            raise RuleError(f"{where}: evidence names unknown fact '{name}'")
    for param, name in spec.get("autofix", {}).get("params", {}).items():
        if not fact_exists(name):
            raise RuleError(f"{where}: autofix parameter '{param}' names unknown fact '{name}'")
    cost_fact = spec.get("cost", {}).get("fact")
    if cost_fact and not fact_exists(cost_fact):
        raise RuleError(f"{where}: cost names unknown fact '{cost_fact}'")
    for tip in spec["tips"]:
        if tip not in TIPS:
            raise RuleError(f"{where}: tip '{tip}' is not in the catalogue ({min(TIPS)}-{max(TIPS)})")
    texts = [spec["message"], spec["fix"]] + [n["text"] for n in spec.get("notes", []) + spec.get("fixes", [])]
    texts += [spec["projected"]["message"]] if "projected" in spec else []
    for text in texts:
        for name, fmt in PLACEHOLDER.findall(text):
            if not (name in AGGREGATES or name in thresholds or fact_exists(name)):
                raise RuleError(f"{where}: template placeholder '{{{name}}}' is not a known value")
            if fmt and not valid_spec(fmt):
                raise RuleError(f"{where}: template placeholder '{{{name}:{fmt}}}' has an unsupported format "
                                "(width at most 99, precision at most 99)")


def load_rule(path: str) -> Rule:
    where = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise RuleError(f"{where}: not a regular file")
        if os.path.getsize(path) > MAX_RULE_BYTES:
            raise RuleError(f"{where}: larger than {MAX_RULE_BYTES >> 10} KiB: not a rule file")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        _no_aliases(text, where)
        spec = yaml.load(text, Loader=_SAFE_LOADER)  # safe: plain data, no Python objects
    except OSError as exc:
        raise RuleError(f"{where}: cannot read rule file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise RuleError(f"{where}: YAML syntax error{at}: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(spec, dict):
        raise RuleError(f"{where}: a rule file must hold a mapping of keys")
    digest = _digest(spec)
    if digest not in _validated():  # a file seen valid before, under this schema, is not checked again
        _check_schema(spec, where)
        _check_names(spec, where)
        _remember(digest)
    return Rule.from_spec(spec, where)


def _check_schema(spec: dict, where: str) -> None:
    import jsonschema  # only for rule files not validated before: 80 ms of imports spared on most runs
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft7Validator(RULE_SCHEMA)
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(spec))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise RuleError(f"{where}: invalid key '{key}': {error.message}")


_VALIDATOR: Any = None  # jsonschema.Draft7Validator, built on first use
# The digests of rule files that passed both checks, with the schema, facts and tips they were checked
# against: a cache in the user's cache folder (XDG_CACHE_HOME), like pytest's or mypy's.
_SCHEMA_KEY = hashlib.sha256(json.dumps([RULE_SCHEMA, sorted(FACTS), sorted(TIPS)], sort_keys=True,
                                        default=str).encode()).hexdigest()
_cache: set[str] | None = None


def _digest(spec: dict) -> str:
    return hashlib.sha256((_SCHEMA_KEY + json.dumps(spec, sort_keys=True, default=str)).encode()).hexdigest()


def _cache_path() -> str:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "perfaudit", "validated-rules.json")


def _validated() -> set[str]:
    global _cache
    if _cache is None:
        try:
            with open(_cache_path(), encoding="utf-8") as f:
                data = json.load(f)
            _cache = {d for d in data if isinstance(d, str)} if isinstance(data, list) else set()
        except (OSError, ValueError):
            _cache = set()
    return _cache


def _remember(digest: str) -> None:
    cache = _validated()
    cache.add(digest)
    path = _cache_path()
    try:  # a cache: when it cannot be written, the files are simply checked again next time
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(sorted(cache)[-2000:], f)
        os.replace(tmp, path)
    except OSError:
        pass


MAX_RULE_BYTES = 256 << 10  # the largest rule file is a few KiB


def _no_aliases(text: str, where: str) -> None:
    """Rule files are plain data: YAML anchors and aliases are refused before anything is built, so a
    few hundred bytes of nested aliases cannot expand into gigabytes ("billion laughs")."""
    try:
        for token in yaml.scan(text, Loader=_SAFE_LOADER):  # libyaml: 15x faster than the Python scanner
            if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                raise RuleError(f"{where}: YAML anchors and aliases (&, *) are not allowed in rule files "
                                f"(line {token.start_mark.line + 1})")
    except yaml.YAMLError:
        return  # the loader says what is wrong, with its line


def builtin_rules_dir() -> str:
    """The folder of the rules perfaudit ships (the package perfaudit.rules: the wheel is never zipped, so
    the folder is found without importlib.resources, whose import costs a trace analysis 10 ms)."""
    import importlib.util
    spec = importlib.util.find_spec("perfaudit.rules")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("perfaudit's rules are not installed (the package perfaudit.rules is missing)")
    return list(spec.submodule_search_locations)[0]


def load_rules(extra_dirs: tuple[str, ...] = ()) -> list[Rule]:
    rules: dict[str, Rule] = {}
    for directory in (builtin_rules_dir(), *extra_dirs):
        if not os.path.isdir(directory):
            raise RuleError(f"rule directory not found: {directory}")
        for name in sorted(os.listdir(directory)):
            full = os.path.join(directory, name)
            if name.endswith((".yaml", ".yml")) and os.path.isfile(full):  # a FIFO or a folder is no rule file
                rule = load_rule(os.path.join(directory, name))
                if rule.id in rules:
                    raise RuleError(f"{rule.path}: duplicate rule id {rule.id} (also in {rules[rule.id].path})")
                rules[rule.id] = rule
    return list(rules.values())
