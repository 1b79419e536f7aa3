"""What a method declares for the rest of the package: its console signals, its figures, its paper's premise and
claims. The study, the console and the run report read these declarations and import no method.

A method is a folder under ``algorithms/`` or ``samplers/`` with a ``declaration.py`` that defines ``METHOD``, a
``Method``. Its group's package finds the folders (``socratic_exp.algorithms.declared``); the run and the study ask
``socratic_exp.runtime.methods.declared_methods`` for all of them. The types a declaration is made of (``Signal``,
``Claim``, ``Promise``) live here, below the methods, so that a method folder imports nothing from the study.

Adding a method touches its folder, its YAMLs and its docs page (``docs/adding-a-method.md``): the console, the run
and sweep reports, the premises and the scoreboard find it through its declaration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.errors import NO_VALUE, ConfigError

if TYPE_CHECKING:
    from socratic_exp.core.console import Signal

MARGIN = 0.02  # the smallest effect the scoreboard's verdicts care about (2 points of accuracy)
SMALLEST_EFFECT_SOURCE = "the smallest effect of interest, 2 points, fixed before any scoreboard ran"
Figures = list[tuple[str, Path | None]]  # (title, the plot drawn, or None where the runs did not log its metrics)


@dataclasses.dataclass(frozen=True)
class Construction:
    """When a student makes a claim hold before any run: its premise figure ``key`` below ``below`` (measured by
    ``python -m socratic_exp.study.premises`` on each student the scoreboard's seeds train)."""

    key: str
    below: float
    why: str


@dataclasses.dataclass(frozen=True)
class Claim:
    """A paper's claim as a comparison of two arms of the evidence sweep (``conf/evidence_arm/<arm>.yaml``)."""

    id: str
    source: str  # the paper (and where it says so)
    statement: str  # the claim, short
    a: str  # the arm claimed better
    b: str  # the arm it is compared with
    kind: Literal["better", "not_worse", "worse"] = "better"
    hypothesis: bool = False  # from a proposal without experiments: its verdicts read supported / not supported
    margin: float = MARGIN  # the effect "not reproduced" excludes: the paper's own where it reports one
    margin_source: str = SMALLEST_EFFECT_SOURCE
    # the settings the claim is about (config keys; "group." for a whole group's option): the arms differ in these,
    # and in every other key named (by its last part) in ``differences`` (tests/test_evidence.py checks both)
    changes: tuple[str, ...] = ()
    differences: str = ""  # every setting in which the arms differ besides the one the claim is about, if any
    by_construction: Construction | None = None  # what, on a student, makes the claim hold before any run

    @property
    def margin_name(self) -> str:
        """What the margin is, as a verdict's size reads it: the paper's effect, or the smallest effect of interest."""
        return "the paper's" if self.margin_source != SMALLEST_EFFECT_SOURCE else f"{self.margin * 100:g} points"


@dataclasses.dataclass(frozen=True)
class CollapseClaim:
    """A paper's claim that arm ``a``'s runs collapse later than arm ``b``'s, or not at all, read on long runs'
    curves (``python -m socratic_exp.report <sweep folder> --collapse``, ``study.collapse``)."""

    id: str
    source: str
    statement: str
    a: str  # the arm claimed to collapse later
    b: str  # the arm whose collapse it delays


@dataclasses.dataclass(frozen=True)
class Promise:
    """A premise figure and the level the embedded testbed's design promises for it."""

    key: str
    at_least: float
    why: str


@dataclasses.dataclass(frozen=True)
class Method:
    """A method folder's declaration (its ``declaration.py``'s ``METHOD``).

    - ``name``: the folder's name, the option users type (``algorithm=<name>`` or ``sampler=<name>``);
    - ``paper``: how the premises' progress and the docs call it (SocraticPO, Goldilocks RL);
    - ``docs``: its page under ``docs/`` (``<name>.md``), which the site's nav lists under Methods;
    - ``signals``: ``{metric prefix: (Signal, ...)}``, what the progress line shows once a metric with that prefix is
      logged;
    - ``figures(records, config, out) -> Figures``: the run report's plots of the method's own metrics;
    - ``sweep_figures(variants, out) -> Figures``: the comparison report's plots across a sweep's variants
      (``study.report.Variant``: name, settings, completed runs);
    - ``order``: where its premises are measured among the methods' (their figures depend on it: the teacher's draws
      follow one another), and where its claims stand on the scoreboard;
    - ``premises(bench) -> {figure: value}``: its paper's precondition, measured by ``study.premises`` on a
      ``study.premises.Bench``; ``promises``: the levels those figures reach on the embedded testbed;
    - ``claims``: its paper's claims, scored by ``study.evidence``; ``collapse_claims``: those that one arm collapses
      later than another, read on long runs by ``study.collapse``;
    - ``moved_keys``: ``{old key: its key now}`` (``{"teacher.margin": "algorithm.margin"}``), settings that
      were another group's once: a user who types the old key is told where it is set (``moved_key``).
    """

    name: str
    paper: str
    docs: str = ""
    signals: Mapping[str, tuple[Signal, ...]] = dataclasses.field(default_factory=dict)
    figures: Callable[[list[dict[str, Any]], dict[str, Any], Path], Figures] | None = None
    sweep_figures: Callable[[Sequence[Any], Path], Figures] | None = None
    order: int = 0
    premises: Callable[[Any], dict[str, float]] | None = None
    promises: tuple[Promise, ...] = ()
    claims: tuple[Claim, ...] = ()
    moved_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    collapse_claims: tuple[CollapseClaim, ...] = ()


def method_folders(package_path: Iterable[str]) -> list[str]:
    """The names of the folders under a group's package (its ``__path__``) that declare a method, by name."""
    return sorted(
        folder.name
        for root in package_path
        for folder in Path(root).iterdir()
        if (folder / "__init__.py").is_file() and (folder / "declaration.py").is_file()
    )


def in_order(methods: Iterable[Method]) -> tuple[Method, ...]:
    """The declarations in their ``order`` (the order given among equals): how the premises and the scoreboard
    stand."""
    return tuple(sorted(methods, key=lambda method: method.order))


def signals_of(methods: Iterable[Method]) -> dict[str, tuple[Signal, ...]]:
    """Every method's console signals, by metric prefix."""
    return {prefix: signals for method in methods for prefix, signals in method.signals.items()}


def moved_key(key: str, methods: Iterable[Method]) -> ConfigError | None:
    """The one-line error for a key that a method took over (its ``moved_keys``), naming where the setting lives now
    and which option has it; None for any other key."""
    for method in methods:
        new = method.moved_keys.get(key)
        if new is not None:
            group = new.split(".")[0]
            where = f"{new}, a setting of {group}={method.name}"
            return ConfigError(key, NO_VALUE, f"has moved to {where}", f"set {new}=<value> instead")
    return None
