"""YAML text -> Policy, with every error pointing at the file and line.

PyYAML's composed node tree keeps each value's position; pydantic's error ``loc`` is walked down
that tree so ``modes.speed.power_limit_w: Input should be greater than 0`` comes out as
``policy.yaml:12:20: modes.speed.power_limit_w: Input should be greater than 0 (got -5)``.

All errors are collected (schema errors, then the checks of :mod:`scheduler.policy.checks` on every
section that passed the schema), up to :data:`MAX_ISSUES`, each with a "did you mean" when a key or
name is near an accepted one. Relative paths in a policy file (``job.workdir``, ``clock_plan``, a
trace's ``path``) are read from the policy file's folder, wherever gridshift is started from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from scheduler.policy.did_you_mean import closest, did_you_mean
from scheduler.errors import PolicyError
from scheduler.policy.types import CarbonConfig, CarbonSource, JobSpec, Mode, Policy, PriceConfig, PriceSource
from scheduler.policy.checks import Problem, section_problems

__all__ = ["MAX_ISSUES", "PolicyIssue", "load_policy", "parse_policy", "resolve_policy_paths",
           "schema_errors"]

#: at most this many errors are listed; the rest are counted
MAX_ISSUES = 20

#: keys that once existed: a clear word instead of a bare "unknown key"
_RETIRED_KEYS = {
    ("carbon", "poll_interval_s"): "no longer read (there is no background poller: "
                                   "the signal is read when a decision is due); delete the line",
}

_DOTTED = re.compile(r"^(?:Value error, )?([a-z_]+(?:\.[a-z_0-9]+)+)\b")
_QUOTED = re.compile(r"'([^']*)'")


@dataclass(frozen=True)
class PolicyIssue:
    """One error in a policy file; ``str()`` is ``file:line:col: path: message``."""

    file: str
    line: int | None  # None: about the file itself (missing, unreadable), not a place in it
    column: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}:" if self.line else f"{self.file}:"
        return f"{where} {self.path}: {self.message}" if self.path else f"{where} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column, "path": self.path, "message": self.message}


def _issue(file: str, node: yaml.Node, path: str, message: str) -> PolicyIssue:
    # "rules.clean_mode: rules.clean_mode names ..." says the path twice
    message = message[len(path) + 1:] if path and message.startswith(path + " ") else message
    return PolicyIssue(file, node.start_mark.line + 1, node.start_mark.column + 1, path, message)


def _policy_error(issues: list[PolicyIssue]) -> PolicyError:
    more = len(issues) - 1
    first = str(issues[0]) + (f" [and {more} more error(s)]" if more else "")
    shown = tuple(issues[:MAX_ISSUES])
    return PolicyError(first, path=issues[0].file, line=issues[0].line, column=issues[0].column, more=more,
                       issues=shown, hidden=len(issues) - len(shown))


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping gives the same key twice (PyYAML would keep the last one silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a mapping key given twice, at the second occurrence's line."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first_line.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if seen is not None:
                raise _DuplicateKey(
                    None, None, f"duplicate key {key!r} (first given at line {seen}; YAML would keep only the last)",
                    key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _node_at(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
            if hit is None:
                key = next((k for k, _ in node.value if getattr(k, "value", None) == str(part)), None)
                return key or node
            node = hit
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
    return node


def _key_node(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node:
    """For 'extra key' errors, point at the key itself rather than its value."""
    parent = _node_at(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if getattr(k, "value", None) == str(loc[-1]):
                return k
    return _node_at(node, loc)


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # discriminated unions add the tag ("plan", "absolute") or the discriminator function ("_rule_kind()"), and
    # function validators add "function-..." parts
    return tuple(p for p in loc if not (isinstance(p, str) and (p in ("absolute", "relative", "plan") or "[" in p or p.endswith("()"))))


def _format_input(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _models_at(loc: tuple[Any, ...], data: Any) -> list[type[BaseModel]]:
    """The model class(es) whose keys are valid at ``loc`` (a union gives several unless the data's
    ``kind`` picks one), so an unknown key can be compared with the keys that would be accepted."""
    kinds: list[Any] = [Policy]
    value = data
    for part in loc:
        nxt: list[Any] = []
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                field = kind.model_fields.get(str(part))
                if field is not None:
                    nxt.append(field.annotation)
            elif get_origin(kind) in (dict, tuple, list):  # a mapping of modes, a list of fallbacks: skip the key
                args = [a for a in get_args(kind) if a is not Ellipsis]
                nxt.append(args[-1] if args else Any)
        value = value.get(part) if isinstance(value, dict) else value[part] if (
            isinstance(value, list) and isinstance(part, int) and part < len(value)) else None
        kinds = []
        for kind in nxt:  # unwrap Optional / unions; a 'kind' key picks the union member
            members = [a for a in get_args(kind) if a is not type(None)] if get_origin(kind) is Union else [kind]
            if len(members) > 1 and isinstance(value, dict):
                tagged = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)
                          and "kind" in m.model_fields and m.model_fields["kind"].default == value.get("kind")]
                members = tagged or members
            kinds.extend(members)
    return [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]


def _schema_issue_text(err: dict[str, Any], loc: tuple[Any, ...], data: Any) -> tuple[tuple[Any, ...], str]:
    """The location and message for one pydantic error, with a suggestion where one is near."""
    kind, msg, ctx = err["type"], err["msg"].removeprefix("Value error, "), err.get("ctx") or {}
    if kind == "extra_forbidden" and tuple(loc) in _RETIRED_KEYS:
        return loc, _RETIRED_KEYS[tuple(loc)]
    if kind == "extra_forbidden":
        accepted = sorted({name for m in _models_at(loc[:-1], data) for name in m.model_fields})
        return loc, f"unknown key {loc[-1]!r}{did_you_mean(str(loc[-1]), accepted)}"
    if kind == "missing":
        return loc, "required key is missing"
    if kind == "union_tag_invalid":
        tags = _QUOTED.findall(str(ctx.get("expected_tags", "")))
        tag = str(ctx.get("tag", ""))
        key = str(ctx.get("discriminator", "kind")).strip("'")
        return (*loc, "kind" if key.endswith("()") else key), (
            f"unknown {loc[-1] if loc else ''} kind {tag!r}{did_you_mean(tag, tags)} (kinds: {', '.join(tags)})".replace("  ", " "))
    detail = ""
    if kind == "literal_error":
        choices = _QUOTED.findall(str(ctx.get("expected", "")))
        got = err.get("input")
        if isinstance(got, str) and (hit := closest(got, choices)) is not None and hit != got:
            detail = f" (got {got!r}; did you mean {hit!r}?)"
    if not detail and "input" in err and not isinstance(err["input"], (dict, list)):
        detail = f" (got {_format_input(err['input'])})"
    return loc, msg + detail


def _schema_issues(exc: ValidationError, root: yaml.Node, data: Any, where: str) -> list[PolicyIssue]:
    # an unknown key usually explains the rest (a misspelt 'rule:' also makes 'rules' missing): report it first
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    issues: list[PolicyIssue] = []
    suggested: set[tuple[Any, ...]] = set()
    for err in errors:
        loc = _clean_loc(tuple(err["loc"]))
        if not loc:
            m = _DOTTED.match(err["msg"].removeprefix("Value error, "))
            if m:
                loc = tuple(int(p) if p.isdigit() else p for p in m.group(1).split("."))
        if err["type"] == "missing" and loc in suggested:
            continue  # "unknown key 'rule' (did you mean 'rules'?)" already says it
        loc, message = _schema_issue_text(err, loc, data)
        if err["type"] == "extra_forbidden" and "did you mean" in message:
            suggested.add((*loc[:-1], _QUOTED.findall(message)[-1]))
        node = _key_node(root, loc) if err["type"] == "extra_forbidden" and loc else _node_at(root, loc)
        issues.append(_issue(where, node, ".".join(str(p) for p in loc) or "(top level)", message))
    return issues


def _problem_issue(root: yaml.Node, problem: Problem, where: str) -> PolicyIssue:
    node = _key_node(root, problem.loc) if problem.at_key else _node_at(root, problem.loc)
    return _issue(where, node, ".".join(str(p) for p in problem.loc), problem.message)


def _checkable(data: dict[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """What the checks of :mod:`scheduler.policy.checks` read, taken piece by piece from the file as
    written, so a piece that fails the schema hides no problem of another: every carbon source that
    passes the schema on its own, every mode that does, the job and the backend name as written
    (relative paths resolved against ``base_dir``)."""
    out: dict[str, Any] = {}
    carbon = data.get("carbon")
    if isinstance(carbon, dict):
        fallbacks = carbon.get("fallbacks")
        pieces = [(("carbon",), {k: v for k, v in carbon.items() if k in CarbonSource.model_fields})]
        pieces += [(("carbon", "fallbacks", i), s) for i, s in enumerate(fallbacks)] if isinstance(fallbacks, list) else []
        sources = []
        for loc, raw in pieces:
            try:
                source = _validate(CarbonSource, raw)
            except (ValidationError, TypeError):
                continue
            sources.append((loc, _resolve_source(source, base_dir) if base_dir is not None else source))
        out["sources"] = sources
    price = data.get("price")
    if isinstance(price, dict):
        fallbacks = price.get("fallbacks")
        pieces = [(("price",), {k: v for k, v in price.items() if k in PriceSource.model_fields})]
        pieces += [(("price", "fallbacks", i), s) for i, s in enumerate(fallbacks)] if isinstance(fallbacks, list) else []
        prices = []
        for loc, raw in pieces:
            try:
                ps = _validate(PriceSource, raw)
            except (ValidationError, TypeError):
                continue
            prices.append((loc, _resolve_source(ps, base_dir) if base_dir is not None else ps))
        out["price_sources"] = prices
    job = data.get("job")
    if isinstance(job, dict):
        workdir = job.get("workdir")
        out["job"] = {**job, "workdir": str(_absolute(workdir, base_dir))} if (
            isinstance(workdir, str) and base_dir is not None) else job
    backend = data.get("backend")
    if isinstance(backend, dict):
        out["backend_name"] = backend.get("name")
    modes = data.get("modes")
    rules = data.get("rules", {})
    if isinstance(modes, dict) and isinstance(rules, dict):
        out["mode_names"] = [str(n) for n in modes]
        out["rule_modes"] = {w: rules.get(w, default) for w, default in (("clean_mode", "speed"), ("dirty_mode", "efficiency"))
                             if isinstance(rules.get(w, default), str)}
    if isinstance(modes, dict):
        good = {}
        for name, raw in modes.items():
            try:
                mode = _validate(Mode, raw)
            except (ValidationError, TypeError):
                continue
            good[str(name)] = _resolve_mode(mode, base_dir) if base_dir is not None else mode
        out["modes"] = good
    return out


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], data: Any) -> _M:
    """Validate as JSON, strictly: a policy means what its JSON schema says (``"60"`` is not a
    number, ``1`` is not ``true``), so an editor using ``policy schema`` and the loader agree.
    YAML dates become strings, as a JSON-schema validator sees them."""
    try:
        text = json.dumps(data, default=str)
    except (TypeError, ValueError):  # keys JSON cannot carry (a YAML list as a key): let pydantic say why
        return model.model_validate(data, strict=True)
    return model.model_validate_json(text, strict=True)


def schema_errors(data: Any) -> list[dict[str, Any]]:
    """The schema's verdict alone (no file checks): pydantic's errors for ``data``, [] when valid."""
    try:
        _validate(Policy, data)
    except ValidationError as exc:
        return exc.errors(include_url=False)  # type: ignore[return-value]
    return []


def _compose(text: str, where: str) -> tuple[yaml.Node, dict[str, Any]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        kind = "" if isinstance(exc, _DuplicateKey) else "YAML syntax error: "
        raise _policy_error([PolicyIssue(where, line, col, "", f"{kind}{problem}")]) from None
    if root is None or data is None:
        raise _policy_error([PolicyIssue(where, 1, 1, "", "the policy file is empty")])
    if not isinstance(data, dict):
        raise _policy_error([PolicyIssue(where, 1, 1, "", "a policy must be a mapping of keys (carbon, modes, rules, job, ...)")])
    return root, data


def parse_policy(text: str, *, where: str = "<policy>", base_dir: str | Path | None = None) -> Policy:
    """Validate policy YAML ``text``; raise :class:`PolicyError` listing every error as ``where:line:col``.

    ``base_dir`` is the folder relative paths are read from (the policy file's; without it, the
    current directory).
    """
    root, data = _compose(text, where)
    base = Path(base_dir).absolute() if base_dir is not None else None
    issues: list[PolicyIssue] = []
    policy: Policy | None = None
    try:
        policy = _validate(Policy, data)
    except ValidationError as exc:
        issues = _schema_issues(exc, root, data, where)
    pieces = _checkable(data, base)
    if any("names unknown mode" in i.message or "must define" in i.message for i in issues):
        pieces.pop("rule_modes", None)  # the schema said it already (a missing mode is also an unknown one)
    issues += [_problem_issue(root, p, where) for p in section_problems(**pieces, base_dir=base)]
    if issues or policy is None:
        raise _policy_error(issues)
    return resolve_policy_paths(policy, base) if base is not None else policy


def _absolute(path: str | Path, base_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


_S = TypeVar("_S", CarbonSource, CarbonConfig, PriceSource, PriceConfig)


def _resolve_source(source: _S, base_dir: Path) -> _S:
    path = source.options.get("path")
    if source.provider != "trace" or not isinstance(path, str):
        return source
    return source.model_copy(update={"options": {**source.options, "path": str(_absolute(path, base_dir))}})


def _resolve_carbon(carbon: CarbonConfig, base_dir: Path) -> CarbonConfig:
    return _resolve_source(carbon, base_dir).model_copy(
        update={"fallbacks": tuple(_resolve_source(s, base_dir) for s in carbon.fallbacks)})


def _resolve_price(price: PriceConfig | None, base_dir: Path) -> PriceConfig | None:
    if price is None:
        return None
    return _resolve_source(price, base_dir).model_copy(
        update={"fallbacks": tuple(_resolve_source(s, base_dir) for s in price.fallbacks)})


def _resolve_job(job: JobSpec, base_dir: Path) -> JobSpec:
    return job if job.workdir is None else job.model_copy(update={"workdir": _absolute(job.workdir, base_dir)})


def _resolve_mode(mode: Mode, base_dir: Path) -> Mode:
    return mode if mode.clock_plan is None else mode.model_copy(update={"clock_plan": _absolute(mode.clock_plan, base_dir)})


def resolve_policy_paths(policy: Policy, base_dir: str | Path) -> Policy:
    """``policy`` with its relative paths (job.workdir, clock plans, trace files) made absolute
    against ``base_dir``. The job's command is left as written: it runs in job.workdir, by default
    the policy file's folder (:func:`scheduler.policy.checks.job_cwd`)."""
    base = Path(base_dir).absolute()
    return policy.model_copy(update={
        "carbon": _resolve_carbon(policy.carbon, base),
        "price": _resolve_price(policy.price, base),
        "job": _resolve_job(policy.job, base),
        "modes": {name: _resolve_mode(mode, base) for name, mode in policy.modes.items()},
    })


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; its relative paths are read from the file's folder."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _policy_error([PolicyIssue(str(p), None, None, "", "policy file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _policy_error([PolicyIssue(str(p), None, None, "", f"cannot read policy file: {exc}")]) from None
    return parse_policy(text, where=str(p), base_dir=p.absolute().parent)
