"""The package's layout: nothing below ``run.py`` imports it, no import cycles, one package per method."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "socratic_exp"
# every algorithm folder, as the package finds them (its declarations): a new one is checked without an edit here
METHODS = tuple(sorted(folder.parent.name for folder in (PACKAGE / "algorithms").glob("*/declaration.py")))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool) -> set[str]:
    """The socratic_exp modules ``path`` imports (``from a import b`` counts as ``a`` and, if a module, ``a.b``)."""
    return imports_in(ast.parse(path.read_text()), top_level_only)


def imports_in(tree: ast.Module, top_level_only: bool) -> set[str]:
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If) and top_level_only:  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {name for name in found if name in modules and name.startswith("socratic_exp")}


def test_nothing_below_run_imports_run():
    offenders = [
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if module_name(path) not in ("socratic_exp.run", "socratic_exp.__main__")
        and "socratic_exp.run" in imports(path, top_level_only=False)
    ]
    assert offenders == []


STAGES = {  # the run's stages in order: the module of runtime/stages/ and its one function
    "compose": "compose_and_validate",
    "build": "build",
    "evaluate_before": "evaluate_before",
    "train": "train",
    "evaluate_after": "evaluate_after_and_write",
}


def test_the_run_calls_its_five_stages_in_order_each_from_its_own_module():
    tree = ast.parse((PACKAGE / "run.py").read_text())
    source_of = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    calls = [
        node.func.id
        for function in tree.body
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in STAGES.values()
    ]
    assert calls == list(STAGES.values())
    assert [source_of[name] for name in calls] == [f"socratic_exp.runtime.stages.{module}" for module in STAGES]
    for module, function in STAGES.items():
        stage = ast.parse((PACKAGE / "runtime" / "stages" / f"{module}.py").read_text())
        defined = {node.name: node for node in stage.body if isinstance(node, ast.FunctionDef)}
        length = defined[function].end_lineno - defined[function].lineno + 1
        assert length <= 40, f"{module}.{function}: {length} lines, too long to read at a glance"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            cycles.append([*stack[stack.index(node) :], node])
            return
        for child in sorted(graph.get(node, ())):
            if child not in done:
                visit(child, [*stack, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_at_module_level():
    graph = {module_name(p): imports(p, top_level_only=True) for p in PACKAGE.rglob("*.py")}
    assert sum(map(len, graph.values())) > 50  # the graph was read
    assert find_cycles(graph) == []


def test_every_algorithm_folder_is_found():
    assert {"grpo", "entropy_masked", "socraticpo", "socratic_rl", "sdpo", "vpd", "reinforce_pp"} <= set(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_is_a_package_with_its_settings_build_and_declaration(method):
    """Its settings (``config.py``), what builds its trainer (``build.py``, ``BUILD``) and its declaration; the
    settings and the build import nothing heavy at module level (composing a config, and a dry run, stay light)."""
    folder = PACKAGE / "algorithms" / method
    for name in ("__init__.py", "config.py", "build.py", "declaration.py"):
        assert (folder / name).is_file(), f"{method}/{name}"
    for name in ("config.py", "build.py"):
        tree = ast.parse((folder / name).read_text())
        top = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        top |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
        heavy = {module for module in top if module.split(".")[0] in ("torch", "transformers", "trl", "wandb")}
        assert heavy == set(), f"{method}/{name}"
    assert any(
        isinstance(n, ast.Assign) and n.targets[0].id == "BUILD"
        for n in ast.parse((folder / "build.py").read_text()).body
    )


def test_trainer_modules_import_without_run():
    """Every trainer class is at module level, importable by name, and importing it does not pull in run.py."""
    trainers = sorted(module_name(p) for p in (PACKAGE / "algorithms").glob("*/trainer.py"))
    assert len(trainers) >= 5
    code = "\n".join(
        [
            "import importlib, inspect, sys",
            f"for name in {trainers!r}:",
            "    module = importlib.import_module(name)",
            "    classes = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == name]",
            "    assert any(c.__name__.endswith('Trainer') for c in classes), name",
            "assert 'socratic_exp.run' not in sys.modules",
            "print('ok')",
        ]
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


# --- one folder owns each method ---------------------------------------------------------------------------------
METHOD_GROUPS = ("algorithms", "samplers")
BASE_ALGORITHM = "grpo"  # TRL's GRPO, which every algorithm extends: its name is also TRL's loss type and the baseline


def method_folders() -> dict[str, Path]:
    return {
        folder.name: folder
        for group in METHOD_GROUPS
        for folder in sorted((PACKAGE / group).iterdir())
        if (folder / "__init__.py").is_file()
    }


def owned_by(path: Path) -> str | None:
    """The method whose folder holds ``path``."""
    relative = path.relative_to(PACKAGE).parts
    return relative[1] if relative[0] in METHOD_GROUPS and len(relative) > 2 else None


def method_mentions(source: str, names: list[str]) -> list[tuple[int, str]]:
    """(line, token) of each mention of a method's option name: in an identifier (any case: ``plot_socraticpo``,
    ``SOCRATICPO_TEMPLATE``), or written lower-case in a string or comment (a metric prefix ``vpd/``, an option
    ``sampler=goldilocks``, an arm ``socratic_rl_kl``). A paper's name in prose (SocraticPO, VPD) is a citation."""
    import io
    import re
    import tokenize

    pattern = re.compile(r"(?<![a-z0-9])(" + "|".join(map(re.escape, names)) + ")")
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = token.string.lower() if token.type == tokenize.NAME else token.string
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT) and pattern.search(text):
            found.append((token.start[0], token.string))
    return found


def test_the_mention_finder_finds_option_names_not_paper_names():
    source = '''"""SocraticPO and VPD, cited."""
x = plot_socraticpo(records)  # shows sdpo/ metrics
KEY = "vpd_dynamic"
SOCRATICPO_TEMPLATE = "Socratic-RL says"
y = "entropy_masking"  # not a method: entropy_masked is
'''
    found = method_mentions(source, ["socraticpo", "vpd", "sdpo", "entropy_masked"])
    assert found == [(2, "plot_socraticpo"), (2, "# shows sdpo/ metrics"), (3, '"vpd_dynamic"'),
                     (4, "SOCRATICPO_TEMPLATE"), (5, "# not a method: entropy_masked is")]  # fmt: skip


def test_no_shared_module_names_a_method():
    """Console, report, study, run, callbacks, teachers, tasks...: what a method is lives in its folder, found there
    by ``socratic_exp.core.methods``; so adding a method touches its folder, its YAMLs and its docs page only."""
    folders = method_folders()
    assert {"socraticpo", "vpd", "sdpo", "socratic_rl", "entropy_masked", "goldilocks"} <= set(folders)
    names = [name for name in folders if name != BASE_ALGORITHM]
    shared = [p for p in PACKAGE.rglob("*.py") if owned_by(p) is None]
    assert len(shared) > 60
    offenders = {
        str(path.relative_to(PACKAGE)): mentions
        for path in shared
        if (mentions := method_mentions(path.read_text(encoding="utf-8"), names))
    }
    assert offenders == {}


def test_every_method_folder_declares_itself_and_is_found():
    """Each folder under ``algorithms/`` and ``samplers/`` declares its method (``declaration.METHOD``, named after
    the folder), and the run and the study find every declaration: the six papers' with their claims."""
    from socratic_exp.core.methods import in_order
    from socratic_exp.runtime.methods import declared_methods

    methods = declared_methods()  # the algorithms, then the samplers, each by folder name
    assert [method.name for method in methods] == [
        "entropy_masked", "grpo", "reinforce_pp", "sdpo", "socratic_rl", "socraticpo", "vpd", "goldilocks",
    ]  # fmt: skip
    assert [method.name for method in in_order(methods) if method.claims] == [
        "socraticpo", "sdpo", "vpd", "entropy_masked", "goldilocks", "socratic_rl",
    ]  # fmt: skip
    assert {method.name for method in methods} == set(method_folders())
    assert sorted(method.name for method in methods if method.premises is not None) == [
        "entropy_masked", "goldilocks", "sdpo", "socratic_rl", "socraticpo",
    ]  # fmt: skip


def computed_imports(tree: ast.Module) -> list[str]:
    """The functions of ``tree`` that import a module by a name computed at run time (``importlib.import_module``,
    ``__import__``): ``<function>``, or ``<module level>``."""
    found = []
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in ("importlib.import_module", "import_module", "__import__") and not (
            node.args and isinstance(node.args[0], ast.Constant)
        ):
            inside = [f.name for f in functions if f.lineno <= node.lineno <= f.end_lineno]
            found.append(inside[-1] if inside else "<module level>")
    return found


def test_the_computed_import_finder_finds_one():
    tree = ast.parse("import importlib\ndef f(x):\n    return importlib.import_module(x)\nimportlib.import_module('a')")
    assert computed_imports(tree) == ["f"]


# Every import by a computed name, with why it may: a method's module is found through its group's package only
COMPUTED_IMPORTS = {
    "socratic_exp.algorithms:declared": "the algorithm folders' declarations, its own folders",
    "socratic_exp.samplers:declared": "the sampler folders' declarations, its own folders",
    "socratic_exp.algorithms:builder": "the build.py beside a settings class, in its own folders",
    "socratic_exp.core.config_help:_option_class": "--help: the _target_ class a config names, as Hydra builds it",
    "socratic_exp.core.console:import_quietly": "a library's module with its import-time prints swallowed",
    "socratic_exp.tasks.benchmark:eval_set_task": "a task's evaluation set, a task class of its own group",
}


def test_no_module_imports_by_a_computed_name_but_the_ones_that_say_why():
    """So the imports the layout tests read are the package's real ones: the core, the study and the console find
    no method by name (they read the declarations the groups hand them)."""
    found = {
        f"{module_name(path)}:{function}"
        for path in PACKAGE.rglob("*.py")
        for function in computed_imports(ast.parse(path.read_text()))
    }
    assert found == set(COMPUTED_IMPORTS)


CONCRETE_TEACHERS = {f"socratic_exp.teachers.{option}" for option in ("none", "llm", "rule", "blackbox")}


def test_only_the_teachers_package_names_a_teacher_class():
    """Algorithms and the run ask a teacher what it can do (``teachers.base.Teacher``'s interface); the class itself
    is named only in conf/teacher/, where Hydra builds it."""
    offenders = sorted(
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if not module_name(path).startswith("socratic_exp.teachers.")
        and imports(path, top_level_only=False) & CONCRETE_TEACHERS
    )
    assert offenders == []


def test_shared_modules_do_not_reach_into_a_method():
    """A module outside ``algorithms/`` imports no method's package (``algorithms.base`` and ``algorithms.trl_batch``
    are shared), and none outside ``samplers/<option>/`` imports that sampler's package. (One method's package may
    build on another's: a cross-method dependency, not a shared module's.)"""
    methods = [f"socratic_exp.algorithms.{method}" for method in METHODS]
    samplers = [module_name(p) for p in (PACKAGE / "samplers").glob("*/__init__.py")]

    def within(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        own = [*methods] if within(name, "socratic_exp.algorithms") else []
        if owned_by(path) is not None:
            own.append(f"socratic_exp.algorithms.{owned_by(path)}")
        packages = [package for package in [*methods, *samplers] if package not in own and not within(name, package)]
        found = {i for i in imports(path, top_level_only=False) if any(within(i, package) for package in packages)}
        if found:
            offenders[name] = sorted(found)
    assert samplers and offenders == {}


# --- rooms: what each part of the package owns and may import -------------------------------------------------------
# The package root holds the entry points only; every other module lives in a room, and a room imports only the rooms
# below it (lazy imports included; ``if TYPE_CHECKING:`` imports never run and do not count). A command's
# ``__main__.py`` inside a room is an entry point too, like the root's modules.
ROOT_MODULES = {
    "__init__": "the package",
    "__main__": "python -m socratic_exp: the Hydra app",
    "run": "one run, as its five stages",
    "report": "python -m socratic_exp.report: the study's report command",
}
MAX_ROOT_MODULES = 8
CONFIG_GROUPS = ("tasks", "models", "teachers", "samplers", "distillers", "loggers", "algorithms")
ROOMS = {  # a room: the rooms it may import besides its own
    "core": set(),
    "groups": {"core"},  # the config groups (CONFIG_GROUPS), which build on each other
    "runtime": {"core", "groups"},
    "study": {"core", "groups", "runtime"},
    "multirun": {"core", "groups", "runtime", "study"},
}


def running_imports(path: Path) -> set[str]:
    """The socratic_exp modules ``path`` imports anywhere (functions included), except under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            node.body = [ast.Pass()]
    return imports_in(tree, top_level_only=False)


def room_of(module: str) -> str | None:
    """The room of a module, or None for an entry point (a root module or a command's ``__main__``)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[-1] == "__main__" or (len(parts) == 2 and not (PACKAGE / parts[1]).is_dir()):
        return None
    return "groups" if parts[1] in CONFIG_GROUPS else parts[1]


def test_the_package_root_holds_entry_points_only():
    """A new module at the root is a decision: put it in the room it serves."""
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == sorted(ROOT_MODULES)
    assert len(ROOT_MODULES) <= MAX_ROOT_MODULES


@pytest.mark.parametrize("room", sorted(set(ROOMS) - {"groups"}))
def test_each_room_says_what_it_owns_and_may_import(room):
    doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    assert "Owns" in doc and "May import" in doc, doc
    allowed = ROOMS[room]
    may_import = doc.split("May import", 1)[1].split("never", 1)[0]
    for other in set(ROOMS) - {room}:
        named = f"``{other}``" in may_import if other != "groups" else "config groups" in may_import
        assert named == (other in allowed), (room, other)


def test_every_module_lives_in_a_room():
    rooms = {room_of(module_name(p)) for p in PACKAGE.rglob("*.py")} - {None}
    assert rooms == set(ROOMS)


def test_a_room_imports_only_the_rooms_below_it():
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        room = room_of(module_name(path))
        if room is None:
            continue
        allowed = {room, *ROOMS[room]}
        wrong = sorted(i for i in running_imports(path) if room_of(i) not in allowed and i != "socratic_exp")
        if wrong:
            offenders[module_name(path)] = wrong
    assert offenders == {}


def test_rooms_are_read_from_module_names():
    assert room_of("socratic_exp.runtime.assembly") == "runtime"
    assert room_of("socratic_exp.models.memory.__main__") is None
    assert room_of("socratic_exp.algorithms.grpo.config") == "groups"
    assert room_of("socratic_exp.algorithms.vpd.evidence") == "groups"
    assert room_of("socratic_exp.tasks") == "groups"
    assert room_of("socratic_exp.run") is None
    assert "socratic_exp.runtime" not in ROOMS["groups"]  # so models -> runtime.assembly is an offence


def test_no_import_circle_lazy_imports_included():
    graph = {module_name(p): running_imports(p) for p in PACKAGE.rglob("*.py")}
    assert sum(map(len, graph.values())) > 100
    assert find_cycles(graph) == []


def test_a_config_holds_settings_and_imports_no_trainer_nor_the_runtime():
    """A method's ``config.py`` holds its settings and their checks: what builds the trainer is its ``build.py``, and
    no config group imports the runtime's types (``if TYPE_CHECKING:`` imports included)."""
    configs = sorted((PACKAGE / "algorithms").glob("*/config.py")) + sorted((PACKAGE / "samplers").glob("*/config.py"))
    assert len(configs) >= 8
    trainers = {
        f"{module_name(path)}: {name}"
        for path in configs
        for name in imports(path, top_level_only=False)  # lazy and `if TYPE_CHECKING:` imports too
        if name.endswith(("trainer", ".build")) or name.startswith("socratic_exp.runtime")
    }
    assert trainers == set()
    groups = [p for p in PACKAGE.rglob("*.py") if room_of(module_name(p)) == "groups"]
    runtime_types = sorted(
        module_name(path)
        for path in groups
        if any(name.startswith("socratic_exp.runtime") for name in imports(path, top_level_only=False))
    )
    assert runtime_types == []


def test_generation_lives_under_models_and_secrets_in_one_module():
    """Teachers, distillers and the study generate with ``models.generation`` (not through the evaluation), and only
    ``secrets.py`` defines how a secret is redacted."""
    generation_users = {
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if "socratic_exp.models.generation" in imports(p, top_level_only=False)
    }
    assert {
        "socratic_exp.runtime.evaluation",
        "socratic_exp.teachers.llm",
        "socratic_exp.study.premises",
    } <= generation_users
    through_evaluation = sorted(
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if module_name(p).startswith(("socratic_exp.teachers", "socratic_exp.distillers", "socratic_exp.study"))
        and "socratic_exp.runtime.evaluation" in imports(p, top_level_only=False)
    )
    assert through_evaluation == []
    redactors = sorted(
        f"{module_name(p)}.{node.name}"
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef)
        and ("redact" in node.name or "scrub" in node.name)
        and module_name(p) != "socratic_exp.core.secrets"
    )
    assert redactors == []


# --- tests follow the package ------------------------------------------------------------------------------------
def test_each_method_folders_tests_are_named_after_it():
    """A method's tests are ``tests/test_<folder name>*.py``, and each of those files imports that folder's code (so a
    name does not promise tests that are elsewhere)."""
    tests = Path(__file__).resolve().parent
    for method, folder in method_folders().items():
        files = sorted(tests.glob(f"test_{method}*.py"))
        assert files, f"no tests/test_{method}*.py for {folder.relative_to(PACKAGE.parent)}"
        package = module_name(folder / "__init__.py")
        for file in files:
            assert package in file.read_text(), f"{file.name} does not import {package}"


MOST_LINES = 60  # a function longer than this is split into named steps


def long_functions(tree: ast.Module, where: str) -> list[str]:
    """The functions and methods of ``tree`` longer than ``MOST_LINES`` lines (signature and docstring included)."""
    return [f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > MOST_LINES]  # fmt: skip


def test_the_length_finder_counts_a_functions_lines():
    fits = "def fits():\n" + "".join(f"    x{i} = {i}\n" for i in range(59))  # 60 lines with its def
    over = "class A:\n    def over(self):\n" + "".join(f"        x{i} = {i}\n" for i in range(60))
    assert long_functions(ast.parse(fits), "a.py") == []
    assert long_functions(ast.parse(over), "a.py") == ["a.py:2 over (61 lines)"]


def test_no_function_is_longer_than_60_lines():
    found = [line for path in sorted(PACKAGE.rglob("*.py"))
             for line in long_functions(ast.parse(path.read_text()), str(path.relative_to(PACKAGE)))]  # fmt: skip
    assert found == []
