"""The run folder contract: ``summary.json`` (status, metrics, provenance) and ``metrics.jsonl``.

``summary.json`` is written when the run starts (``status: running``) and rewritten atomically when it ends
(``completed`` or ``failed`` with the error), so an interrupted run never looks complete.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.loggers.base import Logger
    from socratic_exp.teachers.base import Teacher

TRACKED_PACKAGES = (
    "socratic_exp",
    "torch",
    "transformers",
    "trl",
    "datasets",
    "accelerate",
    "hydra-core",
    "omegaconf",
    "wandb",
    "math-verify",
    "openai",
    "vllm",
)
_SECRET_KEY = re.compile(r"(api_?key|token|secret|password)", re.IGNORECASE)
REDACTED = "<redacted>"


def default_cache_dir() -> Path:
    """Where built models and teacher responses are cached: $SOCRATIC_EXP_CACHE or ~/.cache/socratic_exp."""
    root = os.environ.get("SOCRATIC_EXP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "socratic_exp"
    )
    return Path(root)


def redact(data: Any) -> Any:
    """A copy of ``data`` with the values of secret-looking keys replaced (keys ending in ``_env`` name a variable)."""
    if isinstance(data, dict):
        return {
            key: REDACTED if _SECRET_KEY.search(str(key)) and not str(key).endswith("_env") and value else redact(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [redact(v) for v in data]
    return data


def scrub_hydra_files(run_dir: Path) -> None:
    """Redact secret-looking values from Hydra's own dumps (``.hydra/*.yaml``), which are written before the run
    starts: a key passed on the command line must not stay on disk."""
    from omegaconf import OmegaConf

    for name in ("config.yaml", "overrides.yaml", "hydra.yaml"):
        path = run_dir / ".hydra" / name
        if not path.is_file():
            continue
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(data, list):
            clean: Any = [_redact_override(o) if isinstance(o, str) else o for o in data]
        else:
            clean = redact(data)
            overrides = (clean.get("hydra") or {}).get("overrides") or {}
            for kind, items in overrides.items():
                overrides[kind] = [_redact_override(o) for o in items]
        if clean != data:
            path.write_text(OmegaConf.to_yaml(OmegaConf.create(clean)))


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides with the values of secret-looking keys replaced."""
    return [_redact_override(o) for o in overrides]


def _redact_override(override: str) -> str:
    key, sep, value = override.partition("=")
    return f"{key}={REDACTED}" if sep and value and _SECRET_KEY.search(key) and not key.endswith("_env") else override


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_commit() -> str | None:
    """The commit of the socratic_exp checkout (with ``+dirty`` for uncommitted changes), if run from one."""
    source = Path(__file__).resolve().parent.parent
    if not (source / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_finite(data), indent=2, default=str))
    os.replace(tmp, path)


def _finite(data: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


class MetricsFile:
    """``metrics.jsonl``: one JSON object per logged step."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, "time": round(time.time(), 3), **metrics}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(_finite(record), default=str) + "\n")

    def truncate_after(self, step: int) -> int:
        """Drop records logged after ``step`` (they are re-done when a run resumes from that step's checkpoint)."""
        if not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return len(lines) - len(kept)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


class MetricsSink:
    """Metrics to ``metrics.jsonl`` and to the logger."""

    def __init__(self, file: MetricsFile, logger: Logger):
        self.file = file
        self.logger = logger

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.file.write(step, metrics)
        self.logger.log(metrics, step)

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Rows to ``<run folder>/<name>.jsonl`` and, as a table, to the logger."""
        if not rows:
            return
        with open(self.file.path.parent / f"{name}.jsonl", "a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps({"step": step, **row}) + "\n")
        self.logger.log_table(name, rows, step)

    def log_evaluation(self, metrics: dict[str, Any], step: int, teacher: Teacher) -> None:
        """An evaluation's metrics, and the teacher guidance it sampled (the ``teacher_guidance`` table)."""
        self.log(metrics, step)
        self.log_table("teacher_guidance", teacher.samples(), step)


class RunRecord:
    """``summary.json`` of one run."""

    def __init__(self, run_dir: Path, config: dict[str, Any], overrides: list[str]):
        self.run_dir = run_dir
        self.path = run_dir / "summary.json"
        self.started = time.time()
        previous = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data: dict[str, Any] = {
            "status": "running",
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "overrides": redact_overrides(overrides),
            "config": redact(config),
            "git_commit": git_commit(),
            "versions": versions(),
            "host": platform.node(),
        }
        self.previous = previous
        for kept in ("initial", "wandb_run_id", "wall_time_s"):
            if kept in previous:
                self.data[kept] = previous[kept]
        self.data["resumed"] = bool(previous)

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        elapsed = time.time() - self.started + float(self.previous.get("wall_time_s") or 0.0)
        self.data["wall_time_s"] = round(elapsed, 2)
        write_json_atomic(self.path, self.data)

    def complete(self, objective: float | None, **fields: Any) -> None:
        self.data.pop("error", None)
        self.update(status="completed", objective=objective, **fields)

    def fail(self, error: BaseException, status: str = "failed") -> None:
        message = getattr(error, "message", None) or str(error) or type(error).__name__
        self.data["error"] = {"type": type(error).__name__, "message": message}
        if getattr(error, "fix", None):
            self.data["error"]["fix"] = error.fix
        self.update(status=status, objective=None)
