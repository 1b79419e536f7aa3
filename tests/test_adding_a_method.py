"""The guide to adding a method (docs/adding-a-method.md), followed as written: its files, taken from the page's
titled code blocks, go into a copy of the project, and the new method composes, is refused where its settings say
so, is found by the package, lists its page in the docs nav and trains one step."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "adding-a-method.md"
# a fenced block whose info string names its file: ```python title="socratic_exp/..." (longer fences nest)
TITLED_BLOCK = re.compile(r'^(`{3,})\w+ title="([^"]+)"\n(.*?)^\1$', re.MULTILINE | re.DOTALL)


def guide_files(text: str) -> dict[str, str]:
    return {path: body for _, path, body in TITLED_BLOCK.findall(text)}


def test_the_guides_files_are_read_from_its_titled_blocks():
    text = (
        'intro\n```python title="a/b.py"\nx = 1\n```\n\n````markdown title="docs/p.md"\n# P\n```bash\nls\n```\n````\n'
    )
    assert guide_files(text) == {"a/b.py": "x = 1\n", "docs/p.md": "# P\n```bash\nls\n```\n"}


def test_the_guide_gives_every_file_of_a_method():
    files = guide_files(GUIDE.read_text(encoding="utf-8"))
    folder = "socratic_exp/algorithms/clipped_advantages/"
    assert sorted(files) == sorted(
        [f"{folder}{name}" for name in ("__init__.py", "build.py", "config.py", "declaration.py", "trainer.py")]
        + ["conf/algorithm/clipped_advantages.yaml", "docs/clipped-advantages.md"]
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project with the guide's method added: its files and nothing else."""
    copy = tmp_path_factory.mktemp("with_a_new_method")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("socratic_exp", "conf", "sweeps", "hydra_plugins", "docs"):
        shutil.copytree(ROOT / name, copy / name, ignore=skip, symlinks=True)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    for path, body in guide_files(GUIDE.read_text(encoding="utf-8")).items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_text(body, encoding="utf-8")
    return copy


def in_copy(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project), "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_the_new_method_is_found_and_its_page_is_in_the_nav(project):
    code = (
        "import sys; sys.path.insert(0, 'docs/hooks')\n"
        "from pathlib import Path\n"
        "from method_pages import method_pages\n"
        "from socratic_exp.runtime.methods import declared_methods\n"
        "from socratic_exp.runtime.assembly import build_components\n"
        "from socratic_exp.core.config import compose\n"
        "from socratic_exp.algorithms import builder\n"
        "print([m.name for m in declared_methods()])\n"
        "print(method_pages(Path('docs')))\n"
        "print(type(builder(build_components(compose('algorithm=clipped_advantages')).algorithm)).__name__)\n"
    )
    run = in_copy(project, "-c", code)
    assert run.returncode == 0, run.stderr[-3000:]
    names, pages, build = run.stdout.splitlines()
    assert "'clipped_advantages'" in names
    assert "{'Clipped advantages': 'clipped-advantages.md'}" in pages
    assert build == "ClippedAdvantagesBuild"


def test_the_new_methods_settings_are_checked_in_one_line(project, tmp_path):
    run = in_copy(project, "-m", "socratic_exp", "algorithm=clipped_advantages", "algorithm.advantage_clip=0",
                  f"hydra.run.dir={tmp_path / 'refused'}")  # fmt: skip
    assert run.returncode != 0
    assert run.stderr == (
        "error: algorithm.advantage_clip=0.0: must be > 0.0 (fix: set algorithm.advantage_clip=<a value > 0.0>)\n"
    )
    run = in_copy(project, "-m", "socratic_exp", "algorithm=clipped_advantages", "algorithm.scale_rewards=none",
                  f"hydra.run.dir={tmp_path / 'refused_too'}")  # fmt: skip
    assert run.returncode != 0
    assert run.stderr == (
        "error: algorithm.scale_rewards='none': leaves the advantages in reward units, where a clip in standard "
        "deviations means nothing (fix: set algorithm.scale_rewards=group (or batch))\n"
    )


@pytest.mark.slow
def test_the_new_method_trains_a_step_and_logs_its_own_metric(project, tmp_path):
    run_dir = tmp_path / "run"
    run = in_copy(project, "-m", "socratic_exp", "algorithm=clipped_advantages", "debug=fast", "logger=none",
                  "algorithm.max_steps=1", "algorithm.advantage_clip=0.5", "eval.max_samples=8",
                  f"hydra.run.dir={run_dir}")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shares = [r["clipped_advantages/clipped_share"] for r in records if "clipped_advantages/clipped_share" in r]
    assert len(shares) == 1 and 0.0 <= shares[0] <= 1.0
