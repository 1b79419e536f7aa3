"""The students that ship with the package (``students/<name>/``), so that every machine trains the same weights.

A warm-start's numerics depend on the CPU (bf16 rounding, how kernels split their sums), so the same settings build
a different student on another machine, with other premise figures and other results. The testbed's students are
therefore built once by the project's own warm-start (``python -m socratic_exp.models.tiny build``) and shipped as
safetensors with a ``manifest.json``: the build config and its hash, the weights' digest, the code commit, the
machine, the training loss and the premise figures measured on exactly those weights. A model config that matches
a shipped student's build config loads it; any other config is warm-started and cached as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from socratic_exp.models.tiny import TinyModel
    from socratic_exp.tasks.base import Task

STUDENTS_DIR = Path(__file__).resolve().parent / "students"
MANIFEST = "manifest.json"
WEIGHTS = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class ShippedStudent:
    name: str
    path: Path
    manifest: dict[str, Any]

    @property
    def premise_figures(self) -> dict[str, float]:
        return self.manifest["premises"]["figures"]


def config_hash(build_config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(build_config, sort_keys=True).encode()).hexdigest()[:16]


def weights_digest(folder: Path) -> str:
    return hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest()


def shipped_students(root: Path | None = None) -> list[ShippedStudent]:
    folders = sorted((root or STUDENTS_DIR).glob(f"*/{MANIFEST}"))
    return [ShippedStudent(f.parent.name, f.parent, json.loads(f.read_text())) for f in folders]


def find_shipped(spec: TinyModel, task: Task, root: Path | None = None) -> ShippedStudent | None:
    """The shipped student built from ``spec``'s settings for ``task``. ``warmstart_bf16: null`` (decide by machine)
    matches a student built either way: the point of shipping is that no machine builds its own."""
    wanted = _without_bf16(spec.build_config(task))
    for student in shipped_students(root):
        bf16_used = student.manifest["warmstart_bf16"]
        if _without_bf16(student.manifest["build_config"]) == wanted and spec.warmstart_bf16 in (None, bf16_used):
            return student
    return None


def _without_bf16(build_config: dict[str, Any]) -> dict[str, Any]:
    """The build config but the precision setting (as set, null or not), which is compared to what the build used."""
    return build_config | {"model": {k: v for k, v in build_config["model"].items() if k != "warmstart_bf16"}}


def ship(
    name: str, built: Path, spec: TinyModel, task: Task, overrides: list[str], premises: dict[str, Any], root: Path
) -> ShippedStudent:
    """Copy the student built in ``built`` to ``root/name`` with its manifest (replacing a student of that name)."""
    warmstart = json.loads((built / "warmstart.json").read_text())
    build_config = spec.build_config(task)
    manifest = {
        "name": name,
        "overrides": overrides,  # python -m socratic_exp.models.tiny build <name> <overrides> rebuilds it
        "build_config": build_config,
        "config_hash": config_hash(build_config),
        "warmstart_bf16": warmstart["settings"]["warmstart_bf16"],
        "weights_sha256": weights_digest(built),
        "parameters": warmstart["parameters"],
        "train_loss": warmstart["train_loss"],
        "build_seconds": warmstart["seconds"],
        "built_on": warmstart.get("machine"),
        "git_commit": warmstart.get("git_commit"),
        "versions": warmstart.get("versions"),
        "premises": premises,
    }
    staged = root / f".{name}.staged"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(built, staged, ignore=shutil.ignore_patterns("*.lock"))
    warmstart["settings"].pop("cache_dir", None)  # the build machine's folder: nothing a user can load from
    (staged / "warmstart.json").write_text(json.dumps(warmstart, indent=2))
    (staged / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    target = root / name
    if target.exists():
        shutil.rmtree(target)
    staged.rename(target)
    return ShippedStudent(name, target, manifest)


def check_weights(student: ShippedStudent) -> None:
    """A run loads only the weights its manifest names: a changed or damaged file is refused (hashing 3.5 MB takes
    a few milliseconds), where loading it would train another student under the shipped one's name."""
    from socratic_exp.core.errors import UserError

    file = student.path / WEIGHTS
    if not file.is_file() or weights_digest(student.path) != student.manifest["weights_sha256"]:
        raise UserError(
            f"the shipped student {student.name}: {file} is missing or does not match its manifest's weights_sha256",
            "python -m socratic_exp.models.tiny verify says which students are damaged; restore them from the "
            "package (git checkout socratic_exp/models/tiny/students, or reinstall), or model.use_shipped=false",
        )


def problems(student: ShippedStudent) -> list[str]:
    """What does not hold of a shipped student: its weights against their digest, its config against its hash."""
    found = []
    if not (student.path / WEIGHTS).is_file():
        return [f"{student.name}: {WEIGHTS} is missing"]
    if weights_digest(student.path) != student.manifest["weights_sha256"]:
        found.append(f"{student.name}: {WEIGHTS} does not match the manifest's weights_sha256")
    if config_hash(student.manifest["build_config"]) != student.manifest["config_hash"]:
        found.append(f"{student.name}: build_config does not hash to config_hash")
    if "figures" not in student.manifest.get("premises", {}):
        found.append(f"{student.name}: the manifest has no premise figures")
    return found
