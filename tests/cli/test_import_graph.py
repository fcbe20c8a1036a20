"""The cli package's import graph is a tree (issue 7: the admin <-> topics/groups circle):
main -> admin -> tools -> common -> client. Checked on the sources and in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pybroker.cli

CLI_DIR = Path(pybroker.cli.__file__).parent


def cli_imports(path: Path) -> set[str]:
    """The pybroker.cli modules a source file imports (at any depth of the file)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "pybroker.cli":
                out |= {f"pybroker.cli.{a.name}" for a in node.names}
            elif node.module.startswith("pybroker.cli."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("pybroker.cli.")}
    return out


def test_no_cli_module_imports_the_dispatcher_and_common_imports_no_tool():
    graph = {f"pybroker.cli.{p.stem}": cli_imports(p) for p in CLI_DIR.glob("*.py") if p.stem != "__init__"}
    assert graph["pybroker.cli.common"] == set()
    importers = {m for m, deps in graph.items() if "pybroker.cli.admin" in deps}
    assert importers == {"pybroker.cli.main"}

    # and there is no cycle anywhere in the package
    def visit(m: str, stack: tuple[str, ...]) -> None:
        assert m not in stack, " -> ".join((*stack, m))
        for d in graph.get(m, ()):
            visit(d, (*stack, m))

    for m in graph:
        visit(m, ())


def test_a_tool_module_imports_on_its_own():
    code = ("import sys, pybroker.cli.topics, pybroker.cli.groups, pybroker.cli.configs; "
            "print('pybroker.cli.admin' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, "False"), r.stderr
