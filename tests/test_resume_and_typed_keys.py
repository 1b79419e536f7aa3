"""Validation holes closed: ``resume=<folder>`` refuses a folder that is not a run's (and writes nothing into it),
and an error about an interpolated value names the key the user typed."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from socratic_exp.core.config import compose, typed_key
from socratic_exp.core.errors import ConfigError
from socratic_exp.runtime.assembly import build_components
from socratic_exp.runtime.stages.compose import as_typed


def test_typed_key_follows_interpolations_through_chains_and_oc_select():
    cfg = OmegaConf.create(
        {
            "seed": 1,
            "teacher": {"seed": "${seed}"},
            "task": {"seed": "${teacher.seed}"},
            "algorithm": {"max_attempts": 3},
            "eval": {"attempts": "${oc.select:algorithm.max_attempts,2}", "fallback": "${oc.select:algorithm.k,2}"},
            "plain": {"text": "a ${seed} b", "value": 4},
        }
    )
    assert typed_key(cfg, "teacher.seed") == "seed"
    assert typed_key(cfg, "task.seed") == "seed"
    assert typed_key(cfg, "eval.attempts") == "algorithm.max_attempts"
    assert typed_key(cfg, "eval.fallback") == "eval.fallback"  # oc.select fell back: nothing else to set
    assert typed_key(cfg, "plain.text") == "plain.text"  # a string built from a key is not that key
    assert typed_key(cfg, "plain.value") == "plain.value"
    assert typed_key(cfg, "no.such.key") == "no.such.key"


def test_an_interpolated_seed_is_reported_under_seed():
    cfg = compose("teacher=rule", "seed=1.5")
    with pytest.raises(ConfigError) as caught:  # the run's seed is checked before the options that get it
        build_components(cfg, {})
    assert caught.value.key == "seed"


def test_an_error_on_an_interpolated_value_moves_to_the_typed_key():
    cfg = compose("teacher=rule", "seed=7")
    err = ConfigError("teacher.seed", 7, "must be < 5", "set teacher.seed=<a value < 5>")
    typed = as_typed(err, cfg)
    assert str(typed) == "seed=7: must be < 5 (passed on to teacher.seed) (fix: set seed=<a value < 5>)"
    assert typed.key == "seed"


def test_an_error_under_the_typed_key_is_left_alone():
    cfg = compose("teacher=rule")
    err = ConfigError("algorithm.beta", -1.0, "must be >= 0", "set algorithm.beta=<a value >= 0>")
    assert as_typed(err, cfg) is err


def test_a_fixes_key_follows_the_typed_key():
    cfg = compose("teacher=rule", "seed=3")
    err = ConfigError("teacher.seed", 3, "must be >= 5", "set teacher.seed=<a value >= 5>")
    typed = as_typed(err, cfg)
    assert str(typed) == "seed=3: must be >= 5 (passed on to teacher.seed) (fix: set seed=<a value >= 5>)"


@pytest.mark.parametrize("what", ["empty", "files", "missing"])
def test_resume_refuses_a_folder_that_is_not_a_run_and_writes_nothing_into_it(run_app, tmp_path, what):
    folder = tmp_path / "not_a_run"
    if what != "missing":
        folder.mkdir()
    if what == "files":
        (folder / "notes.txt").write_text("mine")
    before = sorted(p.name for p in folder.iterdir()) if folder.exists() else None
    proc, _ = run_app("dry_run=true", f"resume={folder}", timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: resume='{folder}': is not a run folder"), proc.stderr
    assert (sorted(p.name for p in folder.iterdir()) if folder.exists() else None) == before
