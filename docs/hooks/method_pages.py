"""The docs site's hook (``mkdocs.yml``'s ``hooks``): the nav's Methods section is every method's own page, as its
folder declares it (``socratic_exp.core.methods.Method.docs``), so that a new method's page needs no nav edit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SECTION = "Methods"


def title(page: Path) -> str:
    """The page's first heading without its parenthesis: ``# SocraticPO (`algorithm=socraticpo`)`` -> SocraticPO."""
    heading = next(line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("# "))
    return re.sub(r"\s*\(.*\)\s*$", "", heading[2:]).strip()


def method_pages(docs_dir: Path) -> list[dict[str, str]]:
    """``[{title: page}]``, one entry per declared page, in the declarations' order (a page two methods share once)."""
    from socratic_exp.runtime.methods import declared_methods

    pages = dict.fromkeys(method.docs for method in declared_methods() if method.docs)
    return [{title(docs_dir / page): page} for page in pages]


def on_config(config: Any) -> Any:
    for entry in config["nav"]:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = method_pages(Path(config["docs_dir"]))
    return config
