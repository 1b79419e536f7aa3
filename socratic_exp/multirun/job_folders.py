"""A sweep's job folders and what they say of each job: a folder made by another grid is refused
(``check_sweep_folder``), a job already completed there is found (``completed_run``) so that re-running a sweep into
its folder runs only what is left, a job that did not finish is recorded as failed in its ``summary.json``
(``mark_dead``, ``mark_failed``), and a job's end line is read from its summary (``outcome_of``)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from socratic_exp.core.config import comparable_overrides
from socratic_exp.core.run_folder import read_summary, write_json_atomic
from socratic_exp.core.secrets import redact_overrides
from socratic_exp.multirun.processes import LAUNCH_LOG, ProcessLaunch


class SweepFolderConflict(RuntimeError):
    """The sweep folder holds jobs launched with other overrides: resuming into it would mix two grids."""


def completed_run(job_dir: Path, overrides: Sequence[str]) -> dict[str, Any] | None:
    """The summary of a completed run in ``job_dir`` launched with ``overrides`` (``resume`` aside; secrets are
    compared redacted, as the summary keeps them), else None."""
    summary = read_summary(job_dir)
    if not summary:
        return None
    same = comparable_overrides(summary.get("overrides", [])) == comparable_overrides(redact_overrides(list(overrides)))
    return summary if same and summary.get("status") == "completed" else None


def check_sweep_folder(sweep_dir: Path, jobs: Sequence[Sequence[str]], first_index: int) -> None:
    """Refuse to launch into a folder whose job folders were made by another grid (job N must be the same job)."""
    from omegaconf import OmegaConf

    for index, overrides in enumerate(jobs, start=first_index):
        earlier = sweep_dir / str(index) / ".hydra" / "overrides.yaml"
        if not earlier.is_file():
            continue
        before = comparable_overrides([str(o) for o in OmegaConf.load(earlier)])
        wanted = comparable_overrides(redact_overrides(list(overrides)))  # Hydra's copy has secrets redacted
        if before != wanted:
            raise SweepFolderConflict(
                f"{sweep_dir}/{index} was launched with {' '.join(before) or '(no overrides)'}, this sweep's job "
                f"{index} is {' '.join(wanted)} (fix: re-run the same grid to resume "
                "it, or start a new sweep folder)"
            )


def mark_dead(job_dir: Path, overrides: Sequence[str], returncode: int, how: ProcessLaunch | None = None) -> None:
    """Record a job whose process ended without reporting (killed, out of memory, crashed) as failed; a
    multi-process job's message points to its launch's output."""
    reason = f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"
    message = f"the job's process ended without finishing ({reason})"
    if how is not None and how.distributed:
        message = f"the job's {how.tool} ended without finishing ({reason}; its output: {job_dir / LAUNCH_LOG})"
    mark_failed(job_dir, overrides, "JobProcessDied", message)


def mark_failed(job_dir: Path, overrides: Sequence[str], kind: str, message: str) -> None:
    """Record a job that did not finish as failed with ``message`` (a completed run stands: it finished its work,
    then died on the way out); a job without a summary gets one, its overrides redacted as a run's own are."""
    summary = read_summary(job_dir) or {"overrides": redact_overrides(list(overrides))}
    if summary.get("status") == "completed":
        return
    summary.update(status="failed", objective=None, error={"type": kind, "message": message})
    job_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(job_dir / "summary.json", summary)


def job_return_for(job_return: Any, job_status: Any, overrides: Sequence[str], job_dir: Path, value: Any) -> Any:
    """A JobReturn for a job that did not report one (skipped or died). Completed, so that Hydra's sweeper goes on
    to the other jobs; its ``summary.json`` says what happened, and the sweep's status table and exit code say it."""
    result = job_return(overrides=list(overrides), working_dir=str(job_dir), status=job_status.COMPLETED)
    result.return_value = value
    return result


def outcome_of(job_dir: Path) -> str:
    """``completed, eval/greedy_acc 0.5500`` / ``failed: <the error>``: the job's end line."""
    summary = read_summary(job_dir)
    if not summary:
        return "ended (no summary)"
    status, objective = summary.get("status", "?"), summary.get("objective")
    if status == "completed" and isinstance(objective, int | float):
        return f"{status}, {(summary.get('config') or {}).get('objective', 'objective')} {objective:.4f}"
    message = (summary.get("error") or {}).get("message")
    return f"{status}: {str(message).splitlines()[0][:160]}" if message else status
