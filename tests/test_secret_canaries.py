"""No secret reaches the console, a log, a file or W&B, by any route: a distinct canary is passed through each route
(first, last and alone on the command line), then the console and every file under the outputs root are searched as
bytes (pickles, zips and W&B's binary logs included) for it.

The routes: Hydra's own errors (a key without ``+``, a syntax error), our errors (an unknown key, a bad value that
the error line would quote), a ``-m`` sweep on the local launcher (its job files, its jobs' folders and logs,
``multirun.yaml``, ``sweep_summary.md`` / ``.csv``), a sweep on the SLURM launcher (submitit's local executor: the
pickled submission and result under ``.submitit/``, the task's logs), a run that fails with a bug while
``verbose=true`` (its traceback in ``summary.json``, a warning and a logged exception quoting the secret), and the
secrets of the environment (``OPENAI_API_KEY``, ``HF_TOKEN``, ``WANDB_API_KEY``, the teacher's ``api_key_env``
variable) in a real training run with W&B offline and checkpoints. Where a job needs the secret, the test also
checks that it got it (a teacher server that sees the key or the request body).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import app_in, assert_refused, file_contents
from openai_stub import StubServer

from socratic_exp.core.run_folder import read_summary

pytestmark = pytest.mark.fault

REDACTED = "<redacted>"


def leaks(canaries: list[str], outputs: Path, *consoles: str) -> list[str]:
    """Where any canary is: the consoles, and every file under ``outputs``."""
    found = [f"{c} on the console" for c in canaries for console in consoles if c in console]
    for path in sorted(outputs.rglob("*")) if outputs.exists() else []:
        if path.is_file():
            data = file_contents(path)
            found += [f"{c} in {path.relative_to(outputs)}" for c in canaries if c.encode() in data]
    return found


def run(tmp_path: Path, *arguments: str, env: dict[str, str] | None = None, timeout: int = 300):
    """``python -m socratic_exp <arguments>`` with outputs under tmp_path; returns (process, outputs root)."""
    return app_in(tmp_path, tmp_path / "cache", *arguments, env=env, timeout=timeout)


class RecordingStub(StubServer):
    """The OpenAI-compatible stub, keeping every request body (the teacher sends ``extra_body`` in it)."""

    def __init__(self, **kwargs):
        self.bodies: list[bytes] = []
        super().__init__(**kwargs)

    def _handler(self):
        base, stub = super()._handler(), self

        class Recording(base):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stub.bodies.append(data)
                self.rfile = io.BytesIO(data)
                super().do_POST()

        return Recording


# --- the command line: each route with its canary first, last, alone, and in a sweep --------------------------
ROUTES = {  # the override (its canary as {}), the exit code, a phrase of the one error line
    "key-without-plus": ("teacher.api_key={}", 2, "+teacher.api_key=<redacted>"),
    "trl-argument-without-plus": ("algorithm.trl_args.hub_token={}", 2, "+algorithm.trl_args.hub_token=<redacted>"),
    "syntax-error": ("+teacher.extra_body={{api_key: {}", 2, "{api_key: <redacted>"),
    "unknown-key": ("+teacher.api_key={}", 2, "teacher.api_key: unknown key"),
    "error-quoting-the-value": ("+algorithm.trl_args.push_to_hub_token={}", 2, "push_to_hub_token='<redacted>'"),
}
OTHERS = ("dry_run=true", "logger=none", "seed=3")
POSITIONS = {
    "first": lambda override: [override, *OTHERS],
    "last": lambda override: [*OTHERS, override],
    "alone": lambda override: [override],
    "sweep": lambda override: ["-m", "seed=0,1", override, "dry_run=true", "logger=none"],
}


@pytest.mark.parametrize("position", list(POSITIONS))
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_canary_on_the_command_line_reaches_neither_the_console_nor_a_file(tmp_path, route, position):
    template, code, phrase = ROUTES[route]
    canary = f"sk-canary-{route}-{position}-1234567890"
    proc, outputs = run(tmp_path, *POSITIONS[position](template.format(canary)))
    assert leaks([canary], outputs, proc.stdout, proc.stderr) == []
    if position == "sweep" and route in ("unknown-key", "error-quoting-the-value"):  # each job fails, the sweep goes on
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
        assert f"{phrase}" in proc.stdout + proc.stderr
        (sweep,) = outputs.glob("multirun/*/*")
        assert (sweep / "sweep_summary.md").is_file() and (sweep / "sweep_summary.csv").is_file()
        assert [read_summary(sweep / job)["status"] for job in "01"] == ["failed", "failed"]
    else:
        assert_refused(proc, phrase, code=code)


# --- a real sweep on the SLURM launcher, with secrets on the command line and in the environment ----------------
ENVIRONMENT_CANARIES = {
    "OPENAI_API_KEY": "sk-canary-env-openai-1234567890",
    "HF_TOKEN": "hf_canary_env_hf_token_1234567890",
    "WANDB_API_KEY": "canaryenvwandb0123456789abcdef0123456789",
    "SX_TEACHER_VARIABLE": "sk-canary-env-teacher-variable-1234567890",  # named by teacher.api_key_env
}
SWEEP_CANARIES = {
    "first": "hf_canary_sweep_first_hub_token_1234567890",
    "middle": "sk-canary-sweep-middle-password-1234567890",
    "last": "sk-canary-sweep-last-extra-body-1234567890",
}
SHORT_RUN = (  # the shortest real run: 1 step of 4 completions, its checkpoint, 8 questions evaluated before and after
    "debug=fast",
    "algorithm.max_steps=1",
    "algorithm.save_steps=1",
    "algorithm.batch_size=4",
    "eval.every_steps=0",
    "eval.max_samples=8",
    "eval.pass_k=0",
)


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """``-m`` over one job that trains, on the SLURM launcher's path (submitit's local executor: the pickled
    submission, the task's logs), with W&B offline, checkpoints and the blackbox teacher on a stub that demands the
    key of ``$SX_TEACHER_VARIABLE``; a canary first, in the middle and last, and canaries in the environment."""
    tmp_path = tmp_path_factory.mktemp("real_sweep")
    with RecordingStub(api_key=ENVIRONMENT_CANARIES["SX_TEACHER_VARIABLE"]) as server:
        proc, outputs = run(
            tmp_path,
            "-m",
            f"+algorithm.trl_args.hub_token={SWEEP_CANARIES['first']}",
            *SHORT_RUN,
            "seed=0",
            "verbose=true",
            "logger=wandb",
            "hydra/launcher=socratic_exp_submitit_local",
            f"+hydra.job.env_set.SX_PASSWORD={SWEEP_CANARIES['middle']}",  # Hydra's own settings: its dumps
            "teacher=blackbox",
            f"teacher.model={server.model}",
            f"teacher.base_url={server.url}",
            "teacher.api_key_env=SX_TEACHER_VARIABLE",
            f"teacher.cache_dir={tmp_path / 'teacher-cache'}",
            f"+teacher.extra_body={{api_key: {SWEEP_CANARIES['last']}, top_k: 20}}",
            env=ENVIRONMENT_CANARIES,
            timeout=600,
        )
    return proc, outputs, server


def test_a_real_sweep_writes_no_secret_of_its_command_line_or_environment(real_sweep):
    proc, outputs, server = real_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = outputs.glob("multirun/*/*")
    job = sweep / "0"
    # what is searched: the sweep's files, submitit's, the job's Hydra dumps, log, checkpoints (TRL's pickled
    # arguments, trainer state) and W&B's offline run
    kept = ["multirun.yaml", "sweep_summary.md", "sweep_summary.csv", "0/.hydra/hydra.yaml", "0/socratic_exp.log"]
    kept += [f"0/checkpoints/checkpoint-1/{name}" for name in ("training_args.bin", "trainer_state.json")]
    for name in kept:
        assert (sweep / name).is_file(), name
    for pattern in ("*_submitted.pkl", "*_0_result.pkl", "*_0_log.out", "*_0_log.err"):
        assert list(sweep.glob(f".submitit/*/{pattern}")), pattern
    assert list(job.glob("wandb/offline-run-*/run-*.wandb"))
    canaries = [*SWEEP_CANARIES.values(), *ENVIRONMENT_CANARIES.values()]
    assert leaks(canaries, outputs, proc.stdout, proc.stderr) == []
    assert read_summary(job)["status"] == "completed"
    assert f"+teacher.extra_body={{api_key:{REDACTED},top_k:20}}" in read_summary(job)["overrides"]  # as Hydra splits
    # the job got its secrets (through its environment): the teacher's key, and the request body's entry
    assert f"Bearer {ENVIRONMENT_CANARIES['SX_TEACHER_VARIABLE']}" in server.authorizations
    assert any(SWEEP_CANARIES["last"].encode() in body for body in server.bodies)


# --- the local launcher's job files -----------------------------------------------------------------------------
def test_a_job_composed_through_the_environment_gets_the_same_config(monkeypatch):
    """What a launcher writes for a job (each secret as ``${oc.env:SOCRATIC_EXP_SECRET_<n>}``) composes, with the
    variables in the job's environment, the config the command line does; a secret given as an interpolation stays."""
    from omegaconf import OmegaConf

    from socratic_exp.core.config import compose
    from socratic_exp.core.secrets import through_environment

    canary = "hf_canary_composed_1234567890"
    monkeypatch.setenv("SX_MY_TOKEN", "sk-canary-from-my-variable-1234567890")
    overrides = [
        f"+algorithm.trl_args.hub_token={canary}",
        "teacher=blackbox",
        "teacher.model=m",
        f"+teacher.extra_body={{api_key: '{canary}2', top_k: 20}}",
        "+logger.api_key=${oc.env:SX_MY_TOKEN}",
    ]
    variables: dict[str, str] = {}
    written = through_environment(overrides, variables)
    assert not [o for o in written if canary in o] and written[-1] == overrides[-1]
    assert sorted(variables.values()) == [canary, f"{canary}2"]
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert OmegaConf.to_container(compose(*written), resolve=True) == OmegaConf.to_container(
        compose(*overrides), resolve=True
    )


def test_the_local_launchers_job_files_hold_no_secret_and_the_job_gets_it(run_in_process, monkeypatch):
    """What the launcher writes to each job's file (its pickled payload) and what it hands the job's process."""
    from socratic_exp.multirun import local

    canary = "hf_canary_job_file_1234567890"
    handed: list[tuple[bytes, dict[str, str]]] = []
    start = local.run_job_processes

    def recording(payload, environment, *args):
        handed.append((payload, environment))
        return start(payload, environment, *args)

    monkeypatch.setattr(local, "run_job_processes", recording)
    proc, outputs = run_in_process(
        "-m", "seed=0", f"+algorithm.trl_args.hub_token={canary}", "dry_run=true", "logger=none",
        f"+hydra.job.env_set.SX_CANARY_KEY={canary}x",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "config OK" in proc.stdout + proc.stderr  # the job ran
    ((payload, environment),) = handed
    assert canary.encode() not in payload
    assert b"${oc.env:SOCRATIC_EXP_SECRET_" in payload
    secrets = {value for name, value in environment.items() if name.startswith("SOCRATIC_EXP_SECRET_")}
    assert secrets == {canary, f"{canary}x"}
    assert leaks([canary], outputs, proc.stdout, proc.stderr) == []


# --- a secret in Hydra's own overrides, on the SLURM launcher ----------------------------------------------------
def test_a_slurm_sweep_hands_a_secret_of_hydras_own_overrides_to_its_job_through_the_environment(tmp_path):
    """``+hydra.job.env_set.<VAR>=<secret>`` is what every job is composed with: it reaches no file under
    ``.submitit/`` (the pickled submission: the launcher, its config, the overrides, Hydra's state; its result; the
    task's logs) or elsewhere, and the job still gets it (the teacher server accepts the key it puts in
    ``$SX_SLURM_KEY``)."""
    canaries = {
        "first": "hf_canary_slurm_first_1234567890",
        "env_set": "sk-canary-slurm-env-set-1234567890",
        "last": "sk-canary-slurm-last-1234567890",
    }
    with StubServer(api_key=canaries["env_set"]) as server:
        proc, outputs = run(
            tmp_path,
            "-m",
            f"+algorithm.trl_args.hub_token={canaries['first']}",
            "seed=0",
            "dry_run=true",
            "logger=none",
            "hydra/launcher=socratic_exp_submitit_local",
            f"+hydra.job.env_set.SX_SLURM_KEY={canaries['env_set']}",
            "teacher=blackbox",
            f"teacher.model={server.model}",
            f"teacher.base_url={server.url}",
            "teacher.api_key_env=SX_SLURM_KEY",
            f"+teacher.extra_body={{api_key: {canaries['last']}}}",
            env={"OMP_NUM_THREADS": "1"},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = outputs.glob("multirun/*/*")
    submitted = list(sweep.glob(".submitit/*/*_submitted.pkl"))
    (task_log,) = sweep.glob(".submitit/*/*_0_log.out")
    assert submitted and list(sweep.glob(".submitit/*/*_result.pkl"))
    assert "config OK" in task_log.read_text()  # the job ran, and the server accepted the key it was handed
    assert f"Bearer {canaries['env_set']}" in server.authorizations
    assert leaks(list(canaries.values()), outputs, proc.stdout, proc.stderr) == []


# --- a bug in a verbose run ------------------------------------------------------------------------------------
def test_a_bug_in_a_verbose_run_quoting_a_secret_leaves_it_nowhere(run_in_process, monkeypatch):
    """A library that quotes the token in a warning, in a logged exception and in the error that ends the run
    (a bug: its traceback is kept in summary.json), with W&B offline: the command line's secret and the
    environment's are replaced everywhere."""
    import logging
    import warnings

    from socratic_exp.runtime import assembly

    canary, environment_canary = "hf_canary_verbose_bug_1234567890", "sk-canary-verbose-environment-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", environment_canary)

    def failing_workbench(*args, **kwargs):
        warnings.warn(f"the token {canary} expires soon", UserWarning, stacklevel=1)
        try:
            raise ValueError(f"the server refused {canary} and {environment_canary}")
        except ValueError:
            logging.getLogger("some.library").warning("retrying", exc_info=True)
        raise RuntimeError(f"cannot load with token {canary} (key {environment_canary})")

    monkeypatch.setattr(assembly, "workbench", failing_workbench)
    proc, outputs = run_in_process(
        f"+algorithm.trl_args.hub_token={canary}", *SHORT_RUN, "verbose=true", "logger=wandb"
    )
    # the one line that ends the run (the library's own logged traceback is shown too: verbose)
    assert proc.returncode == 1
    (line,) = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert line.startswith("error: RuntimeError: cannot load with token <redacted> (key <redacted>) (traceback in ")
    (run_dir,) = [p.parent for p in outputs.glob("*/*/summary.json")]
    summary = read_summary(run_dir)
    assert summary["status"] == "failed" and "failing_workbench" in summary["traceback"]
    log = (run_dir / "socratic_exp.log").read_text()
    assert "the token <redacted> expires soon" in log and "ValueError: the server refused <redacted> and" in log
    assert list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert leaks([canary, environment_canary], outputs, proc.stdout, proc.stderr) == []
