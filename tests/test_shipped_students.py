"""The students that ship with the package: their files match their manifests, the configs they were built from load
them without a warm-start on any machine, other configs do not, and ``python -m socratic_exp.models.tiny`` rebuilds,
lists and verifies them."""

from __future__ import annotations

import json
import shutil

import pytest

from socratic_exp.models.tiny import TinyModel
from socratic_exp.models.tiny.__main__ import main
from socratic_exp.models.tiny.shipped import STUDENTS_DIR, WEIGHTS, find_shipped, problems, shipped_students
from socratic_exp.tasks.arithmetic import ArithmeticTask

EVIDENCE = {f"evidence-seed{seed}": seed for seed in range(20)}  # the evidence students: 0-9, 10-19 (rates)


def test_the_default_and_the_twenty_evidence_students_ship_and_match_their_manifests():
    students = shipped_students()
    assert sorted(s.name for s in students) == ["default", *sorted(EVIDENCE)]
    assert [problem for student in students for problem in problems(student)] == []
    for student in students:
        assert student.manifest["git_commit"] and student.manifest["built_on"]["cpu"]
        assert set(student.premise_figures) >= {"socraticpo/guided_fix_rate", "entropy/decision_enrichment"}


def test_the_default_student_was_built_from_the_defaults_written_here_by_hand():
    (default,) = [s for s in shipped_students() if s.name == "default"]
    assert default.manifest["build_config"]["model"] == {
        "chat": False, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 384,
        "max_length": 256, "warmstart_examples": 40000, "warmstart_steps": 1100, "warmstart_batch_size": 64,
        "warmstart_lr": 0.002, "warmstart_bf16": None, "warmstart_seed": 0,
    }  # fmt: skip
    assert default.manifest["overrides"] == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [({}, "default"), ({"warmstart_bf16": True}, "default"), ({"cache_dir": "/elsewhere"}, "default"),
     ({"lora": {"r": 8}}, "default"),  # LoRA shapes the RL phase, not the warm-started weights
     *[({"warmstart_steps": 1650, "warmstart_seed": seed}, name) for name, seed in EVIDENCE.items()],
     ({"warmstart_bf16": False}, None),  # a float32 build is another student: built here
     ({"warmstart_steps": 1650, "warmstart_seed": 20}, None), ({"warmstart_seed": 1}, None),
     ({"hidden_size": 96}, None)],
)  # fmt: skip
def test_a_config_loads_the_shipped_student_built_from_it_and_no_other(settings, expected):
    from socratic_exp.models.lora import LoRA

    if "lora" in settings:
        settings = settings | {"lora": LoRA(**settings["lora"])}
    found = find_shipped(TinyModel(**settings), ArithmeticTask())
    assert (found.name if found else None) == expected


@pytest.mark.parametrize(("task", "expected"), [({"overlong_buffer": 8}, "default"), ({"max_value": 40}, None)])
def test_reward_shaping_keeps_the_shipped_student_and_the_corpus_settings_do_not(task, expected):
    """task.overlong_buffer shapes RL rewards only (it once made every run build its own student); the corpus's
    settings name another student."""
    found = find_shipped(TinyModel(), ArithmeticTask(**task))
    assert (found.name if found else None) == expected


def test_a_shipped_student_needs_no_other_corpus():
    # the task's warm-start corpus is part of the build: another corpus is another student
    assert find_shipped(TinyModel(), ArithmeticTask(max_ops=5)) is None


def test_the_default_student_loads_from_the_package_and_nothing_is_built(tmp_path):
    student = TinyModel(cache_dir=str(tmp_path)).load(ArithmeticTask())
    assert student.info["shipped"] == "default" and student.path == str(STUDENTS_DIR / "default")
    assert student.model.num_parameters() == student.info["parameters"]
    assert list(tmp_path.iterdir()) == []  # no cache, no lock, no warm-start


def test_verify_names_a_student_whose_weights_changed(tmp_path, capsys):
    shutil.copytree(STUDENTS_DIR / "default", tmp_path / "default")
    assert main(["verify", "--into", str(tmp_path)]) == 0
    weights = tmp_path / "default" / WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    assert main(["verify", "--into", str(tmp_path)]) == 1
    assert "default: model.safetensors does not match the manifest's weights_sha256" in capsys.readouterr().err


def test_the_command_rejects_a_bad_name_and_a_bad_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["build", "Bad Name", "--into", str(tmp_path)])
    assert exited.value.code == 2 and "use lower-case letters" in capsys.readouterr().err
    assert main(["build", "x", "model=nope", "--into", str(tmp_path)]) == 2
    assert "Could not find 'model/nope'" in capsys.readouterr().err
    assert main(["build", "x", "model=smollm2_135m", "--into", str(tmp_path)]) == 2
    assert "only model=tiny students ship" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.slow
def test_a_build_from_scratch_ships_a_student_that_its_config_then_loads(tmp_path, monkeypatch, capsys):
    """A short build (no premise promise): warm-start, premise figures, manifest; the same config then loads it."""
    into, cache = tmp_path / "students", tmp_path / "cache"
    build = [
        "build",
        "quick",
        "debug=quick_warmstart",
        "--questions",
        "8",
        "--into",
        str(into),
        "--cache-dir",
        str(cache),
    ]
    assert main(build) == 0
    manifest = json.loads((into / "quick" / "manifest.json").read_text())
    assert manifest["overrides"] == ["debug=quick_warmstart"] and manifest["premises"]["questions"] == 8
    assert manifest["build_config"]["model"]["warmstart_steps"] == 40
    assert 0.0 <= manifest["premises"]["figures"]["socraticpo/wrong_first_attempts"] <= 1.0
    assert manifest["train_loss"] > 0 and manifest["built_on"]["cores"] >= 1
    assert main(["verify", "--into", str(into)]) == 0
    assert main(["list", "--into", str(into)]) == 0 and "quick " in capsys.readouterr().out

    import socratic_exp.models.tiny.shipped as shipped

    monkeypatch.setattr(shipped, "STUDENTS_DIR", into)
    quick = {"warmstart_examples": 2000, "warmstart_steps": 40}
    elsewhere = tmp_path / "other-cache"
    student = TinyModel(cache_dir=str(elsewhere), **quick).load(ArithmeticTask())
    assert student.info["shipped"] == "quick" and not elsewhere.exists()
    # use_shipped=false: the same settings from this machine's cache (the build above), not from the package
    local = TinyModel(cache_dir=str(cache), use_shipped=False, **quick).load(ArithmeticTask())
    assert "shipped" not in local.info and local.path.startswith(str(cache))


def test_a_run_refuses_a_shipped_student_whose_weights_changed(tmp_path, monkeypatch):
    from socratic_exp.core.errors import UserError
    from socratic_exp.models.tiny import shipped

    students = tmp_path / "students"
    shutil.copytree(STUDENTS_DIR / "default", students / "default")
    weights = students / "default" / WEIGHTS
    data = bytearray(weights.read_bytes())
    for offset in (-3, -2, -1):  # three bytes of the last tensor flipped: the file still loads, as another student
        data[offset] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(shipped, "STUDENTS_DIR", students)
    with pytest.raises(UserError) as err:
        TinyModel().load(ArithmeticTask())
    assert str(err.value).startswith(
        f"the shipped student default: {weights} is missing or does not match its manifest's weights_sha256 (fix: "
        "python -m socratic_exp.models.tiny verify"
    )
    weights.unlink()
    with pytest.raises(UserError, match="is missing or does not match"):
        TinyModel().load(ArithmeticTask())
