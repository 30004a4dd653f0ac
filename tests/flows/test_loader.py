"""Flow files: pipecat's schema plus handlers/filler/voice, validated with errors that name the file,
the line and the key of every problem."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from flows.loader import Filler, FlowFileError, load_flow

EXAMPLES = Path(__file__).resolve().parents[2] / "flows" / "examples"

GOOD = """\
handlers: flows.examples.booking
initial_node: ask
nodes:
  ask:
    task_messages:
      - role: developer
        content: Ask how many people.
    functions:
      - name: record_party_size
        transition_to: done
  done:
    task_messages:
      - role: developer
        content: Say goodbye.
"""


def write(tmp_path: Path, text: str, name: str = "flow.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(FlowFileError) as e:
        load_flow(path)
    assert str(path) in str(e.value)
    return e.value.problems


def line_of(path: Path, fragment: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)


@pytest.mark.parametrize("name", ["restaurant_booking.yaml", "support_triage.yaml"])
def test_the_example_flows_load_with_their_tools_described_by_their_code(name):
    loaded = load_flow(EXAMPLES / name)
    first = loaded.flow.initial_node
    assert first["name"] == loaded.config.initial_node
    tool = first["functions"][0]
    assert tool.description and tool.required and all(p["description"] for p in tool.properties.values())
    assert isinstance(loaded.filler, Filler) and 0 < loaded.filler.after_s < 1


def test_a_good_file_loads_and_a_json_twin_loads_the_same(tmp_path):
    import yaml

    yaml_flow = load_flow(write(tmp_path, GOOD))
    json_path = tmp_path / "flow.json"
    json_path.write_text(json.dumps(yaml.safe_load(GOOD), indent=1))
    json_flow = load_flow(json_path)
    assert yaml_flow.config == json_flow.config
    assert yaml_flow.filler == Filler()  # the default filler when the file names none


def test_an_unknown_node_is_named_with_its_line_and_key(tmp_path):
    path = write(tmp_path, GOOD.replace("transition_to: done", "transition_to: dnoe"))
    (problem,) = problems(path)
    assert problem == (f"{path}:{line_of(path, 'dnoe')}: nodes.ask.functions[0].transition_to: "
                       "unknown node 'dnoe' (nodes: ask, done)")


def test_an_unknown_node_in_json_is_placed_too(tmp_path):
    data = {"initial_node": "a", "nodes": {"a": {"task_messages": [{"role": "developer", "content": "x"}],
                                                 "functions": [{"name": "go", "transition_only": True,
                                                                "description": "go on", "transition_to": "b"}]}}}
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(data, indent=2))
    (problem,) = problems(path)
    line = line_of(path, '"transition_to": "b"')
    assert problem.startswith(f"{path}:{line}: nodes.a.functions[0].transition_to")
    assert "unknown node 'b'" in problem


def test_an_unknown_initial_node_and_branch_targets_are_all_reported(tmp_path):
    text = GOOD.replace("initial_node: ask", "initial_node: start").replace(
        "transition_to: done", "transition_to:\n          field: status\n          cases:\n"
        "            ok: done\n            bad: nowhere\n          default: elsewhere")
    path = write(tmp_path, text)
    found = problems(path)
    assert found == [
        f"{path}:2: initial_node: unknown node 'start' (nodes: ask, done)",
        f"{path}:{line_of(path, 'nowhere')}: nodes.ask.functions[0].transition_to.cases.bad: "
        "unknown node 'nowhere' (nodes: ask, done)",
        f"{path}:{line_of(path, 'elsewhere')}: nodes.ask.functions[0].transition_to.default: "
        "unknown node 'elsewhere' (nodes: ask, done)",
    ]


def test_a_function_missing_from_the_handlers_is_named_at_its_entry(tmp_path):
    path = write(tmp_path, GOOD.replace("name: record_party_size", "name: record_party_sise"))
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:{line_of(path, 'record_party_sise')}: nodes.ask.functions[0].name: ")
    assert "'record_party_sise', which is not in the handlers" in problem


def test_bad_schema_names_each_key(tmp_path):
    text = GOOD.replace("        content: Say goodbye.\n", "").replace(
        "  done:\n", "  done:\n    respond_immediately: maybe\n    colour: blue\n")
    path = write(tmp_path, text)
    found = problems(path)
    assert any(p.startswith(f"{path}:{line_of(path, 'maybe')}: nodes.done.respond_immediately: ") for p in found)
    assert f"{path}:{line_of(path, 'colour')}: nodes.done.colour: unknown key (not in pipecat's flow schema)" in found
    last_role = max(i for i, line in enumerate(path.read_text().splitlines(), 1) if "role: developer" in line)
    assert f"{path}:{last_role}: nodes.done.task_messages[0]: missing key 'content'" in found
    assert len(found) == 3, found


def test_a_missing_nodes_key_and_a_non_mapping_file_are_refused(tmp_path):
    (problem,) = problems(write(tmp_path, "handlers: flows.examples.booking\ninitial_node: a\n"))
    assert problem.endswith("(top level): missing key 'nodes'")
    (problem,) = problems(write(tmp_path, "- just\n- a list\n"))
    assert "the top level must be a mapping" in problem


def test_broken_yaml_and_json_give_the_line(tmp_path):
    (problem,) = problems(write(tmp_path, "initial_node: a\nnodes:\n  a: [1,\n"))
    assert problem.startswith(f"{tmp_path / 'flow.yaml'}:4: not valid YAML")
    path = tmp_path / "flow.json"
    path.write_text('{\n  "initial_node": "a",\n  "nodes": {,}\n}\n')
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:3: not valid JSON")


def test_handlers_must_import(tmp_path):
    path = write(tmp_path, GOOD.replace("flows.examples.booking", "flows.examples.no_such_module"))
    (problem,) = problems(path)
    assert problem.startswith(f"{path}:1: handlers: cannot import 'flows.examples.no_such_module': "
                              "ModuleNotFoundError")


def test_handlers_may_be_a_python_file_beside_the_flow(tmp_path):
    (tmp_path / "tools.py").write_text(textwrap.dedent('''
        from pipecat.flows import TRANSITION_IN_YAML

        async def record_party_size(flow_manager, party_size: int):
            """Record the party size.

            Args:
                party_size: How many guests.
            """
            return {"party_size": party_size}, TRANSITION_IN_YAML
    '''))
    loaded = load_flow(write(tmp_path, GOOD.replace("flows.examples.booking", "tools.py")))
    assert loaded.flow.initial_node["functions"][0].properties == {
        "party_size": {"type": "integer", "description": "How many guests."}}
    (problem,) = problems(write(tmp_path, GOOD.replace("flows.examples.booking", "missing.py"), "other.yaml"))
    assert "handlers: no such file" in problem


def test_voice_actions_and_the_filler_are_checked(tmp_path):
    text = GOOD.replace("handlers: flows.examples.booking\n",
                        "handlers: flows.examples.booking\nfiller:\n  text: Hold on.\n  after_s: -1\n").replace(
        "  done:\n", "  done:\n    pre_actions:\n      - type: voice\n        colour: blue\n"
        "      - type: voice\n        voice: 7\n")
    path = write(tmp_path, text)
    found = problems(path)
    assert found == [
        f"{path}:{line_of(path, 'after_s')}: filler.after_s: must be a number of seconds in [0, 10], got -1",
        f"{path}:{line_of(path, 'type: voice')}: nodes.done.pre_actions[0]: a voice action takes only voice, "
        "language, instructions; unknown: colour",
        f"{path}:{line_of(path, 'type: voice')}: nodes.done.pre_actions[0]: a voice action needs at least one of "
        "voice, language, instructions",
        f"{path}:{line_of(path, 'voice: 7')}: nodes.done.pre_actions[1].voice: must be a non-empty string, got 7",
    ]


def test_a_missing_file_is_a_file_not_found_error_and_binary_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_flow(tmp_path / "nope.yaml")
    binary = tmp_path / "flow.yaml"
    binary.write_bytes(b"initial_node: \xff\xfe\n")
    (problem,) = problems(binary)
    assert "not UTF-8 text" in problem


def test_a_filler_can_be_turned_off(tmp_path):
    assert load_flow(write(tmp_path, "filler: false\n" + GOOD)).filler is None
