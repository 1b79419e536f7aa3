"""Run-folder helpers: reading a run folder back, metrics truncation on resume, secret redaction, finding an
interrupted run, run names."""

from __future__ import annotations

import json

import pytest

from socratic_exp.core.config import find_interrupted_run
from socratic_exp.core.metrics import MetricsFile, resumed_metrics
from socratic_exp.core.run_folder import RunRecord, read_jsonl, read_metrics, read_summary, run_name
from socratic_exp.core.secrets import REDACTED, redact


def test_metrics_file_truncates_after_a_step(tmp_path):
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    for step in (0, 1, 2, 2, 3):
        metrics.write(step, {"loss": float(step)})
    assert metrics.truncate_after(2) == 1
    assert [r["step"] for r in metrics.read()] == [0, 1, 2, 2]
    metrics.write(4, {"loss": float("nan")})
    assert metrics.read()[-1]["loss"] is None  # JSON has no NaN


def test_a_fresh_run_starts_its_metrics_file_on_the_main_process_alone(tmp_path):
    """A fresh attempt empties metrics.jsonl on the main process only: another process opens the file after the
    main one has logged the first evaluation, and must leave that line where it is."""
    MetricsFile(tmp_path / "metrics.jsonl").write(0, {"eval/greedy_acc": 0.5})
    other = resumed_metrics(tmp_path, None, evaluated=False, writes=False)
    assert [r["eval/greedy_acc"] for r in other.read()] == [0.5]
    main = resumed_metrics(tmp_path, None, evaluated=False, writes=True)
    assert main.read() == []


def test_a_run_folder_reads_back_what_the_run_wrote(tmp_path):
    assert (read_summary(tmp_path), read_metrics(tmp_path), read_jsonl(tmp_path / "viewpoints.jsonl")) == ({}, [], [])
    RunRecord(tmp_path, {"seed": 1}, ["seed=1"]).complete(0.5, steps=2)
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    metrics.write(1, {"loss": 0.25})
    metrics.write(2, {"eval/greedy_acc": 0.5})
    summary = read_summary(tmp_path)
    assert summary["status"] == "completed" and summary["objective"] == 0.5 and summary["steps"] == 2
    assert summary["overrides"] == ["seed=1"] and summary["config"] == {"seed": 1}
    assert [(r["step"], r.get("loss"), r.get("eval/greedy_acc")) for r in read_metrics(tmp_path)] == [
        (1, 0.25, None),
        (2, None, 0.5),
    ]
    table = tmp_path / "teacher_guidance.jsonl"
    table.write_text('{"step": 1, "guidance": "a"}\n\n{"step": 2, "guidance": "b"}\n')  # a blank line is skipped
    assert read_jsonl(table) == [{"step": 1, "guidance": "a"}, {"step": 2, "guidance": "b"}]


def test_secrets_are_redacted():
    config = {"teacher": {"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "base_url": "x"}, "token": None}
    clean = redact(config)
    assert clean["teacher"]["api_key"] == REDACTED
    assert clean["teacher"]["api_key_env"] == "OPENAI_API_KEY"
    assert clean["token"] is None and "sk-123" not in json.dumps(clean)


def test_run_record_failure_and_completion(tmp_path):
    record = RunRecord(tmp_path, {"teacher": {"api_key": "sk-1"}}, ["seed=1"])
    record.save()
    assert read_summary(tmp_path)["status"] == "running"
    record.fail(ValueError("boom"))
    failed = read_summary(tmp_path)
    assert failed["status"] == "failed" and failed["error"] == {"type": "ValueError", "message": "boom"}
    assert "sk-1" not in (tmp_path / "summary.json").read_text()
    record.complete(0.5, final={"eval/greedy_acc": 0.5})
    done = read_summary(tmp_path)
    assert done["status"] == "completed" and "error" not in done and done["objective"] == 0.5


def _fake_run(root, name, overrides, status, checkpoint=True):
    run = root / "2026-01-01" / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (run / "summary.json").write_text(json.dumps({"status": status}))
    if checkpoint:
        (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    return run


def test_find_interrupted_run_matches_overrides_and_status(tmp_path):
    _fake_run(tmp_path, "10-00-00-000001", ["seed=1"], "running")
    newest = _fake_run(tmp_path, "10-00-00-000002", ["seed=1", "resume=auto"], "failed")
    _fake_run(tmp_path, "10-00-00-000003", ["seed=1"], "completed")
    _fake_run(tmp_path, "10-00-00-000004", ["seed=2"], "running")
    _fake_run(tmp_path, "10-00-00-000005", ["seed=1"], "running", checkpoint=False)
    assert find_interrupted_run(tmp_path, ["seed=1", "resume=auto"]) == newest
    assert find_interrupted_run(tmp_path, ["seed=3", "resume=auto"]) is None


def test_run_name_shows_the_distinguishing_overrides():
    choices = {"algorithm": "grpo", "task": "arithmetic", "model": "tiny"}
    name = run_name(choices, ["algorithm=grpo", "algorithm.beta=0.1", "seed=1", "logger=none", "resume=auto"])
    assert name == "grpo-arithmetic-tiny|algorithm.beta=0.1,seed=1"
    assert run_name(choices, []) == "grpo-arithmetic-tiny"


# a list whose joined length passes the name's 128-character cut, so that a canary placed last would be cut off
# if the name were cut before redaction
_LONG = ["algorithm.beta=0.04", "algorithm.learning_rate=3e-06", "eval.max_samples=300", "seed=7",
         "teacher.max_hints=5", "sampler.alpha=0.5", "algorithm.temperature=0.9"]  # fmt: skip


@pytest.mark.parametrize("where", ["first", "last", "alone"])
@pytest.mark.parametrize(
    "secret",
    ["+algorithm.trl_args.hub_token=hf_CANARYname1234", "+teacher.extra_body.api_key=sk-CANARYname1234",
     "+teacher.extra_body={api_key: sk-CANARYname1234, top_k: 20}"],
    ids=["key", "nested-key", "dict-entry"],
)  # fmt: skip
def test_the_run_name_carries_no_secret_wherever_it_stands(secret, where):
    overrides = {"first": [secret, *_LONG], "last": [*_LONG, secret], "alone": [secret]}[where]
    name = run_name({"algorithm": "grpo", "task": "arithmetic", "model": "tiny"}, overrides)
    assert "CANARY" not in name
    if "{" in secret and where != "last":  # the dict's other entries still tell runs apart (last: past the cut)
        assert "extra_body={api_key: <redacted>, top_k: 20}" in name
    if where == "alone" and "{" not in secret:  # a secret-looking key tells no runs apart: it is left out
        assert name == "grpo-arithmetic-tiny"


def test_hydra_dumps_are_scrubbed(tmp_path):
    from socratic_exp.core.secrets import scrub_hydra_files

    hydra_dir = tmp_path / ".hydra"
    hydra_dir.mkdir()
    (hydra_dir / "config.yaml").write_text("teacher:\n  api_key: sk-secret\n  api_key_env: KEY\nseed: 1\n")
    (hydra_dir / "overrides.yaml").write_text("- +teacher.api_key=sk-secret\n- seed=1\n")
    (hydra_dir / "hydra.yaml").write_text("hydra:\n  overrides:\n    task:\n    - +teacher.api_key=sk-secret\n")
    scrub_hydra_files(tmp_path)
    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        text = (hydra_dir / name).read_text()
        assert "sk-secret" not in text and REDACTED in text
    assert "api_key_env: KEY" in (hydra_dir / "config.yaml").read_text()
    assert "seed=1" in (hydra_dir / "overrides.yaml").read_text()


def test_a_damaged_summary_reads_as_damaged_and_is_never_resumed(tmp_path):
    older = _fake_run(tmp_path, "10-00-00-000001", ["seed=1"], "running")
    damaged = _fake_run(tmp_path, "10-00-00-000002", ["seed=1"], "running")
    (damaged / "summary.json").write_text('{"status": "runn')  # a write cut short
    assert read_summary(damaged) == {
        "status": "damaged",
        "error": {
            "message": f"{damaged / 'summary.json'} is damaged (not valid JSON: Unterminated string starting at: "
            "line 1 column 12 (char 11))",
            "fix": "restore it from a copy, or move the run folder out of the way",
        },
    }
    assert find_interrupted_run(tmp_path, ["seed=1", "resume=auto"]) == older  # the damaged one is passed over


@pytest.mark.slow
def test_resuming_a_damaged_run_is_one_line_and_leaves_its_files(run_app, tmp_path):
    run = tmp_path / "outputs" / "2026-01-01" / "10-00-00-000000"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("[]\n")
    (run / "summary.json").write_bytes(b'{"status": "running", "conf')
    proc, _ = run_app(f"resume={run}", "logger=none", timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {run / 'summary.json'} is damaged (not valid JSON: Unterminated string starting at: line 1 column 23 "
        "(char 22)) "
        "(fix: restore it from a copy, or move the run folder out of the way)"
    )
    assert (run / "summary.json").read_bytes() == b'{"status": "running", "conf'  # kept as it was
