"""Repository contracts: CI runs exactly the README's test command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.strip() == "```bash"]


def test_readme_has_two_commands_and_ci_runs_the_test_one():
    commands = _readme_commands()
    assert len(commands) == 2
    main, tests = commands
    assert "cadence" in main and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_readme_stays_under_800_words():
    assert len((ROOT / "README.md").read_text().split()) < 800


def test_docs_are_documentation_not_a_notebook():
    """The standing figures live in docs/performance.md; history lives in git."""
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "docs").glob("*.md"))
    assert lines < 1500, lines
    assert len((ROOT / "docs" / "performance.md").read_text().splitlines()) < 200
    results = sum(p.stat().st_size for p in (ROOT / "bench" / "results").rglob("*") if p.is_file())
    assert results < 2 * 1024 * 1024, results


def _imports(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_engine_imports_none_of_its_clients():
    """Clients (agent, transports, flows, bench, web) depend on the engine, never the reverse."""
    clients = {"agent", "transports", "flows", "bench", "web"}
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & clients)
                 for p in (ROOT / "tts_engine").rglob("*.py") if _imports(p) & clients}
    assert not offenders


def test_the_scheduling_policy_imports_no_torch():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "tts_engine" / "scheduler").rglob("*.py")
                 if {"torch", "triton", "numpy"} & _imports(p)]
    assert not offenders


def test_the_clients_load_no_engine_when_it_is_remote():
    """The agent, the demo and the phone reach a remote engine through its API: importing them loads
    no torch (the GPU machine's agent runs them from a bare tree; a phone front end needs no model)."""
    code = "import sys, agent.cli, agent.demo, agent.server, transports.phone; sys.exit('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:] or "torch was imported"


def test_no_empty_packages():
    """A package holds real code or does not exist."""
    for init in ROOT.glob("*/__init__.py"):
        package = init.parent
        code = [p for p in package.rglob("*.py") if p.name != "__init__.py" or p.read_text().strip()]
        assert code, f"{package.name}/ is an empty package"


def test_no_run_numbers_in_code():
    """Comments say why in the present tense; the figures and their history live in docs and git."""
    import re

    pattern = re.compile(r"\b(run|Run|Version) \d+\b")
    offenders = [f"{p.relative_to(ROOT)}:{i}" for folder in ("tts_engine", "agent", "transports", "flows", "bench")
                 for p in (ROOT / folder).rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders[:20]
