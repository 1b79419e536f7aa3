"""A quiet console: the libraries' info lines (the HTTP client's line per teacher request) reach the run's log file
only, and the line a failed run ends with reaches the log file as well as the console, once."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_dirs
from openai_stub import StubServer

from socratic_exp.core.console import END_LOG, EVAL_LOG, PROGRESS_LOG, STEP_LOG, ProgressDisplay, quiet_console
from socratic_exp.core.errors import ConfigError
from socratic_exp.runtime.lifecycle import Job, end_failed
from socratic_exp.teachers.blackbox import BlackboxTeacher

HTTP = "HTTP Request: POST "  # httpx's line per request the openai client sends


@contextlib.contextmanager
def run_logging(log_file: Path) -> Iterator[logging.Handler]:
    """The root logger as Hydra's default job logging leaves it for a run: INFO, a console handler on stdout and the
    run's log file. Built by hand (``logging.config.dictConfig`` would close pytest's own handlers) and within the
    test, where ``sys.stdout`` is capsys's (a fixture's setup sees another one)."""
    root = logging.getLogger()
    level = root.level
    routed = [logging.getLogger(name) for name in (STEP_LOG, PROGRESS_LOG, EVAL_LOG, END_LOG)]  # ``route`` sets them
    saved = [(logger.handlers, logger.propagate, logger.level) for logger in routed]
    simple = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    ours = [logging.StreamHandler(sys.stdout), logging.FileHandler(log_file)]
    for handler in ours:
        handler.setFormatter(simple)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield ours[0]
    finally:
        for handler in ours:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
        for logger, (handlers, propagate, was) in zip(routed, saved, strict=True):
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(was)


def _lines_with(text: str, where: str) -> list[str]:
    return [line for line in where.splitlines() if text in line]


@pytest.mark.parametrize("mode", ["plain", "live", "quiet"])
def test_library_info_lines_reach_the_log_file_only(capsys, tmp_path, mode):
    """A real request through the openai client (the blackbox teacher's start-up check) against a local stub: its
    ``HTTP Request`` line is in the log file, not on the console, whether the progress is plain lines, a live bar
    (tqdm's logging handler replaces the console's) or a sweep job's quiet console; our own lines and the libraries'
    warnings still show, and the console is as it was afterwards."""
    log_file = tmp_path / "socratic_exp.log"
    with run_logging(log_file) as console_handler, StubServer() as server, quiet_console(quiet=mode == "quiet"):
        display = ProgressDisplay(stream=io.StringIO(), live=mode == "live")
        display.start(2)  # live: log lines now go through tqdm's handler
        teacher = BlackboxTeacher(model=server.model, base_url=server.url, cache=False, max_retries=0)
        teacher.preflight()
        teacher.close()
        logging.getLogger("socratic_exp.test").info("our own line")
        logging.getLogger("somelibrary.module").warning("a library's warning")
        display.close()
    printed = capsys.readouterr()
    shown, logged = printed.out + printed.err, log_file.read_text()
    assert server.requests == 1
    assert _lines_with(HTTP, shown) == []
    assert len(_lines_with(HTTP, logged)) == 1 and f"{HTTP}{server.url}/chat/completions" in logged
    assert len(_lines_with("our own line", shown)) == (0 if mode == "quiet" else 1)
    assert len(_lines_with("a library's warning", shown)) == 1
    assert len(_lines_with("our own line", logged)) == 1 and len(_lines_with("a library's warning", logged)) == 1
    assert console_handler.filters == [] and console_handler.level == logging.NOTSET  # restored


@pytest.mark.parametrize(
    ("err", "code", "line", "level"),
    [
        (ConfigError("algorithm.max_steps", -1, "must be >= 1"), 2, "error: algorithm.max_steps=-1: must be >= 1",
         "ERROR"),
        (RuntimeError("boom\nmore"), 1, "error: RuntimeError: boom (traceback in {run_dir}/summary.json)", "ERROR"),
        (KeyboardInterrupt(), 130, "interrupted: the run folder {run_dir} can be resumed with resume={run_dir}",
         "WARNING"),
    ],
)  # fmt: skip
def test_the_failure_line_is_printed_once_and_logged_once(capsys, tmp_path, err, code, line, level):
    log_file, run_dir = tmp_path / "socratic_exp.log", tmp_path / "run"
    job = Job(run_dir=run_dir, multirun=False, overrides=[], choices={}, is_main=True)
    with run_logging(log_file), pytest.raises(SystemExit) as exited, quiet_console(quiet=False):
        try:
            raise err
        except (KeyboardInterrupt, Exception) as raised:  # end_failed is called while the error is handled
            end_failed(job, None, {}, raised)
    line = line.format(run_dir=run_dir)
    printed = capsys.readouterr()
    assert exited.value.code == code
    assert printed.err == line + "\n" and printed.out == ""  # once, as printed: not again through the console logger
    (logged,) = _lines_with(line, log_file.read_text())
    assert logged.endswith(f"][socratic_exp.end][{level}] - {line}")


def test_the_failure_line_without_a_log_file_is_printed_once(capsys, tmp_path):
    """Outside a Hydra run (no log file handler): the line on stderr once, not again by Python's last resort."""
    job = Job(run_dir=tmp_path, multirun=True, overrides=[], choices={}, is_main=True)  # a sweep's job returns
    end_failed(job, None, {}, ConfigError("seed", -1, "must be >= 0"))
    assert capsys.readouterr().err == "error: seed=-1: must be >= 0\n"


# --- the real command line ---------------------------------------------------------------------------------------
def _log_file(outputs: Path) -> str:
    (run_dir,) = run_dirs(outputs)
    return (run_dir / "socratic_exp.log").read_text()


def test_a_run_against_a_teacher_server_keeps_its_http_lines_off_the_console_and_logs_its_error(run_app, tmp_path):
    """The teacher's start-up request goes through the openai client; the run then fails loading a Hub model that is
    not there (offline, an empty cache), a user error after validation: a few seconds, no training."""
    with StubServer() as server:
        proc, outputs = run_app(
            "teacher=blackbox",
            f"teacher.model={server.model}",
            f"teacher.base_url={server.url}",
            "teacher.cache=false",
            "model=qwen3_0_6b",
            "logger=none",
            env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty_hub_cache")},
            timeout=180,
        )
    assert proc.returncode == 2, proc.stderr[-2000:]
    shown, logged = proc.stdout + proc.stderr, _log_file(outputs)
    assert server.requests == 1
    assert _lines_with(HTTP, shown) == []
    assert len(_lines_with(HTTP, logged)) == 1
    # the failure after the teacher's start-up (the run's console set up): once on the console, once in the log file
    (console_line,) = _lines_with("error: model.name=Qwen/Qwen3-0.6B: the Hugging Face Hub model could not", shown)
    assert proc.stderr.strip().splitlines()[-1] == console_line
    (logged_line,) = _lines_with(console_line, logged)
    assert logged_line.endswith(f"][socratic_exp.end][ERROR] - {console_line}")


def test_a_run_failing_validation_has_its_error_line_once_on_the_console_and_in_its_log_file(run_app):
    error = "error: algorithm.max_steps=-1: must be >= 1"
    proc, outputs = run_app("algorithm.max_steps=-1", "logger=none", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (console_line,) = _lines_with(error, proc.stdout + proc.stderr)
    assert proc.stderr.strip().splitlines()[-1] == console_line
    (logged_line,) = _lines_with(error, _log_file(outputs))
    assert logged_line.endswith(f"][socratic_exp.end][ERROR] - {console_line}")


@pytest.mark.slow
def test_a_training_run_with_a_teacher_server_shows_no_http_lines(run_app, tmp_path):
    """One training step with the teacher's guidance and an assisted evaluation before and after: every request's
    line is in the log file, none on the console."""
    with StubServer() as server:
        proc, outputs = run_app(
            "debug=fast",
            "debug=quick_warmstart",
            "algorithm.max_steps=1",
            "eval.every_steps=0",
            "eval.max_samples=8",
            "teacher=blackbox",
            f"teacher.model={server.model}",
            f"teacher.base_url={server.url}",
            "teacher.cache=false",
            "logger=none",
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown, logged = proc.stdout + proc.stderr, _log_file(outputs)
    assert server.requests > 1
    assert _lines_with(HTTP, shown) == []
    assert len(_lines_with(HTTP, logged)) == server.requests
    assert "step 1/1 |" in shown and "held-out at step 1:" in shown  # our own lines stay


def test_the_libraries_with_handlers_of_their_own_log_through_the_run(capsys, tmp_path):
    """transformers' warnings reach the log file, and datasets' show once on the console (not once bare on stderr
    and once formatted)."""
    import datasets  # noqa: F401 - its logger's handler is made at import
    import transformers

    from socratic_exp.core.console import route_library_logs

    log_file = tmp_path / "socratic_exp.log"
    saved = {name: list(logging.getLogger(name).handlers) for name in ("datasets", "huggingface_hub")}
    try:
        with run_logging(log_file):
            route_library_logs()
            logging.getLogger("transformers.modeling_utils").warning("a transformers warning")
            logging.getLogger("datasets.builder").warning("a datasets warning")
    finally:
        transformers.utils.logging.disable_propagation()
        transformers.utils.logging.enable_default_handler()
        for name, handlers in saved.items():
            logging.getLogger(name).handlers = handlers
    printed = capsys.readouterr()
    shown, logged = printed.out + printed.err, log_file.read_text()
    for line in ("a transformers warning", "a datasets warning"):
        assert len(_lines_with(line, shown)) == 1 and len(_lines_with(line, logged)) == 1, line
