"""``logger=none``: local files only."""

from __future__ import annotations

import dataclasses

from socratic_exp.loggers.base import Logger


@dataclasses.dataclass(kw_only=True)
class NoLogger(Logger):
    pass
