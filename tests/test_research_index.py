"""benchmarks/ holds tools (scripts only); research/ holds the records' scripts, which the history page indexes, and
under results/ every figure a page quotes. Every result file is in the index (docs/research.md) and every file the
index names exists; every result file is cited by a page (the README, a docs page, a test or the package's code), and
the index names exactly the pages that cite it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

INDEX = ROOT / "docs" / "research.md"
HISTORY = ROOT / "docs" / "history.md"
ROW = re.compile(r"^\| `(research/results/[^`]+)` \|(.*)\|(.*)\|$", flags=re.MULTILINE)
SCRIPTS = (".py", ".sh")


def tracked(folder: str) -> list[str]:
    """The files under ``folder`` (a repository path): git's tracked ones in a checkout, else what the folder holds."""
    listing = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT, capture_output=True, text=True, check=False)
    if listing.returncode == 0 and listing.stdout:
        return sorted(name for name in listing.stdout.split("\0") if name)
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*") if p.is_file() or p.is_symlink())


def index_rows() -> dict[str, set[str]]:
    """The index's rows: result file -> the pages its last column names (a docs page's link, or a backticked path)."""
    rows: dict[str, set[str]] = {}
    for path, _made_by, cited_by in ROW.findall(INDEX.read_text()):
        assert path not in rows, f"{path} is in the index twice"
        pages = {f"docs/{page}" for page in re.findall(r"\]\(([\w.-]+\.md)\)", cited_by)}
        rows[path] = pages | set(re.findall(r"`([^`]+)`", cited_by))
    return rows


def pages() -> dict[str, str]:
    """What may cite a result: the README, the docs pages (the index aside), the tests and the package's code."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "socratic_exp").rglob("*.py")]  # fmt: skip
    return {f.relative_to(ROOT).as_posix(): f.read_text() for f in files if f not in (INDEX, Path(__file__))}


def citing(path: str, texts: dict[str, str]) -> set[str]:
    """The pages naming ``path``, or a folder of results it is in (``research/results/evidence/``, as a folder)."""
    folders = [path.rsplit("/", depth)[0] + "/" for depth in range(1, path.count("/") - 1)]
    names = [re.compile(re.escape(path) + r"(?![\w.-])"), *(re.compile(re.escape(f) + r"(?![\w.-])") for f in folders)]
    return {page for page, text in texts.items() if any(name.search(text) for name in names)}


RESULTS = tracked("research/results")
ROWS = index_rows()


def test_benchmarks_holds_tools_only_and_research_its_scripts_and_results():
    assert RESULTS, "research/results/ holds the results"
    assert [f for f in tracked("benchmarks") if not f.endswith(SCRIPTS)] == [], "results go under research/results/"
    strays = [f for f in tracked("research") if not f.startswith("research/results/") and not f.endswith(SCRIPTS)]
    assert not strays, f"results go under research/results/: {strays}"


def test_the_history_page_indexes_every_research_script():
    """Its table of the research area names each script of research/ once, and only scripts that exist."""
    named = re.findall(r"^\| `(research/[\w.]+)` \|", HISTORY.read_text(), flags=re.MULTILINE)
    scripts = [f for f in tracked("research") if not f.startswith("research/results/")]
    assert len(named) == len(set(named)), "a script is in the history page's table twice"
    assert sorted(named) == scripts


def test_every_result_file_is_in_the_index():
    missing = sorted(set(RESULTS) - set(ROWS))
    assert not missing, f"not in docs/research.md: {missing}"


def test_the_index_names_only_files_that_exist():
    assert len(ROWS) >= len(RESULTS) > 0
    absent = [path for path in ROWS if not (ROOT / path).is_file()]
    assert not absent, f"docs/research.md names files that do not exist: {absent}"


@pytest.mark.parametrize("path", RESULTS)
def test_every_result_file_is_cited_and_the_index_says_where(path):
    cited_by = citing(path, pages())
    assert cited_by, f"{path}: no page cites it (remove it, or cite it)"
    assert ROWS.get(path) == cited_by, f"{path}: docs/research.md says {sorted(ROWS.get(path, []))}"


def test_citing_counts_a_folder_only_as_a_folder():
    texts = {"a.md": "`research/results/evidence_v4/`", "b.md": "research/results/evidence/scoreboard.png"}
    assert citing("research/results/evidence_v4/scoreboard.md", texts) == {"a.md"}
    assert citing("research/results/evidence/scoreboard.md", texts) == set()
    assert citing("research/results/evidence/scoreboard.png", texts) == {"b.md"}
