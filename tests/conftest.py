"""Shared fixtures: composing configs in-process, running the app in a subprocess or in process with isolated
folders, and one completed run for the tests that read a run folder (with the readers of
``socratic_exp.core.run_folder``)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0):
    # the cores shared among the xdist workers, for their own torch and the runs they start: oversubscribed OpenMP
    # threads spin instead of working (a student builds bit-identically on 1 or 2 threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))

from socratic_exp.core.config import compose  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
# the real benchmark files (never copied into the repo); SOCRATIC_EXP_DATA points elsewhere
SHARED_DATA = Path(os.environ.get("SOCRATIC_EXP_DATA") or ROOT.parent / "shared" / "data")


def sweep_grid(sweep: str) -> dict[str, list[str]]:
    """A sweep file's grid, each parameter's values as written."""
    import yaml

    params = yaml.safe_load((ROOT / "sweeps" / f"{sweep}.yaml").read_text())["hydra"]["sweeper"]["params"]
    return {key: str(values).split(",") for key, values in params.items()}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most end-to-end (``slow``) tests first: xdist hands out whole files (``--dist loadfile``,
    in this order: ``--no-loadscope-reorder``), so the last files to start are short ones and no worker waits long
    at the end for the other."""
    slow: dict[Path, int] = {}
    for item in items:
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[item.path])  # stable: equal files, and each file's tests, keep their order


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark files; tests that need them skip when the folder is absent."""
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"real benchmark files not found in {SHARED_DATA} (set SOCRATIC_EXP_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One warm-start cache for the whole session (the quick warm-start builds in seconds)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def smol_folder(tmp_path_factory, cache_dir) -> Path:
    """SmolLM2-135M-Instruct's folder in the session's cache (where the app's runs find it too), the wheel's GGUF
    converted once for the whole suite: the first xdist worker to need it converts it beside the workers' own
    folders (about 30 CPU-seconds), the others link its files into their caches. Skipped where it is absent."""
    from filelock import FileLock

    from socratic_exp.models.gguf import converted_path
    from socratic_exp.models.smollm2 import HUB_NAME, INSTALL, SmolLM2Model, hub_cache_folder, wheel_gguf_file

    source = wheel_gguf_file() if importlib.util.find_spec("gguf") else None
    if hub_cache_folder(HUB_NAME, None) is None:  # else the Hub's own snapshot is the folder
        if source is None:
            pytest.skip(f"SmolLM2-135M-Instruct is neither in the HF cache nor installed ({INSTALL})")
        target = converted_path(source.resolve(), str(cache_dir))
        if not target.exists():
            base = tmp_path_factory.getbasetemp()
            shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "smollm2-shared"
            with FileLock(f"{shared}.lock"):
                converted = Path(SmolLM2Model(cache_dir=str(shared)).resolve())
            shutil.copytree(converted, target, copy_function=os.link)  # the same files: nothing copied
    return Path(SmolLM2Model(cache_dir=str(cache_dir)).resolve())


def app_environment(outputs: Path, cache_dir: Path) -> dict[str, str]:
    """What a test run of the app sees: its own outputs and warm-start cache, W&B offline and quiet."""
    return {
        "SOCRATIC_EXP_OUTPUTS": str(outputs),
        "SOCRATIC_EXP_CACHE": str(cache_dir),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "HYDRA_FULL_ERROR": "0",
    }


def app_in(
    folder: Path, cache_dir: Path, *overrides: str, env: dict[str, str] | None = None, timeout: int = 600
) -> tuple[subprocess.CompletedProcess, Path]:
    """``python -m socratic_exp <overrides>`` started in ``folder``, with outputs under ``folder/outputs``; returns
    (completed process, outputs root)."""
    outputs = folder / "outputs"
    proc = subprocess.run(
        [sys.executable, "-m", "socratic_exp", *overrides],
        cwd=folder,
        env={**os.environ, **app_environment(outputs, cache_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, outputs


def completed_in(folder: Path, cache_dir: Path, *overrides: str) -> Path:
    """The run folder of a run of ``overrides`` made in ``folder``, which must complete (for module and session
    fixtures that several tests read or copy)."""
    proc, outputs = app_in(folder, cache_dir, *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = run_dirs(outputs)
    return run_dir


def file_contents(path: Path) -> bytes:
    """A file's bytes, and for a zip (torch.save's format) its members' bytes too: what a search for a secret reads."""
    import zipfile

    data = path.read_bytes()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            data += b"".join(archive.read(name) for name in archive.namelist())
    return data


@pytest.fixture
def run_app(tmp_path, cache_dir):
    """Run ``python -m socratic_exp`` with outputs under tmp_path; returns (completed process, outputs root)."""

    def run(*overrides: str, timeout: int = 600, env: dict[str, str] | None = None):
        return app_in(tmp_path, cache_dir, *overrides, env=env, timeout=timeout)

    return run


@pytest.fixture
def run_in_process(tmp_path, cache_dir, monkeypatch, capfd):
    """``run_app`` without a new interpreter: the same Hydra entry point (``socratic_exp.__main__.main``), called in
    this process with the same environment and working folder, which spares each run the ~8 s of importing torch,
    transformers and TRL. For the tests of what a run computes and writes; tests of the command line itself (exit
    codes, one-line errors, launchers) keep ``run_app``. Logging, Hydra's global state and the console settings are
    restored after the run, so the next test sees the process as it was."""
    import logging

    from hydra.core.global_hydra import GlobalHydra

    from socratic_exp import __main__ as entry
    from socratic_exp.core.console import SHOWN, filter_dependency_noise

    def run(*overrides: str) -> tuple[subprocess.CompletedProcess, Path]:
        outputs = tmp_path / "outputs"
        for key, value in app_environment(outputs, cache_dir).items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "argv", ["socratic_exp", *overrides])
        # pytest restores the warning filters after each test: the run sets its own again, as a new process would
        monkeypatch.setattr(filter_dependency_noise, "done", False, raising=False)
        root = logging.getLogger()
        handlers, level, shown = list(root.handlers), root.level, dict(SHOWN)
        code = 0
        try:
            entry.main()
        except SystemExit as exited:
            code = exited.code or 0  # sys.exit() is success; the app exits with 1, 2 or 130 on failure
        finally:
            for handler in root.handlers:
                if handler not in handlers:
                    handler.close()
            root.handlers[:] = handlers
            root.setLevel(level)
            SHOWN.update(shown)
            GlobalHydra.instance().clear()
        printed = capfd.readouterr()
        return subprocess.CompletedProcess(sys.argv, code, printed.out, printed.err), outputs

    return run


def assert_refused(proc: subprocess.CompletedProcess, *phrases: str, code: int | None = 2) -> str:
    """The fault tier's check of a console: a non-zero exit (``code`` where given), no traceback anywhere, and one
    ``error:`` line holding every phrase; returns that line. With ``$SOCRATIC_EXP_FAULT_CONSOLES`` set, the console
    is also kept there (one file per call), for ``grep -r Traceback`` over the whole tier."""
    console = proc.stdout + proc.stderr
    if keep := os.environ.get("SOCRATIC_EXP_FAULT_CONSOLES"):
        folder = Path(keep)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{os.getpid()}-{len(list(folder.iterdir()))}.txt").write_text(console)
    assert proc.returncode != 0, console[-3000:]
    if code is not None:
        assert proc.returncode == code, console[-3000:]
    assert "Traceback" not in console, console[-3000:]
    errors = [line for line in console.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, console[-3000:]
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


@contextlib.contextmanager
def perturbed_reference(trainer, scale: float = 0.05):
    """The trainer's initial policy (REINFORCE++'s KL reference) replaced, within the block, by a copy with
    ``scale`` of Gaussian noise added to every weight: a reference that differs from the policy."""
    import torch

    from socratic_exp.models.base import frozen_copy

    original = trainer.ref_policy
    trainer.ref_policy = frozen_copy(original)
    with torch.no_grad():
        for parameter in trainer.ref_policy.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    try:
        yield
    finally:
        trainer.ref_policy = original


def run_dirs(outputs: Path) -> list[Path]:
    """The run folders (``<date>/<time>``) under an outputs root, oldest first; a sweep's jobs are under multirun/."""
    return sorted(p.parent for p in outputs.glob("*/*/summary.json") if p.parent.parent.name != "multirun")


# the run of ``completed_run``: the default experiment on the quick warm-start (4 steps, an evaluation before, at
# step 2 and after, a checkpoint every 2 steps) with TRL's completion tables, W&B offline (app_environment)
COMPLETED_RUN = ("debug=quick_warmstart", "algorithm.log_completions=true")


@pytest.fixture(scope="session")
def completed_run(tmp_path_factory, cache_dir) -> Path:
    """The run folder of a completed run (``COMPLETED_RUN``), made once per session (with pytest-xdist, once per
    worker) by ``python -m socratic_exp``, for the tests that read one. Read it, never change it: a test that resumes
    or edits a run works on its own ``copy_run``."""
    return completed_in(tmp_path_factory.mktemp("completed_run"), cache_dir, *COMPLETED_RUN)


def interrupt_after_step_2(run_dir: Path) -> None:
    """A run of ``debug=fast`` (checkpoints at steps 2 and 4) as if interrupted after its step-2 checkpoint: the
    later checkpoint and the final model gone, its summary back to running (``resume=auto`` then finds it)."""
    import json

    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-4")
    shutil.rmtree(run_dir / "checkpoints" / "final")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))


def copy_run(run_dir: Path, outputs: Path) -> Path:
    """A copy of a run folder under another outputs root, at the same ``<date>/<time>`` (where ``resume=auto``
    finds it)."""
    return Path(shutil.copytree(run_dir, outputs / run_dir.parent.name / run_dir.name, symlinks=True))
