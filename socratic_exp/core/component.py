"""The base of every config-group option.

Each option is a dataclass named by its YAML's ``_target_``. Building it with ``hydra.utils.instantiate`` checks
types and ranges, so a whole run is validated by constructing its components, which is cheap: modules import
torch, transformers, trl and wandb only inside the methods that do the heavy work.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from typing import Any, ClassVar, Literal

from socratic_exp.core.errors import NO_VALUE, ConfigError


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    default_factory: Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with its help text (the same words as its YAML comment) and its bounds, which every
    option checks when it is built (``None`` values skip the check: null means "off" or "derived")."""
    bounds = {name: value for name, value in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if value is not None}
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"help": help, "bounds": bounds}
    )


@dataclasses.dataclass(kw_only=True)
class Component:
    """A config option: ``config_group`` names the config group, so errors read ``algorithm.beta=-1: ...``."""

    config_group: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that changes a field's default (``max_steps: int = 150``) keeps the help text and bounds the
        field was declared with, unless it declares its own: a plain default would drop them, and the range check."""
        super().__init_subclass__(**kwargs)
        declared = {
            f.name: f
            for base in reversed(cls.__mro__[1:])
            if dataclasses.is_dataclass(base)
            for f in dataclasses.fields(base)
        }
        for name in inspect.get_annotations(cls):
            parent = declared.get(name)
            if parent is None or not parent.metadata:
                continue
            value = cls.__dict__.get(name, dataclasses.MISSING)
            if not isinstance(value, dataclasses.Field):
                value = dataclasses.field(default=value)
            own = {key: item for key, item in value.metadata.items() if item}  # its own help / bounds, where given
            setattr(
                cls,
                name,
                dataclasses.field(
                    default=value.default,
                    default_factory=value.default_factory,
                    metadata={**parent.metadata, **own},
                ),
            )

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            expected = hints[field.name]
            nested = _nested_component(expected)
            if nested is not None and isinstance(value, dict):  # a nested block, e.g. algorithm.entropy_mask
                value = nested.from_dict(value)
                setattr(self, field.name, value)
            if not _matches(value, expected):
                raise ConfigError(self.key(field.name), value, f"expected {_describe(expected)}")
            if (
                isinstance(value, int)
                and not isinstance(value, bool)
                and _accepts(expected, float)
                and not _accepts(expected, int)
            ):
                setattr(self, field.name, float(value))  # YAML `1` for a float knob
            if field.metadata.get("bounds"):
                self.check_range(field.name, **field.metadata["bounds"])
        self.validate()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Component:
        """The option built from a config block, with unknown keys named (the block has no ``_target_``)."""
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise ConfigError(
                    f"{cls.config_group}.{key}", NO_VALUE, "unknown key", f"remove it; the keys are: {', '.join(known)}"
                )
        return cls(**values)

    def validate(self) -> None:
        """Range and consistency checks of this option; raise ConfigError."""

    def key(self, name: str) -> str:
        return f"{self.config_group}.{name}" if self.config_group else name

    def check(self, name: str, ok: bool, problem: str, fix: str | None = None) -> None:
        if not ok:
            raise ConfigError(self.key(name), getattr(self, name, None), problem, fix)

    def check_range(
        self,
        name: str,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        lt: float | None = None,
    ) -> None:
        value = getattr(self, name)
        if value is None:
            return
        if isinstance(value, float) and not math.isfinite(value):  # nan passes no bound, inf every open one
            raise ConfigError(self.key(name), value, "must be a finite number", f"set {self.key(name)}=<a number>")
        for bound, holds, word in (
            (ge, lambda b: value >= b, ">="),
            (gt, lambda b: value > b, ">"),
            (le, lambda b: value <= b, "<="),
            (lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not holds(bound):
                raise ConfigError(
                    self.key(name), value, f"must be {word} {bound}", f"set {self.key(name)}=<a value {word} {bound}>"
                )

    def options(self) -> dict[str, Any]:
        """The option's settings as plain data (for summaries and W&B)."""
        return dataclasses.asdict(self)


def _accepts(expected: Any, kind: type) -> bool:
    if expected is kind or expected is Any:
        return True
    return any(_accepts(arg, kind) for arg in typing.get_args(expected)) if _is_union(expected) else False


def _nested_component(expected: Any) -> type[Component] | None:
    """The Component class a field holds (``X`` or ``X | None``), if any."""
    candidates = typing.get_args(expected) if _is_union(expected) else (expected,)
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, Component)), None)


def _is_union(expected: Any) -> bool:
    return typing.get_origin(expected) in (typing.Union, types.UnionType)


def _matches(value: Any, expected: Any) -> bool:
    if expected is Any:
        return True
    if expected is type(None):
        return value is None
    if _is_union(expected):
        return any(_matches(value, arg) for arg in typing.get_args(expected))
    origin = typing.get_origin(expected)
    if origin is Literal:
        return value in typing.get_args(expected)
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        args = typing.get_args(expected)
        return isinstance(value, list | tuple) and all(_matches(v, args[0]) for v in value) if args else True
    if origin is dict:
        key_type, value_type = typing.get_args(expected) or (Any, Any)
        return isinstance(value, dict) and all(
            _matches(k, key_type) and _matches(v, value_type) for k, v in value.items()
        )
    return isinstance(value, origin or expected)


def _describe(expected: Any) -> str:
    if _is_union(expected):
        return " or ".join(_describe(arg) for arg in typing.get_args(expected))
    if typing.get_origin(expected) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(expected))
    if expected is type(None):
        return "null"
    return getattr(expected, "__name__", str(expected))
