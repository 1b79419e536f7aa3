"""What the console costs and shows (issue 20's closing note).

``python benchmarks/console.py display``
    The time the progress display adds to an optimizer step: ``advance`` + ``flush`` every step and ``observe`` of
    a TRL-sized metrics dict (the default run logs ~60 keys) every step, in both modes (a live terminal line and
    plain lines), against a null display. Reported per step, in microseconds.

``python benchmarks/console.py lines <source tree> [overrides ...]``
    Runs ``python -m socratic_exp`` from ``<source tree>`` (the checkout before or after the change) under a
    pseudo-terminal (``script``), as a user at a terminal sees it, and counts the lines it prints (newlines;
    a progress bar redrawing itself in place with carriage returns is one line) and the bytes.

``python benchmarks/console.py report <run folder>``
    The wall time of ``python -m socratic_exp.report <run folder>`` (the run's page), median of 3.
"""

from __future__ import annotations

import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 20_000
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def trl_logs(step: int) -> dict[str, float]:
    """A dict shaped like the default run's TRL log line (SocraticPO on arithmetic: 62 keys)."""
    keys = [f"completions/{k}" for k in ("mean_length", "min_length", "max_length", "clipped_ratio")]
    keys += [f"socraticpo/{k}" for k in ("unassisted_acc", "reward_before_decay", "reward_after_decay")]
    keys += [f"socraticpo/{k}/step{i}" for k in ("guided_acc", "active_share", "correction_rate") for i in (1, 2, 3)]
    keys += ["socraticpo/attempts_per_rollout", "loss", "grad_norm", "learning_rate", "entropy", "step_time"]
    keys += [f"extra/{i}" for i in range(62 - len(keys) - 1)]
    return {"reward": 0.5 + step * 1e-5, **{k: 0.25 for k in keys}}


def time_display(live: bool | None) -> float:
    """Seconds per step of the display (None: no display at all, the baseline loop)."""
    from socratic_exp.core.console import ProgressDisplay

    display = None if live is None else ProgressDisplay(stream=io.StringIO(), live=live)
    logs = [trl_logs(step) for step in range(1, 101)]
    if display is not None:
        display.start(STEPS)
    started = time.perf_counter()
    for step in range(1, STEPS + 1):
        metrics = logs[step % 100]
        if display is not None:
            display.flush()
            display.advance(step)
            display.observe(step, metrics)
            display.flush()
    elapsed = time.perf_counter() - started
    if display is not None:
        display.close()
    return elapsed / STEPS


def display() -> None:
    import logging

    logging.getLogger().addHandler(logging.NullHandler())
    rows = []
    for name, live in (("none", None), ("plain lines", False), ("live terminal line", True)):
        times = [time_display(live) for _ in range(5)]
        rows.append((name, statistics.median(times), min(times)))
    base = rows[0][1]
    print(f"{STEPS} steps, a {len(trl_logs(1))}-key metrics dict observed every step (median of 5 repeats)")
    for name, median, best in rows:
        print(
            f"  {name:<20} {median * 1e6:8.2f} us/step (best {best * 1e6:.2f}), added: {(median - base) * 1e6:.2f} us"
        )


def lines(tree: str, overrides: list[str], keep: str | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="console-lines-") as folder:
        typescript = Path(folder) / "typescript"
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "SOCRATIC_EXP_OUTPUTS": f"{folder}/outputs"}
        command = " ".join([sys.executable, "-m", "socratic_exp", *overrides])
        started = time.perf_counter()
        # a 120 x 40 terminal (a pseudo-terminal opened without one has no size, and tqdm then draws nothing)
        subprocess.run(["script", "-qec", f"stty cols 120 rows 40; {command}", str(typescript)], env=env,
                       cwd=folder, check=False, stdout=subprocess.DEVNULL)  # fmt: skip
        if keep:
            Path(keep).write_bytes(typescript.read_bytes())
        elapsed = time.perf_counter() - started
        raw = typescript.read_bytes()
    text = ANSI.sub(b"", raw.split(b"\n", 1)[1])  # without script's own first line
    shown = text.count(b"\n")
    redraws = text.count(b"\r") - text.count(b"\r\n")
    print(f"{tree}: {shown} lines, {redraws} in-place redraws, {len(raw)} bytes in {elapsed:.0f} s ({command})")


def report(run_dir: str) -> None:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "socratic_exp.study.report", run_dir], check=True, stdout=subprocess.DEVNULL
        )
        times.append(time.perf_counter() - started)
    print(f"python -m socratic_exp.report {run_dir}: median {statistics.median(times):.1f} s of {times}")


if __name__ == "__main__":
    mode, *rest = sys.argv[1:] or ["display"]
    {
        "display": lambda: display(),
        "lines": lambda: lines(rest[0], rest[1:], os.environ.get("KEEP")),
        "report": lambda: report(rest[0]),
    }[mode]()
