"""Input and file-system faults, each refused in one line that names what is wrong and how to fix it: malformed
data rows and data files (file, line, field and what is wrong), an override key too long to be a config key, a
full disk or a file in the way during a run (the user's to fix: exit 2, the run recorded as failed and resumable),
and a run folder that cannot be created."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from conftest import app_in, assert_refused

from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import read_summary
from socratic_exp.tasks.aime24 import Aime24Task
from socratic_exp.tasks.aime25 import Aime25Task
from socratic_exp.tasks.amc23 import Amc23Task
from socratic_exp.tasks.arithmetic import ArithmeticTask
from socratic_exp.tasks.dapo_math import DapoMathTask
from socratic_exp.tasks.gsm8k import Gsm8kTask
from socratic_exp.tasks.math500 import Math500Task
from socratic_exp.tasks.multiarith import MultiArithTask
from socratic_exp.tasks.openmath import OpenMathTask
from socratic_exp.tasks.sciknoweval import SciKnowEvalTask

pytestmark = pytest.mark.fault

GSM8K_ROW = '{"question": "What is 2+2?", "answer": "2+2=4\\n#### 4"}\n'
SCI_ROW = {
    "question": "Which is a noble gas?",
    "choices": {"text": ["neon", "iron"], "label": ["A", "B"]},
    "answerKey": "A",
    "type": "mcq-4-choices",
    "domain": "Chemistry",
    "details": {"level": "L3"},
}
OUTPUTS_FIX = "$SOCRATIC_EXP_OUTPUTS=<folder>"


def loader(cls: type, split: str, path: Path):
    """The task reading ``path`` as its ``split`` (the arithmetic task generating few rows besides)."""
    sizes = {"train_size": 10, "eval_size": 10, "probe_size": 0} if cls is ArithmeticTask else {}
    return cls(data_files={split: str(path)}, **sizes)


def refused_rows(task, split: str) -> str:
    """The one line a task's loader refuses its rows with (``arithmetic`` reads its files when it builds)."""
    with pytest.raises(UserError) as raised:
        task.build() if isinstance(task, ArithmeticTask) else task.load_rows(split)
    line = str(raised.value)
    assert "\n" not in line and "(fix: " in line, line
    return line


# --- 1. data rows: file, line, field and what is wrong ---------------------------------------------------------
ROW_FAULTS = [  # (task, split, a bad row after a good one (or alone), what the line says after "<file>:<line>: ")
    (Gsm8kTask, "eval", GSM8K_ROW + '{"question": "q", "answer": null}\n', "malformed gsm8k row: 'answer' is null"),
    (Gsm8kTask, "eval", GSM8K_ROW + '{"question": "q"}\n', "malformed gsm8k row: no 'answer' field (has question)"),
    (Gsm8kTask, "eval", GSM8K_ROW + '{"question": "q", "answer": ["4"]}\n',
     "malformed gsm8k row: 'answer' is a list, not a string or a number"),
    (Gsm8kTask, "eval", GSM8K_ROW + '{"question": " ", "answer": "#### 4"}\n',
     "malformed gsm8k row: 'question' is empty"),
    (Gsm8kTask, "eval", GSM8K_ROW + '{"question": "q", "answer": NaN}\n',
     "malformed gsm8k row: 'answer' is nan, not a finite number"),
    (MultiArithTask, "eval", '{"input": "q", "target": 3}\n{"input": "q2", "target": null}\n',
     "malformed multiarith row: 'target' is null"),
    (MultiArithTask, "eval", '{"input": "q", "target": 3}\n{"input": "q2", "target": true}\n',
     "malformed multiarith row: 'target' is true (a boolean), not a string or a number"),
    (Math500Task, "eval", '{"problem": "p", "answer": "1"}\n{"problem": "p2", "expected_answer": null}\n',
     "malformed math500 row: 'expected_answer' is null"),
    (Math500Task, "eval", '{"problem": "p", "answer": "1"}\n{"problem": "p2", "answer": "2", "solution": {}}\n',
     "malformed math500 row: 'solution' is an object, not a string or a number"),
    (Aime24Task, "eval", '{"problem": "p", "answer": "7"}\n{"problem": "p2", "answer": null}\n',
     "malformed aime24 row: 'answer' is null"),
    (Aime25Task, "eval", '{"problem": "p", "answer": "7"}\n{"problem": "p2", "answer": ""}\n',
     "malformed aime25 row: 'answer' is empty"),
    (Amc23Task, "eval", '{"problem": "p", "answer": 27.0}\n{"problem": "p2", "answer": Infinity}\n',
     "malformed amc23 row: 'answer' is inf, not a finite number"),
    (DapoMathTask, "train", '{"prompt": "p", "answer": "1"}\n{"prompt": "p2", "reward_model": {"ground_truth": [1]}}\n',
     "malformed dapo_math row: 'reward_model.ground_truth' is a list, not a string or a number"),
    (DapoMathTask, "train", '{"prompt": "p", "answer": "1"}\n{"prompt": [{"role": "system", "content": "x"}]}\n',
     "malformed dapo_math row: 'prompt' is a list without a user message"),
    (OpenMathTask, "train", '{"problem": "p", "expected_answer": "1"}\n{"problem": null, "expected_answer": "2"}\n',
     "malformed openmath row: 'problem' is null"),
    (SciKnowEvalTask, "train", json.dumps(SCI_ROW) + "\n" + json.dumps({**SCI_ROW, "answerKey": None}) + "\n",
     "malformed sciknoweval row: 'answerKey' is null"),
    (SciKnowEvalTask, "train", json.dumps(SCI_ROW) + "\n" + json.dumps({**SCI_ROW, "choices": {"text": ["a"]}}) + "\n",
     "malformed sciknoweval row: choices.label is missing, not a list of options"),
    (ArithmeticTask, "eval", '{"expression": "1+2"}\n{"expression": null}\n',
     "malformed arithmetic row: 'expression' is null"),
    (ArithmeticTask, "eval", '{"expression": "1+2"}\n{"expression": ["1+2"]}\n',
     "malformed arithmetic row: 'expression' is a list, not a string or a number"),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "split", "content", "problem"), ROW_FAULTS)
def test_a_malformed_row_names_its_file_line_field_and_fault(tmp_path, cls, split, content, problem):
    path = tmp_path / "rows.jsonl"
    path.write_text(content)
    line = refused_rows(loader(cls, split, path), split)
    assert line.startswith(f"{path}:2: {problem} (fix: "), line


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("cut.jsonl", GSM8K_ROW * 7 + '{"question": "q", "answer": "#### ', ":8: not valid JSON (Unterminated string"),
        ("cut.json", "[\n" + GSM8K_ROW.replace("\n", ",\n") + '  {"question": "q", "ans', ":3: not valid JSON ("),
        ("items.json", "[\n" + GSM8K_ROW.replace("\n", ",\n") + '  {"question": "q", "answer": null}\n]',
         ":3 (item 1): malformed gsm8k row: 'answer' is null"),
        ("list.jsonl", GSM8K_ROW + '["q", "#### 4"]\n', ":2: a list, not a JSON object"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_json_lines_or_json_names_the_line(tmp_path, name, content, problem):
    """Truncated in the middle of a row (past the rows a dry run reads), or rows that are not objects."""
    path = tmp_path / name
    path.write_text(content)
    line = refused_rows(Gsm8kTask(data_files={"eval": str(path)}), "eval")
    assert line.startswith(f"{path}{problem}"), line


@pytest.mark.parametrize(
    ("cls", "split"),
    [(Gsm8kTask, "eval"), (MultiArithTask, "eval"), (Math500Task, "eval"), (Aime24Task, "eval"),
     (Aime25Task, "eval"), (Amc23Task, "eval"), (DapoMathTask, "train"), (OpenMathTask, "train"),
     (SciKnowEvalTask, "train"), (ArithmeticTask, "eval")],
)  # fmt: skip
def test_every_loader_refuses_bytes_that_are_not_utf8_past_the_dry_runs_peek(tmp_path, cls, split):
    """A dry run reads a file's first 64 KiB; past them the loader names the line that is not text."""
    path = tmp_path / "late_binary.jsonl"
    row = '{"expression": "1+2", "question": "q", "answer": "#### 3", "problem": "p", "input": "q", "target": 3}\n'
    path.write_bytes(row.encode() * 1000 + b"\x89PNG\r\n\x1a\n\x00\xff\n")
    assert path.stat().st_size > 1 << 16
    line = refused_rows(loader(cls, split, path), split)
    assert line.startswith(f"{path}:1001: "), line
    assert "not a text file (not UTF-8) (fix: give a JSON Lines, JSON or parquet file)" in line, line


def test_a_sciknoweval_data_dir_file_gets_the_same_checks(tmp_path):
    level = tmp_path / "Chemistry" / "L3"
    level.mkdir(parents=True)
    (level / "a.jsonl").write_text(json.dumps(SCI_ROW) + "\n" + json.dumps({**SCI_ROW, "question": None}) + "\n")
    line = refused_rows(SciKnowEvalTask(data_dir=str(tmp_path)), "all")
    assert line.startswith(f"{level / 'a.jsonl'}:2: malformed sciknoweval row: 'question' is null (fix: "), line


def test_a_data_file_with_a_name_too_long_is_refused_at_validation(tmp_path):
    path = f"{tmp_path}/{'d' * 300}.jsonl"
    with pytest.raises(UserError) as raised:
        Gsm8kTask(data_files={"eval": path}).validate()
    assert f"{path!r} for split 'eval' cannot be read (File name too long)" in str(raised.value)


def test_a_run_with_a_null_answer_is_refused_in_one_line(run_app, tmp_path):
    """The command line: the row's file and line, the field, and ``null`` (not a missing field); the run is failed."""
    train, held_out = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text(GSM8K_ROW + '{"question": "What is 3+3?", "answer": null}\n')
    held_out.write_text(GSM8K_ROW)
    proc, outputs = run_app(
        "debug=fast", "logger=none", "task=gsm8k", f"task.data_files={{train:{train},eval:{held_out}}}"
    )
    line = assert_refused(proc, f"{train}:2: malformed gsm8k row: 'answer' is null", "(fix: ")
    assert "no 'answer' field" not in line
    (summary_file,) = outputs.glob("*/*/summary.json")
    summary = read_summary(summary_file.parent)
    assert summary["status"] == "failed" and "'answer' is null" in summary["error"]["message"]
    assert not (summary_file.parent / "checkpoints").exists()


@pytest.mark.parametrize("kind", ["binary", "folder"])
def test_a_dry_run_refuses_a_binary_data_file_or_a_folder(run_app, tmp_path, kind):
    path = tmp_path / "test.jsonl"
    if kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 10)
    else:
        path.mkdir()
    proc, _ = run_app("dry_run=true", "task=math500", f"task.data_files={{eval:{path}}}")
    assert_refused(proc, str(path), "is not a text file (not UTF-8)" if kind == "binary" else "is a folder")


# --- 2. an override key too long for a file name ----------------------------------------------------------------
@pytest.mark.parametrize("override", ["+" + "a" * 300 + "=1", "a" * 300 + "=1", "+task." + "a" * 300 + "=1"])
def test_an_override_key_too_long_is_no_config_key(run_app, override):
    proc, outputs = run_app("dry_run=true", override)
    line = assert_refused(proc, "its key is too long to be a config key", "python -m socratic_exp --help")
    assert line.startswith(f"error: the override {override[:57]}... ({len(override) - 2} characters)=...: "), line
    assert "run folder" not in line and "site-packages" not in line
    assert not outputs.exists()  # nothing written


@pytest.mark.parametrize("override", ["+nonexistent.password=sk-canary-0123456789", "+seeed=1"])
def test_an_unknown_top_level_key_added_with_a_plus_is_refused(run_app, override):
    """Hydra adds any key given with ``+``; one that no setting or option has would be carried along unread."""
    key = override[1:].split("=")[0].split(".")[0]
    proc, _ = run_app("dry_run=true", override)
    assert_refused(proc, f"{key}: unknown key: no setting or option has it", f"drop +{key}")
    assert "sk-canary" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (IsADirectoryError(errno.EISDIR, "Is a directory", "{run}/.summary.json.tmp"),
         "cannot write {run}/.summary.json.tmp: a folder is in the way (Is a directory) (fix: move it away)"),
        (PermissionError(errno.EACCES, "Permission denied", "{tmp}/cache/model"),
         "cannot write {tmp}/cache/model (Permission denied) (fix: make it writable"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "{tmp}/gone"),
         "cannot use {tmp}/gone (No such file or directory) (fix: check the path and its permissions)"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "{outputs}/2026-01-02/03-04-05-000006"),
         "cannot create the run folder {outputs}/2026-01-02/03-04-05-000006 (No such file or directory) (fix: "),
    ],
)  # fmt: skip
def test_a_file_error_names_the_run_folder_only_when_it_is_one(tmp_path, monkeypatch, fault, expected):
    """Hydra's stage (before the run reports its own failures): a file inside the pinned run folder, or elsewhere,
    is named as a file; only a run folder is called one."""
    from socratic_exp.core.config import hydra_error_line

    places = {"run": tmp_path / "run", "tmp": tmp_path, "outputs": tmp_path / "outputs"}
    monkeypatch.setenv("SOCRATIC_EXP_RUN_DIR", str(places["run"]))
    monkeypatch.setenv("SOCRATIC_EXP_OUTPUTS", str(places["outputs"]))
    monkeypatch.setattr("sys.argv", ["socratic_exp", "dry_run=true"])
    fault.filename = fault.filename.format(**places)
    assert hydra_error_line(fault).startswith(expected.format(**places))


def test_a_resume_path_too_long_names_the_override(run_app, tmp_path):
    folder = f"{tmp_path}/{'r' * 300}"
    proc, outputs = run_app("dry_run=true", f"resume={folder}")
    line = assert_refused(proc, "resume=", "File name too long", "(fix: check the path)")
    assert "OSError raised while resolving" not in line and "run folder" not in line
    assert not outputs.exists()


# --- 3. a full disk, a file that cannot be written, a file in the way, during a run ------------------------------
@pytest.fixture(scope="module")
def dev_full() -> str:
    """/dev/full, where every write fails with ENOSPC: a full disk that tests can point a file at."""
    if not stat.S_ISCHR(os.stat("/dev/full").st_mode):  # a test elsewhere may have replaced it with a regular file
        pytest.skip("/dev/full is not the full device on this machine (restore it: mknod -m 666 /dev/full c 1 7)")
    return "/dev/full"


@pytest.fixture(scope="module")
def full_disk_run(tmp_path_factory, cache_dir, dev_full):
    """A run whose teacher-guidance table is on a full disk (a symlink to /dev/full: every write fails with ENOSPC):
    it fails at its first evaluation's table."""
    root = tmp_path_factory.mktemp("full_disk")
    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "teacher_guidance.jsonl").symlink_to(dev_full)
    overrides = ("debug=fast", "logger=none", "eval.max_samples=4")
    proc, _ = app_in(root, cache_dir, *overrides, env={"SOCRATIC_EXP_RUN_DIR": str(run_dir)})
    return proc, run_dir


def test_a_full_disk_during_a_run_is_the_users_fault_in_one_line(full_disk_run):
    proc, run_dir = full_disk_run
    line = assert_refused(proc)
    assert line == (
        f"error: cannot write {run_dir / 'teacher_guidance.jsonl'} (No space left on device) (fix: free space on its "
        f"disk (or use a folder on another disk: {OUTPUTS_FIX}), then resume={run_dir})"
    )


def test_a_full_disk_leaves_the_run_failed_and_resumable(full_disk_run):
    _, run_dir = full_disk_run
    summary = read_summary(run_dir)
    assert summary["status"] == "failed"
    assert summary["error"]["message"] == f"cannot write {run_dir / 'teacher_guidance.jsonl'} (No space left on device)"
    assert "traceback" not in summary  # not a bug
    assert not (run_dir / "checkpoints").exists() and (run_dir / ".hydra").is_dir()  # resume= takes the folder


def test_a_summary_on_a_full_disk_is_named_and_the_run_recorded_failed(run_app, tmp_path, dev_full):
    """summary.json's first write fails (its temporary copy is on a full disk); the failure is still recorded."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".summary.json.tmp").symlink_to(dev_full)
    proc, _ = run_app("debug=fast", "logger=none", env={"SOCRATIC_EXP_RUN_DIR": str(run_dir)})
    assert_refused(proc, f"cannot write {run_dir / 'summary.json'} (No space left on device)", f"resume={run_dir}")
    assert read_summary(run_dir)["status"] == "failed"
    assert not (run_dir / ".summary.json.tmp").exists()  # no partial copy left


def test_a_summary_that_can_never_be_written_still_ends_in_one_line(run_app, tmp_path):
    """The failure cannot be recorded either (a folder where summary.json's temporary copy goes): one line, exit 2."""
    run_dir = tmp_path / "run"
    (run_dir / ".summary.json.tmp").mkdir(parents=True)
    proc, _ = run_app("debug=fast", "logger=none", env={"SOCRATIC_EXP_RUN_DIR": str(run_dir)})
    assert_refused(
        proc,
        f"cannot write {run_dir / '.summary.json.tmp'}: a folder is in the way (Is a directory) (fix: move it away",
    )
    assert not (run_dir / "summary.json").exists()


def _fault(kind: int, path: Path) -> OSError:
    return OSError(kind, os.strerror(kind), str(path))


def _in_the_way(run_dir: Path, what: str) -> OSError:
    """The OSError the system raises for a file where a folder should be, or a folder where a file should be."""
    try:
        if what == "ENOTDIR":
            (run_dir / "checkpoints").write_text("")
            os.makedirs(run_dir / "checkpoints" / "checkpoint-2")
        elif what == "EEXIST":
            (run_dir / "checkpoints").write_text("")
            os.makedirs(run_dir / "checkpoints", exist_ok=True)  # transformers' Trainer makes its output folder so
        else:
            (run_dir / "metrics.jsonl").mkdir()
            open(run_dir / "metrics.jsonl", "a").close()
    except OSError as err:
        return err
    raise AssertionError("no error")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("ENOSPC", "cannot write {file} (No space left on device) (fix: free space on its disk"),
        ("EDQUOT", "cannot write {file} (Disk quota exceeded) (fix: free space on its disk"),
        ("EFBIG", "cannot write {file} (File too large) (fix: free space on its disk"),
        ("EROFS", "cannot write {file} (Read-only file system) (fix: make it writable (or use a writable folder"),
        ("EACCES", "cannot write {file} (Permission denied) (fix: make it writable"),
        ("EPERM", "cannot write {file} (Operation not permitted) (fix: make it writable"),
        ("ENAMETOOLONG", "cannot create {file} (File name too long) (fix: use a folder with a shorter path"),
        ("ENOTDIR", "cannot create {run}/checkpoints/checkpoint-2: the file {run}/checkpoints is in the way (Not a "
                    "directory) (fix: move {run}/checkpoints away"),
        ("EEXIST", "cannot create {run}/checkpoints: the file {run}/checkpoints is in the way (File exists) (fix: "
                   "move {run}/checkpoints away"),
        ("EISDIR", "cannot write {run}/metrics.jsonl: a folder is in the way (Is a directory) (fix: move it away"),
    ],
)  # fmt: skip
def test_each_file_system_fault_ends_the_run_as_the_users_error(tmp_path, capfd, kind, expected):
    from socratic_exp.runtime.lifecycle import Job, end_failed

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    file = run_dir / "metrics.jsonl"
    err = _in_the_way(run_dir, kind) if kind in ("ENOTDIR", "EEXIST", "EISDIR") else _fault(getattr(errno, kind), file)
    job = Job(run_dir=run_dir, multirun=False, overrides=[], choices={}, is_main=True)
    with pytest.raises(SystemExit) as exited:
        try:
            raise err
        except OSError as raised:
            end_failed(job, None, {}, raised)
    assert exited.value.code == 2
    (line,) = [line for line in capfd.readouterr().err.splitlines() if line.startswith("error:")]
    assert line.startswith("error: " + expected.format(file=file, run=run_dir)), line
    if kind != "ENAMETOOLONG":  # a shorter path is a fresh run's fix
        assert line.endswith(f", then resume={run_dir})"), line
    summary = read_summary(run_dir)
    assert summary["status"] == "failed" and "traceback" not in summary


def test_another_os_error_is_still_a_bug(tmp_path, capfd):
    from socratic_exp.runtime.lifecycle import Job, end_failed

    job = Job(run_dir=tmp_path, multirun=False, overrides=[], choices={}, is_main=True)
    with pytest.raises(SystemExit) as exited:
        try:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nowhere/model.bin")
        except OSError as raised:
            end_failed(job, None, {}, raised)
    assert exited.value.code == 1
    assert "error: FileNotFoundError: " in capfd.readouterr().err
    assert "traceback" in read_summary(tmp_path)


# --- 4. a run folder that cannot be created -------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["proc", "under a file", "outputs is a file", "run dir is a file"])
def test_a_run_folder_that_cannot_be_created_is_one_line(run_app, tmp_path, where):
    blocker = tmp_path / "a_file"
    blocker.write_text("kept")
    overrides, env = ["dry_run=true"], {}
    if where == "proc":
        overrides.append("hydra.run.dir=/proc/socratic_exp_run")
        folder = "/proc/socratic_exp_run (No such file or directory)"
    elif where == "under a file":
        overrides.append(f"hydra.run.dir={blocker}/run")
        folder = f"{blocker}/run (a file is in the way)"
    elif where == "outputs is a file":
        env["SOCRATIC_EXP_OUTPUTS"] = str(blocker)
        folder = f"{blocker}/"
    else:
        env["SOCRATIC_EXP_RUN_DIR"] = str(blocker)
        folder = f"{blocker} (a file is in the way)"
    proc, _ = run_app(*overrides, env=env)
    assert_refused(proc, f"cannot create the run folder {folder}", "(fix: a writable folder: hydra.run.dir=<folder>")
    assert blocker.read_text() == "kept"
    assert not Path("/proc/socratic_exp_run").exists()
