"""The tools of benchmarks/: every name each one imports from the package or from a sibling tool exists (a renamed
module or function fails here, not in front of the next developer who measures), and the tools that judge a change
(the layout's figures, the same-values comparison, the default run) run here. The GPU smoke, the resolver and the
vLLM benchmark have tests of their own (test_gpu_smoke, test_install_extras, test_vllm)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys

import pytest
from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
TOOLS = sorted(BENCHMARKS.glob("*.py"))
SIBLINGS = {path.stem for path in TOOLS}


def imported_names(source: str) -> list[tuple[str, str | None]]:
    """(module, name) for each import of the package or of a sibling tool, at the top or inside a function
    (``import a.b``: (``a.b``, None))."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root == "socratic_exp" or root in SIBLINGS:
                found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "socratic_exp"]
    return found


def test_the_import_reader_finds_lazy_imports_and_sibling_tools():
    source = (
        "import json\nfrom socratic_exp.core import errors\nfrom paired_trainers import build_trainers\n"
        "def f():\n    import socratic_exp.runtime.assembly\n    from trl import GRPOTrainer\n"
    )
    assert imported_names(source) == [
        ("socratic_exp.core", "errors"),
        ("paired_trainers", "build_trainers"),
        ("socratic_exp.runtime.assembly", None),
    ]


def test_benchmarks_holds_the_tools_and_each_says_what_it_measures():
    assert {"layout", "same_values", "mutation", "resolve_extras", "vllm_cpu", "default_run"} <= SIBLINGS
    for path in TOOLS:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.name}: a tool says what it measures in its docstring"


@pytest.mark.parametrize("path", TOOLS, ids=[p.name for p in TOOLS])
def test_every_name_a_tool_imports_exists(path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # a tool run from benchmarks/ imports its siblings
    missing = []
    for module, name in imported_names(path.read_text(encoding="utf-8")):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            try:  # a submodule imported by name (from socratic_exp.core import errors)
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module}.{name}")
    assert missing == [], f"{path.name} imports what does not exist: {missing}"


def tool(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_layout_tool_reads_this_checkout(tmp_path):
    done = tool("benchmarks/layout.py", "--json", str(tmp_path / "layout.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads((tmp_path / "layout.json").read_text())
    assert figures["import_circles"] == []
    assert figures["root_module_count"] == 4


def test_same_values_tells_equal_records_from_changed_ones(tmp_path):
    record = {"grpo": {"metrics": [{"loss": 0.5, "train/step_time_s": 1.0}, {"loss": 0.25}], "final": {"acc": 0.5}}}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(record))
    record["grpo"]["metrics"][0]["train/step_time_s"] = 9.0  # a clock: not a value the code computes
    after.write_text(json.dumps(record))
    same = tool("benchmarks/same_values.py", "compare", str(before), str(after))
    assert (same.returncode, same.stdout) == (0, "same values: 1 runs, 2 logged values\n")
    record["grpo"]["metrics"][1]["loss"] = 0.3
    after.write_text(json.dumps(record))
    changed = tool("benchmarks/same_values.py", "compare", str(before), str(after))
    assert (changed.returncode, changed.stdout) == (1, "grpo record 1 loss: 0.25 -> 0.3\n")


def test_same_values_refuses_an_unknown_combination_in_one_line(tmp_path):
    done = tool("benchmarks/same_values.py", "record", str(tmp_path / "out.json"), "grpo", "nonesuch")
    assert done.returncode == 1
    assert done.stderr.startswith("error: no combination nonesuch (fix: name one of entropy_masked, grpo, ")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_same_values_records_a_run_that_equals_itself(tmp_path):
    out = tmp_path / "grpo.json"
    done = tool("benchmarks/same_values.py", "record", str(out), "grpo")
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = json.loads(out.read_text())
    assert list(recorded) == ["grpo"]
    assert len(recorded["grpo"]["metrics"]) >= 4  # debug=fast: four steps, and the evaluations
    assert not any("time" in key for r in recorded["grpo"]["metrics"] for key in r)
    again = tool("benchmarks/same_values.py", "compare", str(out), str(out))
    assert again.returncode == 0 and again.stdout.startswith("same values: 1 runs, ")


@pytest.mark.slow
def test_the_default_run_tool_reports_the_accuracy_before_and_after():
    done = tool("benchmarks/default_run.py", "--warm-only", "debug=fast", "logger=none", "algorithm.max_steps=1",
                "eval.max_samples=8")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    first, *accuracies = done.stdout.splitlines()
    assert first.startswith("warm cache: ") and first.endswith(" s wall, 1 socraticpo steps")
    assert any(line.split()[0] == "eval/greedy_acc" and "->" in line for line in accuracies)
