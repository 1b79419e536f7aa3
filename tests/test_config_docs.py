"""Every setting documented and range-checked: a comment on every YAML key under conf/, help text on every field of
every option dataclass, declared bounds on every numeric field, and --help that shows them.

The YAML and dataclass checks are parametrized per file and per declaring class, so a failure names the file or
module to fix (and with it who owns it).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from conftest import CONF, ROOT, compose

from socratic_exp.core.component import Component, _accepts, _nested_component, setting
from socratic_exp.core.config_help import SECTIONS, TOP_LEVEL_HELP, annotated_config
from socratic_exp.core.errors import ConfigError
from socratic_exp.runtime.assembly import build_components

YAMLS = sorted(CONF.rglob("*.yaml"))

# --- (a) a comment on every key line ----------------------------------------------------------------------------
_KEY = re.compile(r"""^(?P<indent>\s*)(?P<item>-\s+)?(?P<key>[A-Za-z_$][\w.\-/ ]*|"[^"]*"|'[^']*')\s*:(\s|$)""")
_ITEM = re.compile(r"^\s*-\s+\S")
_BLOCK_SCALAR = re.compile(r":\s*[|>][0-9+-]*$")


def _split_comment(line: str) -> tuple[str, str | None]:
    """The line's YAML before its comment, and the comment (None without one); ``#`` inside quotes is text."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), None


def undocumented_keys(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each key without a comment on its line or on the line just above it.

    Keys of nested blocks count, and so do the items of a ``defaults`` list; the lines of a block scalar (``|-``)
    and the items of other lists are values. ``# @package`` is a directive, not a comment on the next key."""
    lines = text.splitlines()
    offenders: list[tuple[int, str]] = []
    parents: list[tuple[int, str]] = []  # (indent, key) of the enclosing blocks
    block_scalar_indent: int | None = None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if block_scalar_indent is not None:
            if not stripped or indent > block_scalar_indent:
                continue
            block_scalar_indent = None
        if not stripped or stripped.startswith("#"):
            continue
        code, comment = _split_comment(line)
        key, item = _KEY.match(code), _ITEM.match(code)
        while parents and (parents[-1][0] > indent or (parents[-1][0] == indent and not item)):
            parents.pop()
        is_key = key is not None and not key.group("item")
        if is_key:
            if _BLOCK_SCALAR.search(code):
                block_scalar_indent = indent
            parents.append((indent, key.group("key")))
        in_defaults = item is not None and len(parents) > 0 and parents[-1][1] == "defaults"
        if not (is_key or in_defaults):
            continue
        above = lines[number - 2].strip() if number > 1 else ""
        if not comment and not (above.startswith("#") and not above.startswith("# @package")):
            offenders.append((number, stripped))
    return offenders


@pytest.mark.parametrize("path", YAMLS, ids=[str(p.relative_to(CONF)) for p in YAMLS])
def test_every_yaml_key_has_a_comment(path: Path):
    offenders = undocumented_keys(path.read_text())
    assert not offenders, "keys without a comment on their line or the line above:\n" + "\n".join(
        f"  {path.relative_to(ROOT)}:{number}: {line}" for number, line in offenders
    )


def test_the_comment_check_catches_what_it_should():
    text = """# header
defaults:
  - _self_            # ok
  - task: arithmetic
# @package _global_
seed: 0
eval:                 # ok
  # the line above documents it
  pass_k: 4
  batch_size: 200
template: |-
  Question: {question}
setup:                # a list value, not keys
  - export X=1
url: "http://x#y"
"""
    assert undocumented_keys(text) == [
        (4, "- task: arithmetic"),
        (6, "seed: 0"),
        (10, "batch_size: 200"),
        (11, "template: |-"),
        (15, 'url: "http://x#y"'),
    ]


# --- (b), (c) help text and bounds on every field of every option dataclass ----------------------------------------
def _targets(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return found + [t for value in node.values() for t in _targets(value)]
    if isinstance(node, list):
        return [t for value in node for t in _targets(value)]
    return []


def option_classes() -> list[type[Component]]:
    """Every Component named by a ``_target_`` under conf/ (or by a top-level section such as ``eval``), the nested
    Component classes their fields hold, and the Component classes they inherit fields from."""
    names = {t for path in YAMLS for t in _targets(yaml.safe_load(path.read_text()))} | set(SECTIONS.values())
    todo: list[type] = []
    for name in sorted(names):
        module, _, attr = name.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
        if isinstance(cls, type) and issubclass(cls, Component):
            todo.append(cls)
    seen: dict[str, type[Component]] = {}
    while todo:
        cls = todo.pop()
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key in seen or not dataclasses.is_dataclass(cls):
            continue
        seen[key] = cls
        todo += [base for base in cls.__mro__[1:] if isinstance(base, type) and issubclass(base, Component)]
        for hint in typing.get_type_hints(cls).values():
            nested = _nested_component(hint)
            if nested is not None:
                todo.append(nested)
    return [seen[key] for key in sorted(seen)]


OPTION_CLASSES = option_classes()
CLASS_IDS = [f"{cls.__module__}.{cls.__qualname__}" for cls in OPTION_CLASSES]


def declared_fields(cls: type) -> list[dataclasses.Field]:
    """The fields ``cls`` itself declares or redeclares (inherited ones are its base's to document)."""
    own = inspect.get_annotations(cls)
    return [f for f in dataclasses.fields(cls) if f.name in own]


def _is_numeric(hint: object) -> bool:
    return _accepts(hint, int) or _accepts(hint, float)


def test_the_walk_finds_the_options():
    names = set(CLASS_IDS)
    assert {
        "socratic_exp.algorithms.grpo.config.GRPO",
        "socratic_exp.algorithms.base.Algorithm",
        "socratic_exp.runtime.evaluation.EvalSettings",
        "socratic_exp.tasks.benchmark.BenchmarkTask",
        "socratic_exp.teachers.base.Teacher",
        "socratic_exp.models.tiny.TinyModel",
        "socratic_exp.loggers.wandb.WandbLogger",
        "socratic_exp.algorithms.entropy_masked.config.EntropyMask",  # nested in algorithm.entropy_mask
    } <= names


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=CLASS_IDS)
def test_every_field_has_help(cls: type):
    missing = [f.name for f in declared_fields(cls) if not str(f.metadata.get("help", "")).strip()]
    assert not missing, f"{cls.__module__}.{cls.__qualname__}: fields without help text (setting(..., help)): {missing}"


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=CLASS_IDS)
def test_every_numeric_field_has_bounds(cls: type):
    hints = typing.get_type_hints(cls)
    missing = [f.name for f in declared_fields(cls) if _is_numeric(hints[f.name]) and not f.metadata.get("bounds")]
    assert not missing, f"{cls.__module__}.{cls.__qualname__}: numeric fields without bounds (ge/gt/le/lt): {missing}"


def test_numeric_field_detection():
    assert _is_numeric(int) and _is_numeric(float) and _is_numeric(int | None) and _is_numeric(float | None)
    assert not _is_numeric(bool) and not _is_numeric(bool | None) and not _is_numeric(str)
    assert not _is_numeric(dict[str, float]) and not _is_numeric(typing.Literal["a", "b"])


# --- setting(): bounds are checked, errors name the user's key ----------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class _Option(Component):
    config_group: typing.ClassVar[str] = "demo"
    share: float = setting(0.5, "a probability", ge=0.0, le=1.0)
    count: int | None = setting(None, "a count, or null for off", ge=1)


@dataclasses.dataclass(kw_only=True)
class _Changed(_Option):
    share: float = 0.25  # only a new default: keeps the help text and the bounds
    count: int | None = setting(3, "a count of its own")  # new help, the bounds kept


@dataclasses.dataclass(kw_only=True)
class _Rebounded(_Option):
    count: int | None = setting(None, "a count of at least 2", ge=2)  # its own help and bounds


def test_a_bound_violated_is_one_line_naming_the_key():
    with pytest.raises(ConfigError) as raised:
        _Option(share=1.5)
    assert str(raised.value) == "demo.share=1.5: must be <= 1.0 (fix: set demo.share=<a value <= 1.0>)"
    with pytest.raises(ConfigError, match=r"^demo\.count=0: must be >= 1 "):
        _Option(count=0)
    assert _Option(count=None).count is None  # null means off: no check
    assert _Option(share=1).share == 1.0  # the bounds are inclusive


def test_a_changed_default_keeps_help_and_bounds():
    field = next(f for f in dataclasses.fields(_Changed) if f.name == "share")
    assert field.default == 0.25
    assert field.metadata["help"] == "a probability"
    assert field.metadata["bounds"] == {"ge": 0.0, "le": 1.0}
    with pytest.raises(ConfigError, match=r"^demo\.share=-0\.1: must be >= 0\.0"):
        _Changed(share=-0.1)
    count = next(f for f in dataclasses.fields(_Changed) if f.name == "count")
    assert (count.default, count.metadata["help"], count.metadata["bounds"]) == (3, "a count of its own", {"ge": 1})
    with pytest.raises(ConfigError, match=r"^demo\.count=0: must be >= 1"):
        _Changed(count=0)
    with pytest.raises(ConfigError, match=r"^demo\.count=1: must be >= 2"):
        _Rebounded(count=1)
    assert _Option(count=1).count == 1  # the base keeps its own bound


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=grpo", "algorithm.top_p=1.5"], "algorithm.top_p=1.5: must be <= 1.0 (fix: set algorithm.top_p="),
        (["algorithm=grpo", "algorithm.num_generations=1"], "algorithm.num_generations=1: must be >= 2"),
        (["algorithm=socraticpo", "algorithm.max_steps=0"], "algorithm.max_steps=0: must be >= 1"),  # inherited
        (["task=arithmetic", "task.slip_rate=-0.5"], "task.slip_rate=-0.5: must be >= 0.0"),
        (["task=gsm8k", "task.split_seed=-1"], "task.split_seed=-1: must be >= 0"),
        (["model=tiny", "model.warmstart_lr=0"], "model.warmstart_lr=0.0: must be > 0.0"),
        (["teacher=llm", "teacher.max_new_tokens=0"], "teacher.max_new_tokens=0: must be >= 1"),
        (["algorithm=socratic_rl", "algorithm.meta_margin=-1"], "algorithm.meta_margin=-1.0: must be >= 0.0"),
        (["teacher=blackbox", "teacher.model=m", "teacher.top_p=0"], "teacher.top_p=0.0: must be > 0.0"),
        (["eval.temperature=0"], "eval.temperature=0.0: must be > 0.0"),
        (["seed=-1"], "seed=-1: must be an integer >= 0"),  # not teacher.seed, which gets it through ${seed}
    ],
)
def test_bounds_name_the_users_key(overrides, message):
    with pytest.raises(ConfigError) as raised:
        build_components(compose(*overrides))
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_the_app_prints_a_bound_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", "algorithm=grpo", "algorithm.top_p=1.5", "dry_run=true"],
        cwd=tmp_path,
        env={**os.environ, "SOCRATIC_EXP_OUTPUTS": str(tmp_path / "outputs"), "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: algorithm.top_p=1.5: must be <= 1.0 (fix: set algorithm.top_p=<a value <= 1.0>)"
    )


# --- (d) --help lists each key with its help text -------------------------------------------------------------
HELP_SCRIPT = """
import runpy, sys
sys.argv = ["socratic_exp", "--help", *sys.argv[1:]]
try:
    runpy.run_module("socratic_exp", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
heavy = [m for m in ("torch", "transformers", "trl", "wandb", "datasets", "openai") if m in sys.modules]
print("HEAVY:", heavy)
"""


def _help(*overrides: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, *overrides], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _line(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line.lstrip().startswith(f"{key}:"))


def test_help_shows_each_keys_help_and_bounds_without_heavy_imports():
    from socratic_exp.algorithms.grpo.config import GRPO
    from socratic_exp.models.tiny import TinyModel

    text = _help("algorithm=grpo", "teacher=llm")
    assert "HEAVY: []" in text
    line = _line(text, "max_completion_length")
    assert line.startswith("  max_completion_length: 48 ")
    assert line.endswith(f"# {_field_help(GRPO, 'max_completion_length')} [>= 1]")
    assert _line(text, "warmstart_lr").endswith(f"# {_field_help(TinyModel, 'warmstart_lr')} [> 0.0]")
    assert "# the run's seed" in _line(text, "seed")
    assert "plain_reflect_template: " in text  # the chosen teacher's keys, not the default's
    assert "algorithm: entropy_masked, grpo" in text  # Hydra's list of options is still there


def test_help_lists_every_key_of_the_composed_config():
    from omegaconf import OmegaConf

    cfg = compose("algorithm=grpo", "teacher=blackbox", "teacher.model=m", "task=sciknoweval", "model=qwen3_0_6b")
    root = OmegaConf.create({**OmegaConf.to_container(cfg, resolve=False), "hydra": {}})
    listed = yaml.safe_load(annotated_config(root))
    assert listed == {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}
    assert set(TOP_LEVEL_HELP) == {k for k in listed if not isinstance(listed[k], dict)}
    # every key of these options (all documented) carries its comment
    assert not [
        line
        for line in annotated_config(root).splitlines()
        if ":" in line and "#" not in line and not line.startswith("    ")
    ]


def _field_help(cls: type, name: str) -> str:
    return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


def test_help_lists_the_sweeps_arm_groups_apart():
    text = _help()
    users, arms = text.split("== Configuration groups ==", 1)[1].split("Sweep arms (internal", 1)
    arms = arms.split("== Config ==", 1)[0]
    assert re.search(r"^teacher: blackbox, llm, none, qwen27b, rule, socraticpo_official$", users, flags=re.MULTILINE)
    assert not re.search(r"^(evidence_arm|variant|vpd_arm)\b", users, flags=re.MULTILINE)
    sweeps = " / ".join(["evidence", "evidence_headroom", "evidence_long", "evidence_rates", "evidence_rates_selection",
                         "evidence_sparse"])  # fmt: skip
    evidence = rf"\(\+sweep={sweeps}\)"
    assert re.search(rf"^evidence_arm: composition, .*{evidence}$", arms, flags=re.MULTILINE)
    assert re.search(r"^variant: full, without_rd, without_tg +\(\+sweep=socraticpo_ablation\)$", arms, re.MULTILINE)
    assert re.search(r"^vpd_arm/sdpo: environment, sibling, teacher +\(\+sweep=vpd_ablation\)$", arms, re.MULTILINE)


def test_an_arm_group_is_one_only_a_sweep_adds(tmp_path):
    from socratic_exp.core.config_help import groups_help, sweep_arm_groups

    conf, sweeps = tmp_path / "conf", tmp_path / "sweeps"
    for path in ("task/a", "task/b", "debug/fast", "arm/x", "arm/y", "arm/sub/z"):
        (conf / f"{path}.yaml").parent.mkdir(parents=True, exist_ok=True)
        (conf / f"{path}.yaml").write_text("{}\n")
    (conf / "config.yaml").write_text("defaults:\n  - _self_\n  - task: a\n  - debug: null\n")
    sweeps.mkdir()
    grid = "hydra:\n  sweeper:\n    params:\n      {}\n"
    (sweeps / "s.yaml").write_text(grid.format("'+arm': x,y\n      task: a,b"))
    (sweeps / "t.yaml").write_text(grid.format("'+debug': fast"))  # in the defaults: a user's group
    (sweeps / "u.yaml").write_text("grid: {}\n")  # no hydra block
    assert sweep_arm_groups(conf, sweeps) == {"arm": ["s"]}
    assert groups_help(conf, sweeps).splitlines() == [
        "debug: fast",
        "task: a, b",
        "",
        "Sweep arms (internal: each job of a paper sweep gets one, the sweep chooses it):",
        "arm: x, y   (+sweep=s)",
        "arm/sub: z   (+sweep=s)",
    ]
