"""How much another CPU changes the testbed's numbers, emulated on this one by capping the instruction sets that
torch's own kernels (``ATEN_CPU_CAPABILITY``), oneDNN (``ONEDNN_MAX_CPU_ISA``) and MKL (``MKL_ENABLE_INSTRUCTIONS``,
``MKL_CBWR``) may use, as an older or another vendor's CPU would.

    python research/cross_cpu.py premises [--student default] [--questions 400]
        the shipped student's premise figures measured under each instruction-set cap, against its manifest
    python research/cross_cpu.py build [--steps 20]
        the first warm-start steps of the default student under each cap: how far apart the weights drift

The first shows what a shipped student's figures tolerate across machines (``tests/test_premises.py`` holds the
default student's figures, measured on the machine at hand, to its manifest within that tolerance); the second why
the students ship at all: the same settings warm-start into different weights.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ISAS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx2-cbwr": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"},
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"},
}


def premises(student: str, questions: int, isas: list[str]) -> None:
    from socratic_exp.models.tiny.shipped import shipped_students

    (shipped,) = [s for s in shipped_students() if s.name == student]
    manifest = shipped.manifest
    shipped_figures = shipped.premise_figures
    overrides = manifest["overrides"]
    worst: dict[str, float] = {}
    for isa in isas:
        env = ISAS[isa]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "premises.json"
            command = [sys.executable, "-m", "socratic_exp.study.premises", *overrides, "--questions", str(questions),
                       "--seed", str(manifest["premises"]["seed"]), "--out", str(out)]  # fmt: skip
            subprocess.run(command, env={**os.environ, **env}, check=True, capture_output=True)
            figures = json.loads(out.read_text())["figures"]
        deviations = {k: abs(v - shipped_figures[k]) / max(1.0, abs(shipped_figures[k])) for k, v in figures.items()}
        changed = {k: f"{v:.1e}" for k, v in deviations.items() if v > 0}
        worst[isa] = max(deviations.values())
        print(f"{isa:<10} figures that differ from the manifest: {len(changed)} of {len(figures)}; "
              f"largest relative difference {worst[isa]:.1e} {changed}", flush=True)  # fmt: skip
    print(f"largest over all caps: {max(worst.values()):.1e}")


BUILD = """
import sys, torch, hashlib
from socratic_exp.runtime.assembly import build_components
from socratic_exp.core.config import compose
c = build_components(compose("algorithm=socraticpo", "model.use_shipped=false", "model.cache_dir=" + sys.argv[1],
                             "model.warmstart_steps=" + sys.argv[2]))
student = c.model.load(c.task)
weights = torch.cat([p.detach().flatten() for p in student.model.parameters()])
torch.save(weights, sys.argv[3])
print(torch.backends.cpu.get_cpu_capability(), student.info["train_loss"])
"""


def build(steps: int) -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        weights = {}
        for isa, env in ISAS.items():
            out = Path(tmp) / f"{isa}.pt"
            command = [sys.executable, "-c", BUILD, str(Path(tmp) / isa), str(steps), str(out)]
            done = subprocess.run(command, env={**os.environ, **env}, check=True, capture_output=True, text=True)
            weights[isa] = torch.load(out)
            print(f"{isa:<10} kernels {done.stdout.split()[0]}, loss {float(done.stdout.split()[1]):.6f}", flush=True)
        for isa, other in weights.items():
            drift = (other - weights["native"]).abs()
            print(f"{isa:<10} vs native after {steps} steps: weights differ in {(drift > 0).float().mean():.1%}, "
                  f"largest {drift.max():.2e}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measuring = commands.add_parser("premises")
    measuring.add_argument("--student", default="default")
    measuring.add_argument("--questions", type=int, default=400)
    measuring.add_argument("--isas", default=",".join(ISAS), help=f"comma-separated, of {', '.join(ISAS)}")
    building = commands.add_parser("build")
    building.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.command == "premises":
        premises(args.student, args.questions, args.isas.split(","))
    else:
        build(args.steps)


if __name__ == "__main__":
    main()
