"""Build, list and check the students that ship with the package (``socratic_exp/models/tiny/students/``).

    python -m socratic_exp.models.tiny build default                              # the default run's student
    python -m socratic_exp.models.tiny build evidence-seed3 model.warmstart_steps=1650 model.warmstart_seed=3
    python -m socratic_exp.models.tiny list                                       # what ships, built where
    python -m socratic_exp.models.tiny verify                                     # weights against their manifest

``build`` warm-starts the student from scratch (a fresh temporary cache, unless ``--cache-dir`` names one that
already holds the build), measures every premise figure on exactly those weights, and writes the weights with their
``manifest.json`` into the students folder (replacing a student of the same name).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from socratic_exp.models.tiny.shipped import STUDENTS_DIR, problems, ship, shipped_students
from socratic_exp.study.premises import question_count


def _name(text: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r}: use lower-case letters, digits, - and _ (e.g. evidence-seed0)")
    return text


def build(name: str, overrides: list[str], questions: int, seed: int, cache_dir: Path | None, into: Path) -> int:
    from socratic_exp.core.config import compose
    from socratic_exp.core.errors import UserError
    from socratic_exp.core.run_folder import machine
    from socratic_exp.models.tiny import TinyModel
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.study.premises import measure

    with tempfile.TemporaryDirectory(prefix="tiny-build-") as fresh:
        cache = cache_dir or Path(fresh)
        components = build_components(compose(*overrides))
        if not isinstance(components.model, TinyModel):
            raise UserError(f"model={components.choices['model']}: only model=tiny students ship", "drop model=")
        # the students folder is never read here: the build happens whatever ships
        spec = components.model = dataclasses.replace(components.model, cache_dir=str(cache), use_shipped=False)
        spec.load(components.task)  # the warm-start (or the build found in --cache-dir)
        started = time.perf_counter()
        figures = measure(components, questions, seed)
        premises = {"questions": questions, "seed": seed, "figures": figures, "measured_on": machine(),
                    "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
        into.mkdir(parents=True, exist_ok=True)
        student = ship(name, spec.cache_path(components.task), spec, components.task, overrides, premises, into)
    manifest = student.manifest
    print(f"shipped: {student.path} (config {manifest['config_hash']}, loss {manifest['train_loss']:.4f}, "
          f"{manifest['build_seconds']:.0f} s warm-start on {manifest['built_on']['cpu']})")  # fmt: skip
    return 0


def list_students(into: Path) -> int:
    students = shipped_students(into)
    for student in students:
        m = student.manifest
        built = m["built_on"] or {}
        print(f"{student.name:<16} config {m['config_hash']}  loss {m['train_loss']:.4f}  "
              f"{' '.join(m['overrides']) or '(defaults)'}  built on {built.get('cpu')} "
              f"({built.get('cores')} cores, bf16 {m['warmstart_bf16']}) at {m['git_commit']}")  # fmt: skip
    if not students:
        print(f"no students in {into}")
    return 0


def verify(into: Path) -> int:
    students = shipped_students(into)
    found = [problem for student in students for problem in problems(student)]
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if not found:
        print(f"{len(students)} shipped in {into}: weights and configs match their manifests")
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m socratic_exp.models.tiny", description=__doc__.split("\n\n")[0])
    folder = argparse.ArgumentParser(add_help=False)
    folder.add_argument("--into", type=Path, default=STUDENTS_DIR, help="the students folder (default: the package's)")
    commands = parser.add_subparsers(dest="command", required=True)
    building = commands.add_parser(
        "build", parents=[folder], help="warm-start a student, measure its premises, ship it"
    )
    building.add_argument("name", type=_name, help="the student's folder name, e.g. default or evidence-seed0")
    building.add_argument("overrides", nargs="*", help="config overrides, as for python -m socratic_exp")
    building.add_argument(
        "--questions", type=question_count, default=400, help="questions per premise measurement (400)"
    )
    building.add_argument("--seed", type=int, default=0, help="premise sampling seed (0)")
    building.add_argument("--cache-dir", type=Path, help="a warm-start cache to reuse (default: a fresh build)")
    commands.add_parser("list", parents=[folder], help="the shipped students and where they were built")
    commands.add_parser("verify", parents=[folder], help="check each shipped student's weights and config")
    args = parser.parse_args(argv)
    from socratic_exp.core.console import configure
    from socratic_exp.core.errors import or_exit_code

    configure()
    if args.command == "build":
        return or_exit_code(
            lambda: build(args.name, args.overrides, args.questions, args.seed, args.cache_dir, args.into)
        )
    return list_students(args.into) if args.command == "list" else verify(args.into)


if __name__ == "__main__":
    sys.exit(main())
