"""The documentation: the README stays short and its links resolve, docs/index.md repeats its cookbook unchanged,
CI runs exactly its test command, and the mkdocs site builds in strict mode (a broken link, an anchor that does not
exist, a page outside the nav or a docstring the API page cannot render fails the build)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```\w*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_the_readme_is_short_and_its_links_resolve():
    assert len(README.splitlines()) <= 250
    links = re.findall(r"\]\(((?!https?://)[^)#]+)", README)
    assert len(links) > 10
    for link in links:
        assert (ROOT / link).exists(), link


def test_ci_runs_the_readmes_test_command():
    test_command = code_blocks(README)[0].splitlines()[1].split("   #", 1)[0].strip()
    assert test_command.endswith("python -m pytest")
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_getting_started_page_repeats_the_readmes_commands():
    page = (DOCS / "index.md").read_text()
    readme_blocks = code_blocks(README)
    assert code_blocks(page)[:2] == readme_blocks[:2], "the set-up commands and the cookbook, unchanged"


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def site_nav() -> list:
    """The nav as the site builds it: ``mkdocs.yml``'s, its Methods section filled by the hook."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("method_pages", DOCS / "hooks" / "method_pages.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return hook.on_config({**config, "docs_dir": str(DOCS)})["nav"]


def test_every_page_is_in_the_nav():
    assert sorted(nav_pages(site_nav())) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_methods_section_lists_each_declared_page_under_its_title():
    (methods,) = [entry["Methods"] for entry in site_nav() if isinstance(entry, dict) and "Methods" in entry]
    assert methods == [
        {"Entropy masking": "entropy-masking.md"},
        {"Dynamic sampling and overlong shaping": "dynamic-sampling.md"},
        {"REINFORCE++": "reinforce-pp.md"},
        {"SDPO and VPD": "sdpo-vpd.md"},
        {"Socratic-RL": "socratic-rl.md"},
        {"SocraticPO": "socraticpo.md"},
        {"Goldilocks sampling": "goldilocks.md"},
    ]


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="the dev extra: mkdocs-material, mkdocstrings[python]")
    pytest.importorskip("material", reason="the dev extra: mkdocs-material")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for page in DOCS.glob("*.md"):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), page.name
    reference = (site / "reference" / "index.html").read_text()
    assert 'id="socratic_exp.core.distributed"' in reference and 'id="socratic_exp.runtime.evaluation"' in reference


DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
TEXT = "\n".join(path.read_text() for path in DOCUMENTS)
# The app's own commands are composed one by one in tests/test_readme.py; these are the other entry points.
MODULE_COMMANDS = sorted(set(re.findall(r"python -m (socratic_exp\.[a-z0-9_.]*[a-z0-9_])", TEXT)))
SCRIPTS = sorted(set(re.findall(r"(?:python|bash) ((?:benchmarks|research)/[\w./]+\.(?:py|sh))", TEXT)))


def test_the_docs_show_the_other_entry_points():
    assert {"socratic_exp.report", "socratic_exp.study.premises", "socratic_exp.models.tiny"} <= set(MODULE_COMMANDS)
    assert len(SCRIPTS) > 15


@pytest.mark.parametrize("module", MODULE_COMMANDS)
def test_every_module_command_in_the_docs_runs_and_shows_its_help(module):
    """``python -m <module> --help`` exits 0 with a usage line: the module exists, runs as a command and parses its
    arguments (a renamed or moved module would fail here before a reader does)."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout.lower()


def test_every_script_the_docs_name_exists():
    assert [script for script in SCRIPTS if not (ROOT / script).is_file()] == []
