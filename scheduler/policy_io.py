"""YAML text -> Policy, with errors that point at the file and line.

PyYAML's composed node tree keeps each value's position; pydantic's error ``loc`` is walked down
that tree so ``modes.speed.power_limit_w: Input should be greater than 0`` comes out as
``policy.yaml:12:20: modes.speed.power_limit_w: Input should be greater than 0 (got -5)``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from scheduler.errors import PolicyError
from scheduler.policy import Policy
from scheduler.policy_checks import Problem, policy_problems

__all__ = ["load_policy", "parse_policy", "policy_json_schema"]

_DOTTED = re.compile(r"^(?:Value error, )?([a-z_]+(?:\.[a-z_0-9]+)+)\b")


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
    # discriminated unions add the tag ("plan", "absolute") and function validators add "function-..." parts
    return tuple(p for p in loc if not (isinstance(p, str) and (p in ("plan", "absolute", "relative") or "[" in p)))


def _format_input(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_policy(text: str, *, where: str = "<policy>") -> Policy:
    """Validate policy YAML ``text``; raise :class:`PolicyError` naming ``where:line:col``."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        kind = "" if isinstance(exc, _DuplicateKey) else "YAML syntax error: "
        raise PolicyError(f"{where}:{line}:{col}: {kind}{problem}", path=where, line=line, column=col) from None
    if root is None or data is None:
        raise PolicyError(f"{where}:1:1: the policy file is empty", path=where, line=1, column=1)
    if not isinstance(data, dict):
        raise PolicyError(f"{where}:1:1: a policy must be a mapping of keys (carbon, modes, rules, job, ...)", path=where, line=1, column=1)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        # an unknown key usually explains the rest (a misspelt 'rule:' also makes 'rules' missing): report it first
        errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
        first = errors[0]
        loc = _clean_loc(tuple(first["loc"]))
        msg = first["msg"]
        if not loc:
            m = _DOTTED.match(msg)
            if m:
                loc = tuple(int(p) if p.isdigit() else p for p in m.group(1).split("."))
        node = _key_node(root, loc) if first["type"] == "extra_forbidden" and loc else _node_at(root, loc)
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        path = ".".join(str(p) for p in loc) or "(top level)"
        msg = msg.removeprefix("Value error, ")
        detail = ""
        if first["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}"
        elif first["type"] == "missing":
            msg = "required key is missing"
        elif "input" in first and not isinstance(first["input"], (dict, list)):
            detail = f" (got {_format_input(first['input'])})"
        more = f" [and {len(errors) - 1} more error(s)]" if len(errors) > 1 else ""
        raise PolicyError(
            f"{where}:{line}:{col}: {path}: {msg}{detail}{more}", path=where, line=line, column=col, more=len(errors) - 1
        ) from None
    problems = policy_problems(policy)
    if problems:
        _raise_problem(root, problems[0], where=where, more=len(problems) - 1)
    return policy


def _raise_problem(root: yaml.Node, problem: Problem, *, where: str, more: int) -> None:
    node = _key_node(root, problem.loc) if problem.at_key else _node_at(root, problem.loc)
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    path = ".".join(str(p) for p in problem.loc)
    extra = f" [and {more} more error(s)]" if more else ""
    raise PolicyError(f"{where}:{line}:{col}: {path}: {problem.message}{extra}", path=where, line=line, column=col, more=more)


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(f"{p}:0:0: policy file not found", path=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{p}:0:0: cannot read policy file: {exc}", path=str(p)) from None
    return parse_policy(text, where=str(p))


def policy_json_schema() -> str:
    """The JSON schema of policy files, for editors (``# yaml-language-server: $schema=...``)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gridshift policy"
    return json.dumps(schema, indent=2, sort_keys=True)
