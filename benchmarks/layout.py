"""The package's layout as numbers, for a checkout at any commit: root modules, the largest functions (lines and
cyclomatic complexity: the run's, in ``run.py`` and its stage modules, and the package's), import circles (lazy
imports included, ``if TYPE_CHECKING:`` ones not) and the imports that run against the rooms of
``tests/test_layout.py`` (a module's room read from where it lives now, or, for a commit before the rooms, from where
its code moved).

    python benchmarks/layout.py                  # this checkout
    python benchmarks/layout.py --at <commit>    # another commit (read with git show, nothing checked out)
    python benchmarks/layout.py --at <commit> --json <file>
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from test_layout import CONFIG_GROUPS, ROOMS, find_cycles  # noqa: E402

# where each module of the flat root went (the rooms' commit): its room
ROOT_MODULE_ROOMS = {
    "errors": "core", "secrets": "core", "component": "core", "console": "core", "methods": "core",
    "distributed": "core", "run_folder": "core", "checkpoints": "core", "hydra_support": "core",
    "config_help": "core", "lifecycle": "runtime", "assembly": "runtime", "evaluation": "runtime",
    "callbacks": "runtime", "requirements": "runtime", "launcher": "multirun", "sweep_grid": "multirun",
    "report": "study", "trl_phases": "groups",
}  # fmt: skip
ENTRY_POINTS = {"__init__", "__main__", "run"}


def sources(commit: str | None) -> dict[str, str]:
    """{file path: source} of the socratic_exp package at ``commit`` (None: the working tree)."""
    if commit is None:
        return {str(p.relative_to(REPO)): p.read_text() for p in (REPO / "socratic_exp").rglob("*.py")}
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "socratic_exp"], cwd=REPO, text=True,
                           capture_output=True, check=True).stdout.split()  # fmt: skip
    return {
        f: subprocess.run(["git", "show", f"{commit}:{f}"], cwd=REPO, text=True, capture_output=True, check=True).stdout
        for f in files
        if f.endswith(".py")
    }


def name(path: Path) -> str:
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def running_imports(source: str, modules: set[str]) -> set[str]:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            node.body = [ast.Pass()]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m in modules}


def room(module: str, rooms_exist: bool) -> str | None:
    """A module's room; None for an entry point (with rooms, every root module is one)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[-1] == "__main__":
        return None
    if len(parts) == 2 and parts[1] in {*ROOMS, *CONFIG_GROUPS}:  # a room's or a group's package
        return "groups" if parts[1] in CONFIG_GROUPS else parts[1]
    if len(parts) == 2:  # a module at the root: an entry point, or one that has moved into a room since
        return None if parts[1] in ENTRY_POINTS or rooms_exist else ROOT_MODULE_ROOMS[parts[1]]
    return "groups" if parts[1] in CONFIG_GROUPS else parts[1]


def functions(source: str) -> list[tuple[str, int, int]]:
    """(name, lines, cyclomatic complexity) of each function: 1 + its branch points (if, loops, except, with, assert,
    conditional expressions, comprehensions, each extra operand of and/or), nested functions included."""
    result = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            branches = sum(
                isinstance(n, ast.If | ast.For | ast.While | ast.AsyncFor | ast.ExceptHandler | ast.With | ast.Assert
                           | ast.IfExp | ast.comprehension) or (isinstance(n, ast.BoolOp) and len(n.values) - 1)
                for n in ast.walk(node)
            )  # fmt: skip
            result.append((node.name, node.end_lineno - node.lineno + 1, 1 + branches))
    return result


def measure(commit: str | None) -> dict:
    files = sources(commit)
    rooms_exist = any(f.startswith("socratic_exp/core/") for f in files)
    code = {name(Path(f)): source for f, source in files.items()}
    modules = set(code)
    root = sorted(Path(f).stem for f in files if Path(f).parent == Path("socratic_exp"))
    graph = {m: running_imports(s, modules) for m, s in code.items()}
    rooms = {m: room(m, rooms_exist) for m in modules}
    upward = sorted(
        f"{m} -> {i}"
        for m, imported in graph.items()
        if rooms[m] is not None
        for i in imported
        if rooms[i] not in {rooms[m], *ROOMS[rooms[m]]} and i != "socratic_exp"
    )
    run_modules = [m for m in code if m == "socratic_exp.run" or m.startswith("socratic_exp.runtime.stages.")]
    run_functions = sorted(
        ((f"{m.rsplit('.', 1)[1]}.{n}", lines, cx) for m in run_modules for n, lines, cx in functions(code[m])),
        key=lambda f: -f[1],
    )
    largest = sorted(
        ((f"{m}.{n}", lines, cx) for m, s in code.items() for n, lines, cx in functions(s)), key=lambda f: -f[1]
    )
    return {
        "commit": commit or "working tree",
        "root_modules": root,
        "root_module_count": len(root),
        "run_largest_function": {
            "name": run_functions[0][0],
            "lines": run_functions[0][1],
            "complexity": run_functions[0][2],
        },
        "largest_functions": [{"name": n, "lines": lines, "complexity": cx} for n, lines, cx in largest[:5]],
        "import_circles": find_cycles(graph),
        "imports_against_the_rooms": upward,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", help="a commit (default: the working tree)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    figures = measure(args.at)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{figures['commit']}: {figures['root_module_count']} root modules; the run's largest function "
          f"{figures['run_largest_function']}; {len(figures['import_circles'])} import circles; "
          f"{len(figures['imports_against_the_rooms'])} imports against the rooms")  # fmt: skip
    print("\n".join("  circle: " + " -> ".join(circle) for circle in figures["import_circles"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
