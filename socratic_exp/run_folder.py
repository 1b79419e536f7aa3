"""The run folder contract: ``summary.json`` (status, metrics, provenance) and ``metrics.jsonl``.

``summary.json`` is written when the run starts (``status: running``) and rewritten atomically when it ends
(``completed`` or ``failed`` with the error), so an interrupted run never looks complete. ``read_summary``,
``read_metrics`` and ``read_jsonl`` read a run folder back.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable
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
# A key is secret-looking when one of its words (split at _ - . and camelCase) is one of these, or starts with
# secret / password / auth (not author); ``*_env`` keys name a variable, and tokenizer tokens (pad_token) are text.
_SECRET_WORDS = {"token", "key", "apikey", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials"}
_SECRET_STARTS = ("secret", "password", "auth", "bearer", "cookie")
_AUTHOR = {"author", "authors", "authored", "authorship"}
_TOKENIZER_TOKEN = re.compile(r"(^|_)(pad|eos|bos|unk|sep|cls|mask)_token(_id)?$")
_WORD_SPLIT = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")
REDACTED = "<redacted>"


def is_secret_key(key: Any) -> bool:
    """Whether a config key (or an override's key, ``+teacher.extra_body.api_key``) names a secret: its last part
    has a word such as token, key, secret, password or auth (``hub_token``, ``apiKey``, ``Authorization``), but not
    a count (``max_new_tokens``), a variable's name (``api_key_env``) or a tokenizer's token (``pad_token``)."""
    name = str(key).lstrip("+~").rsplit(".", 1)[-1]
    lowered = name.lower()
    if lowered.endswith("_env") or _TOKENIZER_TOKEN.search(lowered):
        return False
    words = [word.lower() for word in _WORD_SPLIT.split(name) if word]
    return "apikey" in lowered or any(
        word in _SECRET_WORDS or (word.startswith(_SECRET_STARTS) and word not in _AUTHOR) for word in words
    )


def default_cache_dir() -> Path:
    """Where built models and teacher responses are cached: $SOCRATIC_EXP_CACHE or ~/.cache/socratic_exp."""
    root = os.environ.get("SOCRATIC_EXP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "socratic_exp"
    )
    return Path(root)


def redact(data: Any) -> Any:
    """A copy of ``data`` with the values of secret-looking keys replaced (keys ending in ``_env`` name a variable)."""
    if isinstance(data, dict):
        return {key: REDACTED if is_secret_key(key) and value else redact(value) for key, value in data.items()}
    if isinstance(data, list):
        return [redact(v) for v in data]
    return data


def scrub_hydra_files(run_dir: Path, secrets: list[str] | None = None) -> None:
    """Redact secret-looking values from Hydra's own dumps (``.hydra/*.yaml``, a sweep's ``multirun.yaml``), which
    are written before the run starts: a key passed on the command line must not stay on disk. ``secrets`` (the
    values given on the command line) are then replaced wherever else they appear (``hydra.job.override_dirname``
    joins the overrides into one string)."""
    from omegaconf import OmegaConf

    for path in [run_dir / ".hydra" / n for n in ("config.yaml", "overrides.yaml", "hydra.yaml")] + [
        run_dir / "multirun.yaml"
    ]:
        if not path.is_file():
            continue
        scrub_text(path, secrets or [])
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
    """``key=<redacted>`` for a secret-looking key; a dict or list value keeps its shape with its secret-looking
    entries replaced (``+teacher.extra_body={api_key: <redacted>, top_k: 20}``)."""
    key, sep, value = override.partition("=")
    if not sep or not value:
        return override
    if is_secret_key(key):
        return f"{key}={REDACTED}"
    if value.lstrip().startswith(("{", "[")):
        for secret in sorted(_secret_leaves(value), key=len, reverse=True):
            value = value.replace(secret, REDACTED)
    return f"{key}={value}"


def secret_values(overrides: list[str]) -> list[str]:
    """The values given to secret-looking keys on the command line (what must reach no file), longest first; a
    dict or list value also yields its secret-looking entries (``+teacher.extra_body={api_key: X}``)."""
    found: set[str] = set()
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not value:
            continue
        if is_secret_key(key) and value.strip("'\"") not in ("", "null", "None"):
            found.update({value, value.strip("'\"")})
        elif value.lstrip().startswith(("{", "[")):
            found.update(_secret_leaves(value))
    return sorted((v for v in found if len(v) >= 4), key=len, reverse=True)


def _secret_leaves(value: str) -> set[str]:
    """Secret-looking entries of a dict/list override value, parsed as Hydra parses it."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_override(f"x={value}").value()
    except Exception:  # not Hydra syntax: the key check above is all there is
        return set()
    found: set[str] = set()

    def walk(node: Any, secret: bool) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, secret or is_secret_key(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, secret)
        elif secret and node not in (None, ""):
            found.add(str(node))

    walk(parsed, False)
    return found


def scrub_text(path: Path, secrets: list[str]) -> bool:
    """Replace every secret value in a text file by ``<redacted>``; True when the file changed."""
    if not secrets or not path.is_file():
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    clean = text
    for secret in secrets:
        clean = clean.replace(secret, REDACTED)
    if clean != text:
        path.write_text(clean, encoding="utf-8")
    return clean != text


def is_run_folder(path: Any) -> bool:
    """A folder a run wrote: it holds ``summary.json`` or Hydra's ``.hydra/`` (what ``resume=<folder>`` accepts)."""
    folder = Path(str(path))
    return (folder / "summary.json").is_file() or (folder / ".hydra").is_dir()


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict[str, Any]:
    """The CPU that computed a figure (its model name, cores and torch's kernel level): figures name their machine."""
    fields: dict[str, str] = {}
    try:  # Linux: the first processor's block
        for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    found: dict[str, Any] = {
        "cpu": fields.get("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{fields['cpu family']}/{fields['model']}" if "cpu family" in fields else None,
        "native_bf16": any(flag in fields.get("flags", "").split() for flag in ("avx512_bf16", "amx_bf16")),
        "cores": os.cpu_count(),
        "system": platform.system(),
    }
    try:
        import torch

        found["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            found["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
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


# --- reading a run folder ---------------------------------------------------------------------------------------
def read_summary(run_dir: Path) -> dict[str, Any]:
    """``summary.json`` of a run folder (``{}`` when it has none: the run has not started writing it)."""
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` of a run folder: one dict per logged record, in logging order (training logs, the sampler's
    and teacher's metrics, evaluations)."""
    return MetricsFile(Path(run_dir) / "metrics.jsonl").read()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One of a run folder's JSON-lines files (``metrics.jsonl``, a table such as ``teacher_guidance.jsonl``,
    ``viewpoints.jsonl``): one dict per line, blank lines aside; ``[]`` when the file is absent."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


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
    """``metrics.jsonl``: one JSON object per logged step. Only the main process of a distributed launch writes
    (``writes``); the others' writes and truncations do nothing."""

    def __init__(self, path: Path, writes: bool = True):
        self.path = path
        self.writes = writes

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.writes:
            return
        record = {"step": step, "time": round(time.time(), 3), **metrics}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(_finite(record), default=str) + "\n")

    def truncate_after(self, step: int) -> int:
        """Drop records logged after ``step`` (they are re-done when a run resumes from that step's checkpoint)."""
        if not self.writes or not self.path.is_file():
            return 0
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        return len(lines) - len(kept)

    def read(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)


class MetricsSink:
    """Metrics to ``metrics.jsonl``, to the logger and to ``observe`` (the console's progress display)."""

    def __init__(self, file: MetricsFile, logger: Logger, observe: Callable[[int, dict[str, Any]], None] | None = None):
        self.file = file
        self.logger = logger
        self.observe = observe

    def record(self, step: int, metrics: dict[str, Any]) -> None:
        """``metrics.jsonl`` and the display only: for the trainer's own logs, which W&B receives from transformers."""
        self.file.write(step, metrics)
        if self.observe is not None:
            self.observe(step, metrics)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.record(step, metrics)
        self.logger.log(metrics, step)

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Rows to ``<run folder>/<name>.jsonl`` and, as a table, to the logger."""
        if not rows or not self.file.writes:
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
    """``summary.json`` of one run: kept by every process of a distributed launch, written by the main one only
    (``writes``)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], overrides: list[str], writes: bool = True):
        self.run_dir = run_dir
        self.writes = writes
        self.path = run_dir / "summary.json"
        self.started = time.time()
        previous = read_summary(run_dir)
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
        if not self.writes:
            return
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


NAME_SKIPPED_KEYS = ("algorithm", "task", "model", "resume", "dry_run", "verbose")  # in the name, or no setting


def run_name(choices: dict[str, str], overrides: list[str]) -> str:
    """A readable run name: the algorithm, task and model, then the overrides that distinguish the run, with their
    secrets redacted (the name reaches summary.json, W&B and TRL's pickled ``run_name``)."""

    def distinguishes(override: str) -> bool:
        key = override.split("=", 1)[0].lstrip("+~")
        return key not in NAME_SKIPPED_KEYS and not key.startswith("logger") and not is_secret_key(key)

    shown = [o for o in redact_overrides(overrides) if distinguishes(o)]
    base = f"{choices.get('algorithm')}-{choices.get('task')}-{choices.get('model')}"
    return (base + ("|" + ",".join(shown) if shown else ""))[:128]
