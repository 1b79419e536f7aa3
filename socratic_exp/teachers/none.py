"""``teacher=none``: no teacher (algorithms that need one reject this choice at start-up)."""

from __future__ import annotations

import dataclasses

from socratic_exp.teachers.base import Teacher


@dataclasses.dataclass(kw_only=True)
class NoTeacher(Teacher):
    present = False
