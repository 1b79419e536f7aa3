"""The console: the progress line's numbers, the method signals by metric name, the dependency-noise filter."""

from __future__ import annotations

import io
import logging
import warnings

import pytest

from socratic_exp.core import console
from socratic_exp.core.console import EVAL_LOG, PROGRESS_LOG, ProgressDisplay, Signal, evaluation_line

SOCRATICPO = {
    "socraticpo/unassisted_acc": 0.5,
    "socraticpo/guided_acc/step1": 0.5,
    "socraticpo/guided_acc/step3": 0.75,
    "socraticpo/guided_acc/step2": 0.6,
    "socraticpo/attempts_per_rollout": 1.75,
}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def declared_signals() -> dict:
    """Every method's console signals, as the run hands them to its display."""
    from socratic_exp.core.methods import signals_of
    from socratic_exp.runtime.methods import declared_methods

    return signals_of(declared_methods())


@pytest.fixture
def plain(caplog):
    """A display writing plain lines (not a terminal), with a clock the test moves."""
    caplog.set_level(logging.INFO)
    clock = Clock()
    display = ProgressDisplay(
        "eval/greedy_acc", stream=io.StringIO(), live=False, signals=declared_signals(), clock=clock
    )
    for name in (PROGRESS_LOG, EVAL_LOG):  # caplog listens on the root logger
        logging.getLogger(name).propagate = True
    return display, clock, caplog


def _lines(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_plain_lines_every_tenth_with_time_left_reward_mean_signal_and_held_out(plain):
    display, clock, caplog = plain
    display.observe(0, {"eval/greedy_acc": 0.25, "eval/no_answer": 0.5, "eval/greedy_acc/d1": 0.9})
    display.start(20)
    for step in range(1, 21):
        clock.now += 3.0  # 3 s a step
        display.advance(step)
        display.observe(step, {"reward": step / 10, **SOCRATICPO})
        display.flush()
    lines = _lines(caplog, PROGRESS_LOG)
    assert lines[0] == "training: 20 steps"
    assert len(lines) == 11  # a line every 2 steps (a tenth of 20)
    # step 4: 12 s elapsed, 16 steps left at 3 s; reward mean of 0.1..0.4 = 0.25; guided = the last attempt's
    assert lines[2] == (
        "step 4/20 | 0:12 elapsed, 0:48 left | reward 0.25 | unassisted 0.50 | guided 0.75 | attempts 1.8 | "
        "greedy_acc 0.250 (step 0)"
    )
    # the reward's moving mean covers the last 10 logs: 1.1 .. 2.0 -> 1.55
    assert lines[-1].startswith("step 20/20 | 1:00 elapsed, 0:00 left | reward 1.55 |")
    assert _lines(caplog, EVAL_LOG) == ["held-out at step 0: greedy_acc 0.250, no_answer 0.500"]


def _steps(lines: list[str]) -> list[int]:
    """The step numbers of the plain progress lines (``step 13/100 | ...``), the announcement left out."""
    return [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step ")]


def _train(display, clock, total: int, steps: int, seconds: float) -> None:
    display.start(total)
    for step in range(1, steps + 1):
        clock.now += seconds
        display.advance(step)
        display.flush()


def test_a_slow_run_prints_a_line_after_every_step(plain):
    """Steps of 66 s (a real model on CPU): a minute passes within each step, so each gets its line, long before
    the first tenth (step 10, 11 minutes in)."""
    display, clock, caplog = plain
    _train(display, clock, total=100, steps=3, seconds=66.0)
    assert _lines(caplog, PROGRESS_LOG) == [
        "training: 100 steps",
        "step 1/100 | 1:06 elapsed, 1:48:54 left",  # 99 steps left at 66 s
        "step 2/100 | 2:12 elapsed, 1:47:48 left",
        "step 3/100 | 3:18 elapsed, 1:46:42 left",
    ]


def test_a_fast_run_prints_a_line_every_tenth_only(plain):
    display, clock, caplog = plain
    _train(display, clock, total=100, steps=100, seconds=1.0)
    assert _steps(_lines(caplog, PROGRESS_LOG)) == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


def test_a_line_is_due_a_minute_after_the_last_and_at_every_tenth(plain):
    """Steps of 25 s: step 3 ends 75 s after the start (step 2: 50 s), then every third step; the tenth (step 10,
    25 s after step 9's line) has its line all the same, and the minute counts from it: step 13 (75 s later)."""
    display, clock, caplog = plain
    _train(display, clock, total=100, steps=30, seconds=25.0)
    assert _steps(_lines(caplog, PROGRESS_LOG)) == [3, 6, 9, 10, 13, 16, 19, 20, 23, 26, 29, 30]


def test_a_resumed_run_counts_time_left_from_its_own_steps(plain):
    display, clock, caplog = plain
    display.start(100, step=50)
    clock.now += 50.0
    display.advance(60)
    display.flush()
    assert _lines(caplog, PROGRESS_LOG)[-1] == "step 60/100 | 0:50 elapsed, 3:20 left"
    assert _lines(caplog, PROGRESS_LOG)[0] == "training: 100 steps (resumed at step 50)"


def test_a_named_display_says_what_it_counts(plain):
    display, clock, caplog = plain
    display.name = "warm-start"
    display.start(10)
    clock.now += 5.0
    display.advance(1)
    display.flush()
    assert _lines(caplog, PROGRESS_LOG) == ["warm-start: 10 steps", "warm-start step 1/10 | 0:05 elapsed, 0:45 left"]


@pytest.mark.parametrize(
    ("metrics", "shown"),
    [
        ({"entropy_mask/kept_fraction": 0.2, "entropy_mask/entropy_p80": 1.3}, "kept 0.20"),
        ({"sampler/updates": 3.0, "sampler/zero_variance_share": 0.375}, "zero-var 0.38"),
        ({"self_distillation/reward_margin": 0.0123, "vpd/beta": 0.1}, "margin 0.012"),
        ({"socratic_rl/active": 4, "socratic_rl/utility_mean": -0.0625}, "|V| 4 | utility -0.062"),
        ({"sampler/zero_variance_share": 0.5}, ""),  # a uniform sampler: not the Goldilocks signal
        ({"loss": 1.0}, ""),
    ],
)
def test_each_method_shows_its_own_signal(metrics, shown):
    display = ProgressDisplay(stream=io.StringIO(), live=False, signals=declared_signals())
    display.observe(1, metrics)
    assert display.status() == shown


def test_a_signal_pattern_takes_the_highest_numbered_metric():
    signal = Signal("guided", "socraticpo/guided_acc/step*")
    latest = {
        "socraticpo/guided_acc/step2": 0.6,
        "socraticpo/guided_acc/step10": 0.9,
        "socraticpo/guided_acc/step9": 0.1,
    }
    assert signal.value(latest) == 0.9
    assert signal.value({}) is None
    assert Signal("x", "a/b").value({"a/b": "text"}) is None


def test_evaluation_line_puts_the_objective_first_and_skips_buckets_and_counters():
    metrics = {"eval/greedy_acc": 0.5, "eval/pass@4": 0.75, "eval/objective_x": True, "eval/teacher/requests": 3.0}
    assert evaluation_line(7, metrics, "eval/pass@4") == "held-out at step 7: pass@4 0.750, greedy_acc 0.500"


def test_terminal_display_is_a_single_live_line_without_logging_to_the_console(caplog):
    stream = io.StringIO()
    display = ProgressDisplay(stream=stream, live=True)
    display.start(5)
    for step in range(1, 6):
        display.observe(step, {"reward": 1.0})
        display.advance(step)
    display.close()
    assert "5/5 steps" in stream.getvalue() and "reward 1.00" in stream.getvalue()
    assert logging.getLogger(PROGRESS_LOG).propagate is False  # progress lines: the log file only


def test_sweep_jobs_keep_their_lines_off_the_console():
    display = ProgressDisplay(stream=io.StringIO(), console=False)
    assert not display.live
    assert not logging.getLogger(PROGRESS_LOG).propagate and not logging.getLogger(EVAL_LOG).propagate


def test_dependency_deprecations_are_filtered_but_ours_and_real_warnings_stay(monkeypatch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        monkeypatch.setattr(console.filter_dependency_noise, "done", False, raising=False)
        console.filter_dependency_noise()
        logging.captureWarnings(False)  # keep them in `caught` rather than the logging system
        for module, category in [
            ("transformers.trainer", FutureWarning),
            ("trl.trainer.grpo_trainer", DeprecationWarning),
            ("torch.utils.data.dataloader", UserWarning),  # a real warning from a dependency
            ("socratic_exp.run", DeprecationWarning),  # our own use of a deprecated API
        ]:
            warnings.warn_explicit(f"{module} says", category, "x.py", 1, module=module)
        warnings.warn_explicit(
            "'pin_memory' argument is set as true but no accelerator is found", UserWarning, "x.py", 2, module="torch"
        )
    assert sorted(str(w.message) for w in caught) == ["socratic_exp.run says", "torch.utils.data.dataloader says"]


# --- in a run -----------------------------------------------------------------------------------------------------
def test_log_records_lose_the_secrets_of_the_command_line(caplog):
    from socratic_exp.core.secrets import redact_logs

    caplog.set_level(logging.INFO)
    redact_logs(["hf_CANARYlog1234"])
    logging.getLogger("hydra.core").info("#%d : %s", 0, "+x.hub_token=hf_CANARYlog1234 seed=0")
    assert caplog.records[-1].getMessage() == "#0 : +x.hub_token=<redacted> seed=0"


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_a_sweep_prints_one_line_per_job_start_and_end_and_no_secret(run_app, launcher):
    canary = "hf_CANARYsweep1234"
    proc, outputs = run_app(
        "-m", f"hydra/launcher={launcher}", "dry_run=true", f"+algorithm.trl_args.hub_token={canary}", "seed=0,1"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    starts = [line for line in lines if "#0 : " in line or "#1 : " in line]
    assert len(starts) == 2 and "+algorithm.trl_args.hub_token=<redacted> seed=0" in starts[0]
    if launcher == "local":  # ours also prints each job's end (a dry run writes no summary)
        assert len([line for line in lines if "] #" in line and " done)" in line]) == 2
    assert canary not in proc.stdout + proc.stderr
    assert not [p for p in outputs.rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_trl_dictionaries_stay_off_the_console_unless_verbose(run_app, verbose):
    proc, outputs = run_app(
        "debug=quick_warmstart", "logger=none", "algorithm.max_steps=2", "eval.every_steps=0", f"verbose={verbose}"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = proc.stdout + proc.stderr
    (log_file,) = outputs.glob("*/*/socratic_exp.log")
    assert ("{'loss':" in shown) is verbose  # TRL's per-step dictionary
    assert '"loss":' in log_file.read_text()  # always in the log file
    assert "step 2/2 |" in shown and "held-out at step 2: greedy_acc" in shown
    assert "eval/greedy_acc" in shown.split("held-out results in")[-1]  # the before/after table stays


def test_long_work_reports_every_tenth_and_its_end_once_it_has_lasted(plain):
    """An evaluation's generation, a premise measurement, a TRL phase: once the work has lasted QUIET_SECONDS (10 s)
    a plain line, then one at every tenth of it (fractions count: a batch half generated) and at its end, with the
    time left at the pace since the first update (a prefill before it says nothing of the pace); work done sooner
    shows nothing."""
    _, clock, caplog = plain
    quick = console.WorkProgress("eval at step 20: greedy", 400, "questions", clock=clock)
    clock.now += 2.0
    quick.update(400.0)
    assert _lines(caplog, PROGRESS_LOG) == []
    work = console.WorkProgress("eval before training: greedy", 40, "questions", clock=clock)
    for done in (2.0, 3.5, 4.0, 9.0, 40.0):
        clock.now += 10.0
        work.update(done, f"at {done:g}")
    work.close()
    assert _lines(caplog, PROGRESS_LOG) == [
        "eval before training: greedy 2/40 questions | at 2 | 0:10 elapsed, ? left",  # 10 s: the first line, no pace
        "eval before training: greedy 4/40 questions | at 4 | 0:30 elapsed, 6:00 left",  # a tenth; 2 in 20 s, 36 left
        "eval before training: greedy 9/40 questions | at 9 | 0:40 elapsed, 2:13 left",  # 7 in 30 s, 31 left
        "eval before training: greedy 40/40 questions | at 40 | 0:50 elapsed, 0:00 left",
    ]


class _Model:
    """What the load and checkpoint lines read of a model: its size and dtype."""

    def __init__(self, parameters: int):
        self.parameters = parameters
        self.dtype = "torch.float32"

    def num_parameters(self) -> int:
        return self.parameters


def test_a_large_student_announces_its_load_and_checkpoints_and_a_small_one_stays_silent(plain):
    """The load line; the checkpoint line just before the save: at the step's end when the step logs nothing, else
    after its logs (and evaluation), then the time the save took."""
    from types import SimpleNamespace

    from socratic_exp.models.base import Student, announce_load
    from socratic_exp.runtime.callbacks import CheckpointNoticeCallback

    display, _, caplog = plain
    smollm2, tiny = _Model(134_515_008), _Model(49_999_999)
    announce_load(Student(model=smollm2, tokenizer=None, path="", info={"name": "HuggingFaceTB/SmolLM2"}), 1.6)
    announce_load(Student(model=tiny, tokenizer=None, path="", info={"name": "tiny"}), 0.2)
    notice = CheckpointNoticeCallback(display)
    for step, model, save, log in ((25, smollm2, True, False), (50, smollm2, True, True), (75, tiny, True, True),
                                   (80, smollm2, False, True)):  # fmt: skip
        state = SimpleNamespace(is_world_process_zero=True, global_step=step)
        control = SimpleNamespace(should_save=save, should_log=log)
        notice.on_step_end(None, state, control, model=model)
        caplog.records.append(logging.makeLogRecord({"name": PROGRESS_LOG, "msg": f"step {step} ended"}))
        if log:
            notice.on_log(None, state, control)
        if save:
            notice.on_save(None, state, control)
    assert _lines(caplog, PROGRESS_LOG) == [
        "student HuggingFaceTB/SmolLM2 loaded in 2 s (134.5M parameters, float32)",
        "saving the checkpoint of step 25",  # no logs: at the step's end
        "step 25 ended",
        "checkpoint of step 25 saved in 0 s",
        "step 50 ended",
        "saving the checkpoint of step 50",  # after the step's logs
        "checkpoint of step 50 saved in 0 s",
        "step 75 ended",
        "step 80 ended",
    ]


def test_long_work_also_reports_every_minute(plain):
    """Slow work (1 unit every 7 s, 1000 units: a tenth is 700 s): the first line once 10 s have passed (2 units,
    14 s), then a line at the first update 60 s or more after the last (every 9th: 63 s) and at the tenth (100)."""
    _, clock, caplog = plain
    work = console.WorkProgress("premises", 1000, "questions", clock=clock)
    for done in range(1, 121):
        clock.now += 7.0
        work.update(float(done))
    work.close()
    lines = _lines(caplog, PROGRESS_LOG)
    assert [int(line.split()[1].split("/")[0]) for line in lines] == [2, 11, 20, 29, 38, 47, 56, 65, 74, 83, 92, 100,
                                                                      109, 118]  # fmt: skip
    # 77 s in; the pace since the first update (1 at 7 s): 10 units in 70 s, so 989 left take 6923 s
    assert lines[1] == "premises 11/1000 questions | 1:17 elapsed, 1:55:23 left"
