"""A checkpoint that cannot be read: the readability check names its file and what is wrong, a resume takes the
latest readable checkpoint (setting the damaged ones aside, with one warning line), and a run none of whose
checkpoints can be read is refused in one line."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from pathlib import Path

import pytest
from conftest import assert_refused, completed_in, copy_run, run_dirs

from socratic_exp.core.checkpoints import checkpoint_problem, last_checkpoint
from socratic_exp.core.config import find_interrupted_run
from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import read_metrics, read_summary

pytestmark = pytest.mark.fault

FAST = ("debug=fast",)  # checkpoints at steps 2 and 4


# --- hand-made checkpoints --------------------------------------------------------------------------------------
def safetensors_file(path: Path) -> None:
    """A safetensors file of one float32 tensor of 6 values: 8 bytes of header length, an 80-byte header (padded
    with spaces, as the format allows), 24 bytes of data: 112 bytes."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}).encode()
    path.write_bytes(struct.pack("<Q", 80) + header.ljust(80) + struct.pack("<6f", *range(6)))


def make_checkpoint(folder: Path, step: int) -> Path:
    """A checkpoint folder as the trainer writes one, in miniature."""
    import torch

    folder.mkdir(parents=True)
    safetensors_file(folder / "model.safetensors")
    torch.save({"state": {0: {"exp_avg": torch.zeros(6)}}, "param_groups": [{"lr": 0.1}]}, folder / "optimizer.pt")
    torch.save({"last_epoch": step}, folder / "scheduler.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    (folder / "tokenizer.json").write_text("{not read when resuming")  # a tokenizer file is never checked
    return folder


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    return make_checkpoint(tmp_path / "checkpoint-4", 4)


def test_a_whole_checkpoint_reads_and_its_files_load(checkpoint):
    import torch
    from safetensors.numpy import load_file

    assert checkpoint_problem(checkpoint) is None
    assert load_file(checkpoint / "model.safetensors")["w"].shape == (2, 3)  # the hand-made file is a real one
    assert torch.load(checkpoint / "optimizer.pt", weights_only=True)["param_groups"] == [{"lr": 0.1}]


def test_a_truncated_safetensors_file_is_named_with_its_length(checkpoint):
    weights = checkpoint / "model.safetensors"
    os.truncate(weights, 100)
    assert checkpoint_problem(checkpoint) == "model.safetensors: truncated: 100 of 112 bytes"
    os.truncate(weights, 50)
    assert checkpoint_problem(checkpoint) == (
        "model.safetensors: truncated: 50 of at least 88 bytes (its header alone is 80)"
    )


def test_a_safetensors_file_with_a_garbage_header_is_named(checkpoint):
    from safetensors.numpy import load_file

    weights = checkpoint / "model.safetensors"
    weights.write_bytes(b"\xff" * 8 + b"garbage" * 10)
    assert checkpoint_problem(checkpoint) == (
        "model.safetensors: not a safetensors file (its first 8 bytes announce a header of 18446744073709551615 bytes)"
    )
    weights.write_bytes(struct.pack("<Q", 16) + b"not json at all!" + bytes(24))
    assert checkpoint_problem(checkpoint) == (
        "model.safetensors: damaged header: not valid JSON (Expecting value at byte 0)"
    )
    with pytest.raises(Exception):  # noqa: B017  (what loading it does: the damage the check spares the run)
        load_file(weights)


def test_a_safetensors_file_longer_than_its_header_says_is_named(checkpoint):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b"\0\0\0\0")
    assert checkpoint_problem(checkpoint) == "model.safetensors: 116 bytes where its header accounts for 112"


def test_a_truncated_torch_file_is_named_without_unpickling_it(checkpoint):
    import torch

    optimizer = checkpoint / "optimizer.pt"
    half = optimizer.stat().st_size // 2
    os.truncate(optimizer, half)
    assert checkpoint_problem(checkpoint) == (
        f"optimizer.pt: truncated: {half} bytes, the end of its zip archive (the directory) is missing"
    )
    with pytest.raises(RuntimeError, match="central directory"):  # torch's own words name no file
        torch.load(optimizer, weights_only=True)


def test_a_torch_file_that_is_not_a_zip_archive_or_has_a_bad_pickle_is_named(checkpoint):
    scheduler = checkpoint / "scheduler.pt"
    scheduler.write_bytes(b"garbage " * 64)
    assert checkpoint_problem(checkpoint) == (
        "scheduler.pt: not a torch file (not a zip archive: File is not a zip file)"
    )
    optimizer = checkpoint / "optimizer.pt"  # its pickle overwritten in place: the CRC says so
    data = bytearray(optimizer.read_bytes())
    start = data.index(b"PK\x03\x04") + 30 + len("optimizer/data.pkl") + 64  # inside the first entry, the pickle
    data[start : start + 4] = b"\xff\xff\xff\xff"
    optimizer.write_bytes(bytes(data))
    problem = checkpoint_problem(checkpoint)
    assert problem is not None and problem.startswith("optimizer.pt: damaged: Bad CRC-32 for file"), problem


def test_a_truncated_or_missing_trainer_state_is_named(checkpoint):
    state = checkpoint / "trainer_state.json"
    state.write_text('{"global_step": 4, "log_history": [')
    assert checkpoint_problem(checkpoint) == "trainer_state.json: truncated: its JSON stops unfinished at byte 35"
    state.write_text("[]")
    assert checkpoint_problem(checkpoint) == "trainer_state.json: damaged: not an object with an integer global_step"
    state.unlink()
    assert checkpoint_problem(checkpoint) == "trainer_state.json: missing (the save did not finish)"


def test_a_checkpoint_without_weights_is_an_unfinished_save(checkpoint):
    (checkpoint / "model.safetensors").unlink()
    assert checkpoint_problem(checkpoint) == (
        "model.safetensors: missing, and no other model or adapter weights (the save did not finish)"
    )


# --- choosing the checkpoint a resume starts from ---------------------------------------------------------------
def test_resume_takes_the_latest_readable_checkpoint_and_sets_the_damaged_ones_aside(tmp_path, caplog):
    checkpoints = tmp_path / "run" / "checkpoints"
    make_checkpoint(checkpoints / "checkpoint-2", 2)
    os.truncate(make_checkpoint(checkpoints / "checkpoint-4", 4) / "model.safetensors", 100)
    (make_checkpoint(checkpoints / "checkpoint-10", 10) / "trainer_state.json").unlink()  # 10 comes after 4
    (checkpoints / "damaged-checkpoint-4").mkdir()  # an earlier resume set one of step 4 aside

    with caplog.at_level(logging.WARNING, logger="socratic_exp"):
        chosen = last_checkpoint(tmp_path / "run", writes=False)  # a rank other than the main one
    assert chosen == str(checkpoints / "checkpoint-2")
    assert (checkpoints / "checkpoint-4").is_dir() and not caplog.records  # the main process moves and warns

    with caplog.at_level(logging.WARNING, logger="socratic_exp"):
        chosen = last_checkpoint(tmp_path / "run")
    assert chosen == str(checkpoints / "checkpoint-2")
    assert [r.getMessage() for r in caplog.records] == [
        "checkpoint-10 cannot be read (trainer_state.json: missing (the save did not finish)); "
        "checkpoint-4 cannot be read (model.safetensors: truncated: 100 of 112 bytes); "
        "resuming from checkpoint-2, the latest readable one "
        "(checkpoint-10 is kept as damaged-checkpoint-10, checkpoint-4 is kept as damaged-checkpoint-4.2)"
    ]
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "checkpoint-2",
        "damaged-checkpoint-10",
        "damaged-checkpoint-4",
        "damaged-checkpoint-4.2",
    ]
    assert (checkpoints / "damaged-checkpoint-4.2" / "model.safetensors").stat().st_size == 100  # kept as it was


def test_resume_with_no_readable_checkpoint_is_refused_and_moves_nothing(tmp_path):
    run = tmp_path / "run"
    (make_checkpoint(run / "checkpoints" / "checkpoint-2", 2) / "trainer_state.json").write_text("")
    os.truncate(make_checkpoint(run / "checkpoints" / "checkpoint-4", 4) / "model.safetensors", 100)
    with pytest.raises(UserError) as refused:
        last_checkpoint(run)
    assert str(refused.value) == (
        f"no checkpoint of {run} can be read: checkpoint-4 (model.safetensors: truncated: 100 of 112 bytes), "
        "checkpoint-2 (trainer_state.json: empty (0 bytes)) (fix: restore the damaged files from a copy, or move the "
        f"checkpoint folders out of {run / 'checkpoints'} to train this run again from step 0)"
    )
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-4"]


def test_resume_auto_finds_a_run_whatever_its_checkpoints_hold(tmp_path):
    """The search reads no checkpoint: the run resumes from its latest readable one, or is refused in one line."""
    outputs = tmp_path / "outputs"
    for name, damaged in (("10-00-00", "checkpoint-4"), ("11-00-00", "none readable")):
        run = outputs / "2026-01-01" / name
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text("- debug=fast\n")
        (run / "summary.json").write_text(json.dumps({"status": "failed"}))
        for step in (2, 4):
            (run / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        assert find_interrupted_run(outputs, ["debug=fast", "resume=auto"]) == run, damaged


# --- end to end -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fast_run(tmp_path_factory, cache_dir) -> Path:
    """One completed ``debug=fast`` run (checkpoints 2 and 4) for the module's tests, each on its own copy."""
    return completed_in(tmp_path_factory.mktemp("fast_run"), cache_dir, *FAST)


def interrupted_after_step_4(fast_run: Path, outputs: Path) -> Path:
    """A copy of the run as if interrupted after its step-4 checkpoint: no final model, its summary running."""
    run_dir = copy_run(fast_run, outputs)
    shutil.rmtree(run_dir / "checkpoints" / "final")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.mark.slow
def test_resume_auto_goes_on_from_the_checkpoint_before_a_damaged_one(fast_run, run_app, tmp_path):
    run_dir = interrupted_after_step_4(fast_run, tmp_path / "outputs")
    weights = run_dir / "checkpoints" / "checkpoint-4" / "model.safetensors"
    full = weights.stat().st_size
    os.truncate(weights, full // 2)

    proc, outputs = run_app(*FAST, "resume=auto")
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in console, console[-3000:]
    warnings = [line for line in console.splitlines() if "cannot be read" in line]
    assert len(warnings) == 1 and warnings[0].endswith(
        f"checkpoint-4 cannot be read (model.safetensors: truncated: {full // 2} of {full} bytes); resuming from "
        "checkpoint-2, the latest readable one (checkpoint-4 is kept as damaged-checkpoint-4)"
    ), console[-3000:]
    assert run_dirs(outputs) == [run_dir]  # continued in the same folder
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 4
    # the lines logged after step 2 by the attempt that wrote the damaged checkpoint are logged again, once
    assert [r["step"] for r in read_metrics(run_dir) if "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in read_metrics(run_dir) if "eval/greedy_acc" in r] == [0, 2, 4]
    kept = run_dir / "checkpoints" / "damaged-checkpoint-4"
    assert (kept / "model.safetensors").stat().st_size == full // 2  # kept as it was
    assert checkpoint_problem(run_dir / "checkpoints" / "checkpoint-4") is None  # saved afresh


@pytest.mark.slow
def test_resume_with_every_checkpoint_damaged_is_refused_in_one_line(fast_run, run_app, tmp_path):
    run_dir = interrupted_after_step_4(fast_run, tmp_path / "outputs")
    (run_dir / "checkpoints" / "checkpoint-4" / "model.safetensors").write_bytes(b"garbage!" * 100)
    state = run_dir / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    state.write_text(state.read_text()[:100])
    metrics_before = (run_dir / "metrics.jsonl").read_text()

    proc, _ = run_app(*FAST, f"resume={run_dir}")
    assert_refused(
        proc,
        f"no checkpoint of {run_dir} can be read",
        "checkpoint-4 (model.safetensors: not a safetensors file",
        "checkpoint-2 (trainer_state.json: truncated: its JSON stops unfinished at byte 100)",
        "(fix: restore the damaged files from a copy, or move the checkpoint folders out of",
    )
    assert read_summary(run_dir)["status"] == "failed"
    assert (run_dir / "metrics.jsonl").read_text() == metrics_before  # nothing dropped
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["README.md", "checkpoint-2", "checkpoint-4"]
