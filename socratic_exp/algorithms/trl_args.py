"""``algorithm.trl_args``: every key a ``trl.GRPOConfig`` field (which every algorithm's TRL config extends), checked
against the installed TRL's source without importing it."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import ConfigError


def check_trl_args(trl_args: dict[str, Any]) -> None:
    known = grpo_config_fields()
    for key in trl_args:
        if key not in known:
            close = sorted(k for k in known if k.startswith(key[:4]))[:5]
            raise ConfigError(
                f"algorithm.trl_args.{key}",
                trl_args[key],
                "is not a trl.GRPOConfig field",
                f"check the name in TRL {importlib.metadata.version('trl')}'s GRPOConfig"
                + (f" (close: {', '.join(close)})" if close else ""),
            )


@functools.cache
def grpo_config_fields() -> frozenset[str]:
    """``trl.GRPOConfig``'s dataclass fields, read from the installed TRL's source and transformers' (its bases'
    annotated class attributes), without importing either (importing TRL takes seconds)."""
    trl_dir = Path(importlib.util.find_spec("trl").origin).parent  # type: ignore[union-attr, arg-type]
    transformers_dir = Path(importlib.util.find_spec("transformers").origin).parent  # type: ignore[union-attr, arg-type]
    chain = [
        (trl_dir / "trainer" / "grpo_config.py", "GRPOConfig"),
        (trl_dir / "trainer" / "base_config.py", "_BaseConfig"),
        (transformers_dir / "training_args.py", "TrainingArguments"),
    ]
    fields: set[str] = set()
    for path, name in chain:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
        fields |= {
            node.target.id
            for node in cls.body
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and "ClassVar" not in ast.unparse(node.annotation)
        }
    return frozenset(fields)
