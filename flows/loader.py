"""A flow file (YAML or JSON) -> a runnable pipecat.flows `Flow`, validated, with errors that name
the file, the line and the key.

The file is pipecat's own declarative flow schema (`pipecat.flows.FlowConfig`: `initial_node`,
`nodes`, `global_functions`; node `task_messages`, `role_message`, `functions`, `pre_actions`, ...)
plus two top-level keys of ours, taken out before pipecat validates the rest:

    handlers: flows.examples.booking    # the Python module (or a .py file beside the flow file)
                                        # whose functions the flow's tools name
    filler:                             # spoken when a tool takes longer than after_s
      text: One moment while I check.
      after_s: 0.3

and one action type of ours, in a node's `pre_actions`: `{type: voice, voice: serena,
language: english, instructions: "..."}` changes how the agent sounds from that node on
(flows/session.py carries it out).

Every problem is reported at once, each as `FILE:LINE: key.path: what is wrong`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pipecat.flows import Flow, FlowConfig, FlowReferenceError
from pipecat.utils.yaml import include_loader
from pydantic import ValidationError

VOICE_ACTION = "voice"
VOICE_KEYS = ("voice", "language", "instructions")
DEFAULT_FILLER_TEXT = "One moment, please."
DEFAULT_FILLER_AFTER_S = 0.3

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Filler:
    """What the agent says when a tool runs longer than `after_s` seconds."""

    text: str = DEFAULT_FILLER_TEXT
    after_s: float = DEFAULT_FILLER_AFTER_S


@dataclass(frozen=True)
class LoadedFlow:
    """A validated flow file, joined to its Python functions."""

    path: Path
    config: FlowConfig
    flow: Flow
    filler: Filler | None


class FlowFileError(ValueError):
    """Everything wrong with one flow file; each line says `FILE:LINE: key: problem`."""

    def __init__(self, path: Path, problems: list[str]):
        self.path = path
        self.problems = problems
        count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
        super().__init__(f"flow file {path} has {count}:\n" + "\n".join(f"  {p}" for p in problems))


class _Report:
    """Collects problems, each placed at the line of the deepest key of its path found in the file."""

    def __init__(self, path: Path, lines: dict[Path_, int]):
        self.path = path
        self.lines = lines
        self.problems: list[str] = []

    def add(self, where: Path_, message: str) -> None:
        line = next((self.lines[where[:n]] for n in range(len(where), 0, -1) if where[:n] in self.lines), None)
        place = f"{self.path}:{line}" if line is not None else str(self.path)
        self.problems.append(f"{place}: {key_path(where) or '(top level)'}: {message}")

    def raise_if_any(self) -> None:
        if self.problems:
            raise FlowFileError(self.path, self.problems)


def key_path(where: Path_) -> str:
    """('nodes', 'greet', 'functions', 0, 'name') -> nodes.greet.functions[0].name"""
    out = ""
    for part in where:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_flow(path: str | Path) -> LoadedFlow:
    """Read, validate and join one flow file. Raises FileNotFoundError or FlowFileError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"flow file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FlowFileError(path, [f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    data = _parse(path, text)
    report = _Report(path, _key_lines(text))
    if not isinstance(data, dict):
        report.add((), "the top level must be a mapping with initial_node and nodes")
        report.raise_if_any()
    data = dict(data)
    handlers_ref = data.pop("handlers", None)
    filler = _filler(data.pop("filler", {}), report)
    _check_graph(data, report)
    _check_voice_actions(data, report)
    try:
        config = FlowConfig.model_validate(data)
    except ValidationError as e:
        for error in e.errors():
            if not error["loc"] and ("unknown node" in error["msg"] or "not a defined node" in error["msg"]):
                continue  # pipecat's placeless graph check: _check_graph reported it with its place
            where, message = _describe(data, error)
            report.add(where, message)
    report.raise_if_any()
    handlers = _import_handlers(handlers_ref, path, report)
    report.raise_if_any()
    try:
        flow = Flow(config, handlers=handlers if handlers is not None else {})
    except FlowReferenceError as e:
        for problem in e.problems:
            report.add(_problem_path(data, problem.node, problem.function), problem.message)
        report.raise_if_any()
    return LoadedFlow(path=path, config=config, flow=flow, filler=filler)


def _parse(path: Path, text: str) -> Any:
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.load(text, include_loader(path.parent))  # pipecat's include loader: a SafeLoader
    except json.JSONDecodeError as e:
        raise FlowFileError(path, [f"{path}:{e.lineno}: not valid JSON: {e.msg}"]) from None
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else "?"
        raise FlowFileError(path, [f"{path}:{line}: not valid YAML: {e.problem}"]) from None
    except (yaml.YAMLError, OSError) as e:
        raise FlowFileError(path, [f"{path}: cannot be read: {e}"]) from None


def _key_lines(text: str) -> dict[Path_, int]:
    """The 1-based line of every key and list item (JSON is YAML enough for this); {} if unparsable."""
    lines: dict[Path_, int] = {}

    def walk(node: yaml.Node, where: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*where, key.value)
                lines[here] = key.start_mark.line + 1
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[(*where, i)] = item.start_mark.line + 1
                walk(item, (*where, i))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _filler(raw: Any, report: _Report) -> Filler | None:
    if raw is False or raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"text", "after_s"}:
        report.add(("filler",), "must be a mapping with text and after_s (or false for no filler)")
        return None
    text = raw.get("text", DEFAULT_FILLER_TEXT)
    after_s = raw.get("after_s", DEFAULT_FILLER_AFTER_S)
    if not isinstance(text, str) or not text.strip():
        report.add(("filler", "text"), "must be a non-empty string")
    if isinstance(after_s, bool) or not isinstance(after_s, int | float) or not 0 <= after_s <= 10:
        report.add(("filler", "after_s"), f"must be a number of seconds in [0, 10], got {after_s!r}")
        return None
    return Filler(text=text, after_s=float(after_s))


def _functions(data: dict) -> list[tuple[Path_, Any]]:
    """Every function entry of the file, with its path."""
    found: list[tuple[Path_, Any]] = []
    global_functions = data.get("global_functions")
    for i, func in enumerate(global_functions if isinstance(global_functions, list) else []):
        found.append((("global_functions", i), func))
    nodes = data.get("nodes")
    for name, node in nodes.items() if isinstance(nodes, dict) else ():
        functions = node.get("functions") if isinstance(node, dict) else None
        for i, func in enumerate(functions if isinstance(functions, list) else []):
            found.append((("nodes", name, "functions", i), func))
    return found


def _check_graph(data: dict, report: _Report) -> None:
    """Unknown node names, placed at the key that names them (pipecat reports these without a place)."""
    nodes = data.get("nodes")
    if not isinstance(nodes, dict):
        return  # pipecat's schema reports a missing or malformed `nodes`
    known = ", ".join(map(str, nodes)) or "none"
    initial = data.get("initial_node")
    if isinstance(initial, str) and initial not in nodes:
        report.add(("initial_node",), f"unknown node {initial!r} (nodes: {known})")
    for where, func in _functions(data):
        target = func.get("transition_to") if isinstance(func, dict) else None
        if isinstance(target, str) and target not in nodes:
            report.add((*where, "transition_to"), f"unknown node {target!r} (nodes: {known})")
        elif isinstance(target, dict):
            cases = target.get("cases")
            for case, name in cases.items() if isinstance(cases, dict) else ():
                if isinstance(name, str) and name not in nodes:
                    report.add((*where, "transition_to", "cases", case), f"unknown node {name!r} (nodes: {known})")
            default = target.get("default")
            if isinstance(default, str) and default not in nodes:
                report.add((*where, "transition_to", "default"), f"unknown node {default!r} (nodes: {known})")


def _check_voice_actions(data: dict, report: _Report) -> None:
    nodes = data.get("nodes")
    for name, node in nodes.items() if isinstance(nodes, dict) else ():
        for key in ("pre_actions", "post_actions"):
            actions = node.get(key) if isinstance(node, dict) else None
            for i, action in enumerate(actions if isinstance(actions, list) else []):
                if not isinstance(action, dict) or action.get("type") != VOICE_ACTION:
                    continue
                where = ("nodes", name, key, i)
                fields = {k: v for k, v in action.items() if k != "type"}
                unknown = sorted(set(fields) - set(VOICE_KEYS))
                if unknown:
                    report.add(where, f"a voice action takes only {', '.join(VOICE_KEYS)}; "
                                      f"unknown: {', '.join(unknown)}")
                if not fields.keys() & set(VOICE_KEYS):
                    report.add(where, f"a voice action needs at least one of {', '.join(VOICE_KEYS)}")
                for k in VOICE_KEYS:
                    if k in fields and (not isinstance(fields[k], str) or not fields[k].strip()):
                        report.add((*where, k), f"must be a non-empty string, got {fields[k]!r}")


def _describe(data: Any, error: dict) -> tuple[Path_, str]:
    """A pydantic error as (the path of keys that exist in the file, a message)."""
    where: list[str | int] = []
    node = data
    for part in error["loc"]:
        in_mapping = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_mapping or in_list:
            node = node[part]
        else:
            break  # union member names and the like: not keys of the file
        where.append(part)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        message = f"missing key {error['loc'][-1]!r}"
    elif error["type"] == "extra_forbidden":
        message = "unknown key (not in pipecat's flow schema)"
    return tuple(where), message


def _import_handlers(ref: Any, path: Path, report: _Report) -> ModuleType | None:
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref.strip():
        report.add(("handlers",), "must name a Python module (a.b.c) or a .py file beside the flow file")
        return None
    try:
        if ref.endswith(".py"):
            file = (path.parent / ref).resolve()
            if not file.is_file():
                report.add(("handlers",), f"no such file {file}")
                return None
            spec = importlib.util.spec_from_file_location(f"cadence_flow_handlers.{file.stem}", file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(ref)
    except Exception as e:  # the user's module failed to import: say so at the key that names it
        report.add(("handlers",), f"cannot import {ref!r}: {type(e).__name__}: {e}")
        return None


def _problem_path(data: dict, node: str | None, function: str | None) -> Path_:
    """Where a pipecat FlowProblem (node, function) sits in the file."""
    for where, func in _functions(data):
        in_node = where[0] == "global_functions" if node is None else where[:2] == ("nodes", node)
        if in_node and isinstance(func, dict) and func.get("name") == function:
            return (*where, "name")
    return ("nodes", node) if node is not None else ()
