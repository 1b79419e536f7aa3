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


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert sorted(nav_pages(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))


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
    assert 'id="socratic_exp.distributed"' in reference and 'id="socratic_exp.evaluation"' in reference
