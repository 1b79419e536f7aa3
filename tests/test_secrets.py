"""Secrets given on the command line reach no file, and W&B offline runs are valid for ``wandb sync``.

The end-to-end test runs with a canary in each place a user can put a secret (an override of a TRL argument, an
override of the teacher's request body, the environment variable the teacher reads its key from), interrupts and
resumes the run, and greps every file of the run folder (Hydra's dumps, summary.json, the log, metrics,
checkpoints with TRL's pickled training_args.bin, the W&B offline folders) and the console. The W&B offline files
are read back with W&B's own reader (``wandb leet inspect --json``, wandb-core's reader of the .wandb log), not ours.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import app_environment, file_contents, interrupt_after_step_2, run_dirs
from openai_stub import StubServer

from socratic_exp.core.run_folder import read_jsonl, read_summary
from socratic_exp.core.secrets import (
    REDACTED,
    is_secret_key,
    redact,
    redact_overrides,
    scrub_hydra_files,
    secret_values,
)

HUB_CANARY = "hf_CANARYhub7f3a9c7f3a9c"
BODY_CANARY = "sk-CANARYbody5e1d5e1d"
ENV_CANARY = "sk-CANARYenv0b2c0b2c0b2c"
CANARIES = (HUB_CANARY, BODY_CANARY, ENV_CANARY)


# --- which keys are secret ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key",
    ["hub_token", "+algorithm.trl_args.hub_token", "api_key", "apiKey", "Authorization", "password", "client_secret",
     "auth_header", "+teacher.extra_body.api_key", "access_key", "credentials", "token"],
)  # fmt: skip
def test_secret_looking_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["max_new_tokens", "max_tokens", "forking_tokens", "api_key_env", "teacher.api_key_env", "pad_token",
     "eos_token_id", "author", "keys", "tokenizer", "monkey", "seed"],
)  # fmt: skip
def test_settings_that_only_look_like_secrets_are_kept(key):
    assert not is_secret_key(key)


def test_redact_keeps_counts_of_tokens():
    config = {"eval": {"max_new_tokens": 64}, "algorithm": {"trl_args": {"hub_token": "hf_x"}}, "token": None}
    assert redact(config) == {
        "eval": {"max_new_tokens": 64},
        "algorithm": {"trl_args": {"hub_token": REDACTED}},
        "token": None,
    }


def test_secret_values_come_from_secret_keys_and_from_secret_entries_of_dict_values():
    overrides = [
        "+algorithm.trl_args.hub_token=hf_abcdef",
        "seed=1",
        "+teacher.extra_body={api_key: sk-1234, top_k: 20}",
        "teacher.api_key_env=MY_KEY",
        "+x.token=null",
    ]
    assert secret_values(overrides) == ["hf_abcdef", "sk-1234"]
    assert redact_overrides(overrides[:2]) == [f"+algorithm.trl_args.hub_token={REDACTED}", "seed=1"]


def test_hydra_dumps_lose_the_secret_everywhere_including_override_dirname(tmp_path):
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "hydra.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - +algorithm.trl_args.hub_token=hf_abcdef\n"
        "  job:\n    override_dirname: +algorithm.trl_args.hub_token=hf_abcdef,seed=1\n"
    )
    (tmp_path / "multirun.yaml").write_text("hydra:\n  job:\n    override_dirname: x.hub_token=hf_abcdef\n")
    scrub_hydra_files(tmp_path, ["hf_abcdef"])
    for path in (hydra / "hydra.yaml", tmp_path / "multirun.yaml"):
        assert "hf_abcdef" not in path.read_text() and REDACTED in path.read_text()
    assert "seed=1" in (hydra / "hydra.yaml").read_text()


def test_checkpoint_arguments_are_rewritten_without_the_token(tmp_path):
    import torch

    from socratic_exp.core.secrets import scrub_training_args

    args = _Args(output_dir="out", hub_token="hf_abcdef", hub_model_id="me/model")
    torch.save(args, tmp_path / "training_args.bin")
    scrub_training_args(args, tmp_path)
    saved = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert saved.hub_token is None and saved.hub_model_id == "me/model" and saved.output_dir == "out"
    assert args.hub_token == "hf_abcdef"  # the trainer keeps its own (push_to_hub still works)
    assert b"hf_abcdef" not in file_contents(tmp_path / "training_args.bin")


@dataclasses.dataclass
class _Args:
    output_dir: str
    hub_token: str | None
    hub_model_id: str


# --- end to end ---------------------------------------------------------------------------------------------------
def _leaks(paths: list[Path], texts: list[str]) -> list[str]:
    found = []
    for root in paths:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file():
                data = file_contents(path)
                found += [f"{canary} in {path}" for canary in CANARIES if canary.encode() in data]
    found += [f"{canary} in the console" for canary in CANARIES for text in texts if canary in text]
    return found


def _records(wandb_file: Path) -> list[dict]:
    """The records of a .wandb transaction log, as W&B's own reader prints them."""
    proc = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]


def _history(records: list[dict]) -> list[dict]:
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


@pytest.fixture(scope="module")
def canary_run(tmp_path_factory, cache_dir):
    """A run with a canary in each place, interrupted after its step-2 checkpoint and resumed (resume=auto)."""
    root = tmp_path_factory.mktemp("canary")
    env = {
        **os.environ,
        "SOCRATIC_EXP_OUTPUTS": str(root / "outputs"),
        "SOCRATIC_EXP_CACHE": str(cache_dir),
        "WANDB_MODE": "offline",
        "HYDRA_FULL_ERROR": "0",
        "SX_CANARY_KEY": ENV_CANARY,
    }
    with StubServer(api_key=ENV_CANARY) as server:
        overrides = [  # one canary first, one last (the run name is cut at 128 characters: neither may hide)
            f"+algorithm.trl_args.hub_token={HUB_CANARY}",
            "debug=quick_warmstart",
            "logger=wandb",
            "algorithm.log_completions=true",
            "teacher=blackbox",
            f"teacher.model={server.model}",
            f"teacher.base_url={server.url}",
            "teacher.api_key_env=SX_CANARY_KEY",
            f"teacher.cache_dir={root / 'teacher-cache'}",
            f"+teacher.extra_body={{api_key: {BODY_CANARY}, top_k: 20}}",
        ]

        def run(*extra: str) -> subprocess.CompletedProcess:
            command = [sys.executable, "-m", "socratic_exp", *overrides, *extra]
            return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=900)

        first = run()
        assert first.returncode == 0, first.stderr[-3000:]
        (run_dir,) = run_dirs(root / "outputs")
        first_offline = sorted((run_dir / "wandb").glob("offline-run-*"))
        position = json.loads((run_dir / "checkpoints" / "checkpoint-2" / "tracker_position.json").read_text())
        # an interruption after the step-2 checkpoint: the run goes on from there
        interrupt_after_step_2(run_dir)
        second = run("resume=auto")
        assert second.returncode == 0, second.stderr[-3000:]
        assert server.requests > 0
    return {"run_dir": run_dir, "procs": [first, second], "first_offline": first_offline, "position": position,
            "reply": server.reply}  # fmt: skip


@pytest.mark.slow
def test_no_canary_reaches_any_file_or_the_console(canary_run):
    run_dir, procs = canary_run["run_dir"], canary_run["procs"]
    assert (run_dir / ".hydra" / "hydra.yaml").is_file()
    # every checkpoint's pickled TRL arguments (their run_name is built from the overrides) is among the files read
    saved_args = {path.parent.name for path in run_dir.rglob("training_args.bin")}
    assert {"checkpoint-2", "checkpoint-4", "final"} <= saved_args
    texts = [p.stdout + p.stderr for p in procs]
    assert _leaks([run_dir], texts) == []
    summary = read_summary(run_dir)
    assert summary["config"]["algorithm"]["trl_args"]["hub_token"] == REDACTED
    assert summary["config"]["teacher"]["extra_body"] == {"api_key": REDACTED, "top_k": 20}
    assert summary["config"]["eval"]["max_new_tokens"] == 64  # a count of tokens is not a secret
    assert summary["run_name"].startswith("socraticpo-arithmetic-tiny|debug=quick_warmstart,")
    assert f"+teacher.extra_body={{api_key: {REDACTED}, top_k: 20}}" in summary["overrides"]


@pytest.mark.slow
def test_the_blackbox_teachers_guidance_and_requests_are_in_the_run_folder(canary_run):
    """The teacher behind an authenticated server (its key read from the environment) guided the run: its replies
    are the guidance recorded, and its requests and the assisted accuracy are among the final figures."""
    run_dir = canary_run["run_dir"]
    final = read_summary(run_dir)["final"]
    assert "eval/assisted_acc" in final and "eval/teacher/requests" in final
    rows = read_jsonl(run_dir / "teacher_guidance.jsonl")
    assert rows and {row["guidance"] for row in rows} == {canary_run["reply"]}


@pytest.mark.slow
def test_wandb_offline_run_reads_back_with_metrics_config_and_tables(canary_run):
    (first,) = canary_run["first_offline"]
    records = _records(next(first.glob("run-*.wandb")))
    history = _history(records)
    assert any("train/reward" in row and "train/loss" in row for row in history)  # TRL's metrics
    assert any("eval/greedy_acc" in row for row in history)  # ours
    # tables: history cells of type table-file whose JSON sits in the offline folder (what sync uploads)
    tables = {
        key.removesuffix("._type"): row[key.replace("._type", ".path")]
        for row in history
        for key, value in row.items()
        if key.endswith("._type") and value == "table-file"
    }
    assert {"teacher_guidance", "completions"} <= set(tables)
    assert all((first / "files" / path).is_file() for path in tables.values())
    # the config: ours (redacted) in the run record, TRL's training arguments (masked by transformers) after it
    (run,) = [r["run"] for r in records if r.get("type") == "run"]
    ours = run["config"]["update"]
    assert ours["teacher"]["extra_body"] == {"api_key": REDACTED, "top_k": 20} and ours["eval"]["max_new_tokens"] == 64
    assert ours["algorithm"]["trl_args"] == {"hub_token": REDACTED}
    trl = {k: v for r in records if r.get("type") == "config" for k, v in r["config"]["update"].items()}
    assert trl["hub_token"] == "<HUB_TOKEN>" and "learning_rate" in trl
    every_record = json.dumps(records)
    assert not [canary for canary in CANARIES if canary in every_record]


@pytest.mark.slow
def test_a_resumed_offline_run_continues_the_same_run_without_duplicated_steps(canary_run):
    run_dir, position = canary_run["run_dir"], canary_run["position"]["position"]
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and folders[0] == canary_run["first_offline"][0]
    run_id = read_summary(run_dir)["wandb_run_id"]
    assert all(folder.name.endswith(run_id) for folder in folders)
    first, second = (_records(next(folder.glob("run-*.wandb"))) for folder in folders)
    (start,) = [r["run"] for r in second if r.get("type") == "run"]
    assert start["run_id"] == run_id and start["branch_point"] == {"metric": "_step", "run": run_id, "value": position}
    kept = [row for row in _history(first) if row["_step"] <= position]
    resumed = _history(second)
    assert min(row["_step"] for row in resumed) == position + 1  # W&B's steps go on from the checkpoint's
    trained = [row["train/global_step"] for row in kept + resumed if "train/loss" in row]
    assert trained == [1, 2, 3, 4]  # each training step once, in order


@pytest.mark.parametrize(
    "overrides",
    [
        [f"teacher.api_key={BODY_CANARY}"],  # a key without +: Hydra's error suggests the override, value and all
        ["seed=1", f"algorithm.trl_args.hub_token={HUB_CANARY}"],  # the same, last
        [f"+teacher.extra_body={{api_key: {BODY_CANARY}", "seed=1"],  # a syntax error: Hydra echoes the input, first
        [f"+teacher.api_key={BODY_CANARY}"],  # an unknown key with +: our own one-line error
    ],
    ids=["without-plus", "without-plus-last", "syntax-error", "unknown-key"],
)
def test_hydras_own_errors_echo_no_secret(tmp_path, overrides):
    env = app_environment(tmp_path / "outputs", tmp_path / "cache")
    command = [sys.executable, "-m", "socratic_exp", "dry_run=true", *overrides]
    proc = subprocess.run(command, cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    shown = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in shown
    assert BODY_CANARY not in shown and HUB_CANARY not in shown
    assert "<redacted>" in shown or "unknown key" in shown, shown  # the error is still there, minus the secret
    files = [p for p in (tmp_path / "outputs").rglob("*") if p.is_file()] if (tmp_path / "outputs").exists() else []
    assert [f for f in files if BODY_CANARY in f.read_text(errors="replace")] == []
