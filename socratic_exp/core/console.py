"""What a run shows on the terminal: one progress line, the evaluations, the before/after table.

TRL's per-step dictionaries (40-100 metrics each) go to ``metrics.jsonl``, W&B and the run's log file, not the
terminal (``verbose=true`` brings TRL's own printing back). The progress line shows step / total, elapsed and
remaining time, the training reward (moving mean), the method's own key signal (its declaration's ``signals``,
shown once the run logs its metrics) and the latest held-out score. On a terminal it is a live ``tqdm``
line; elsewhere (a file, a SLURM log, a captured pipe) a plain line every tenth of the run, and at least every
minute (``PLAIN_SECONDS``: a slow run's steps each get one). In a sweep the jobs' progress goes to their log files
only: the launcher prints one line per job start and end.

Dependency noise (deprecation warnings raised inside torch, transformers, TRL, ...) is filtered once, here
(``filter_dependency_noise``); other warnings stay and reach the log file as well. The libraries' own info lines (the
HTTP client's line per teacher request, ...) go to the log file only (``quiet_console``), and the line a failed run
ends with reaches the log file as well as stderr (``say_last``).

The display is cheap by construction: ``advance`` (once per optimizer step) reads the clock once, compares numbers
and, on a terminal, calls ``tqdm.update`` (which redraws at most every 0.5 s); ``observe`` (once per logging step)
keeps the latest value of each metric it shows. ``benchmarks/console.py`` measures it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

STEP_LOG = "socratic_exp.steps"  # TRL's per-step dictionaries: the log file only
PROGRESS_LOG = "socratic_exp.progress"  # the plain progress lines: the log file; the console when not live
EVAL_LOG = "socratic_exp.runtime.evaluation"  # one line per held-out evaluation: the log file and the console
END_LOG = "socratic_exp.end"  # the line a failed or interrupted run ends with: the log file (stderr has it as printed)
OURS = "socratic_exp"  # the loggers whose info lines the console shows; the libraries' go to the log file only
REWARD_WINDOW = 10  # logging steps in the reward's moving mean
PLAIN_LINES = 10  # progress lines of a run when the output is not a terminal: one every tenth of it ...
PLAIN_SECONDS = 60.0  # ... and at least one a minute: at the first step (or update) this long after the last line
QUIET_SECONDS = 10.0  # long work outside the steps (evaluations, phases) shows its progress from this long on

# Warnings that are news to the dependency's maintainers, not to a user of this framework: deprecations raised
# inside (or between) the libraries we call. Matched on the module the warning is attributed to, so a deprecation
# that our own code triggers (attributed to socratic_exp) still shows.
DEPENDENCIES = r"(torch|transformers|trl|accelerate|datasets|huggingface_hub|wandb|pydantic|hydra|omegaconf|peft|"
DEPENDENCIES += r"joblib|google\.protobuf|math_verify|matplotlib|pyarrow|pandas|jieba|sympy|latex2sympy2)(\.|$)"
NOISE_MESSAGES = (
    # TRL 1.16 reads transformers' deprecated ``is_gradient_checkpointing`` at every generation
    r"`is_gradient_checkpointing` is deprecated",
    # TRL's dataloaders ask for pinned memory, which a CPU-only machine cannot give: nothing to act on
    r"'pin_memory' argument is set as true but no accelerator is found",
)


def filter_dependency_noise() -> None:
    """Silence the dependencies' deprecation noise, once per process, and route the remaining warnings through
    logging (so they reach the run's log file too)."""
    if getattr(filter_dependency_noise, "done", False):
        return
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=DEPENDENCIES)
    for message in NOISE_MESSAGES:
        warnings.filterwarnings("ignore", message=message)
    logging.captureWarnings(False)  # routed afresh: a harness (pytest, a notebook) may have swapped the hook since
    logging.captureWarnings(True)
    filter_dependency_noise.done = True  # type: ignore[attr-defined]


SHOWN = {"console": True, "verbose": False}  # this process's choices (``configure``), for trainers built elsewhere


def configure(console: bool = True, verbose: bool = False) -> None:
    """Whether this process's progress reaches the console (not in a sweep's job) and whether TRL's own printing
    is kept (``verbose``); read by ``drop_trainer_printing`` and by ``quiet_trainer``, for trainers the run does not
    build itself (the warm-start)."""
    SHOWN.update(console=console, verbose=verbose)


def run_console(
    objective: str, console: bool, verbose: bool, signals: Mapping[str, tuple[Signal, ...]]
) -> ProgressDisplay:
    """A run's console (``configure``) and its progress display; the libraries' own progress bars are off (datasets'
    "Map: 100%", transformers' "Writing model shards"; ``verbose`` keeps them), and so is the import-time print of
    transformers' W&B integration."""
    configure(console=console, verbose=verbose)
    display = ProgressDisplay(objective, console=console, verbose=verbose, signals=signals)
    if not verbose:
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    import_quietly("transformers.integrations.integration_utils")
    route_library_logs()
    return display


def route_library_logs() -> None:
    """transformers, datasets and the Hub client print their warnings through handlers of their own: transformers'
    then never reach the run's log file, the others' show twice on the console. Their records go through the run's
    handlers instead (the console's filter, the log file), as every other library's."""
    import transformers

    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.enable_propagation()
    for name in ("datasets", "huggingface_hub"):
        library = logging.getLogger(name)
        for handler in list(library.handlers):
            if type(handler) is logging.StreamHandler:  # the library's own stderr handler
                library.removeHandler(handler)


def import_quietly(module: str) -> None:
    """Import ``module`` with its import-time prints swallowed (transformers' W&B integration prints
    "[INFO] Running in WANDB offline mode" when it is imported with WANDB_MODE=offline)."""
    import importlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        importlib.import_module(module)


def route(name: str, to_console: bool) -> logging.Logger:
    """The logger ``name`` writing to the run's log file (the root logger's file handlers, which Hydra sets up)
    and, with ``to_console``, to the console as well (then it simply propagates to the root logger)."""
    logger = logging.getLogger(name)
    logger.propagate = to_console
    logger.setLevel(logging.INFO)
    root_files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    logger.handlers = [] if to_console else root_files
    return logger


class OursOnConsole(logging.Filter):
    """On a console handler: our own lines (``socratic_exp.*``) and every warning and error pass; the libraries'
    info lines (httpx's ``HTTP Request: POST ...`` per teacher request, openai's retries, matplotlib's font cache,
    ...) do not: they reach the log file only. Matched on the logger's name rather than a list of libraries, since
    the set of chatty libraries (and their names: ``httpx2``) changes with every dependency."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name == OURS or record.name.startswith(OURS + ".")


CONSOLE_FILTER = OursOnConsole()


def _console_handlers() -> list[logging.Handler]:
    # Hydra's console is a plain StreamHandler (a FileHandler is a StreamHandler too: hence ``type(...) is``)
    return [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]


@contextlib.contextmanager
def quiet_console(quiet: bool = True) -> Iterator[None]:
    """Within: the console shows our own lines and every warning and error, the libraries' info lines going to the
    log file only (``OursOnConsole``); with ``quiet`` (a sweep's job, whose launcher prints its start and end) the
    console shows warnings and errors only. The log file still gets everything."""
    consoles = _console_handlers()
    levels = [h.level for h in consoles]
    filtered = [h for h in consoles if CONSOLE_FILTER not in h.filters]
    for handler in filtered:
        handler.addFilter(CONSOLE_FILTER)
    if quiet:
        for handler in consoles:
            handler.setLevel(max(handler.level, logging.WARNING))
    try:
        yield
    finally:
        for handler, level in zip(consoles, levels, strict=True):
            handler.setLevel(level)
        for handler in filtered:
            handler.removeFilter(CONSOLE_FILTER)


def say_last(line: str, level: int = logging.ERROR, stream: IO[str] | None = None) -> None:
    """A line a run ends with (its failure, a dry run's verdict): printed as it is on ``stream`` (stderr by default;
    the user's last line, without the log format), and written to the run's log file only through logging, so the
    console shows it once."""
    from socratic_exp.core.secrets import scrub

    line = scrub(line)  # an error's message may quote a secret this process knows (the log's records lose it too)
    print(line, file=stream or sys.stderr, flush=True)
    logger = route(END_LOG, to_console=False)
    if logger.handlers:  # no log file (not under Hydra): Python's last-resort handler would print it a second time
        logger.log(level, line)


def log_step_metrics(step: int, logs: dict[str, Any]) -> None:
    """TRL's per-step dictionary, as one JSON line of the run's log file."""
    logger = logging.getLogger(STEP_LOG)
    if logger.handlers or logger.propagate:
        logger.info("step %d %s", step, json.dumps({k: v for k, v in logs.items() if k != "total_flos"}, default=str))


# --- the method's own key signal -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Signal:
    """One number of the progress line: ``metric`` (a name, or a prefix ending in ``*``: the highest-numbered of the
    metrics it matches, e.g. the guided accuracy after the last attempt) shown as ``label value``."""

    label: str
    metric: str
    digits: int = 2

    def value(self, latest: dict[str, Any]) -> float | None:
        if not self.metric.endswith("*"):
            found = latest.get(self.metric)
            return found if isinstance(found, int | float) else None
        prefix = self.metric[:-1]
        matches = [key for key in latest if key.startswith(prefix)]
        if not matches:
            return None
        last = max(matches, key=lambda key: _number_in(key.removeprefix(prefix)))
        return latest[last] if isinstance(latest[last], int | float) else None


def _number_in(text: str) -> int:
    digits = "".join(ch for ch in text if ch.isdigit())
    return int(digits) if digits else -1


_live = {"console": False}  # whether this process shows live bars (a run's console on a terminal: ProgressDisplay)


def show_live_bars(live: bool) -> None:
    """Whether ``WorkProgress`` draws live bars (a terminal that is the run's console) or logs plain lines."""
    _live["console"] = live


class WorkProgress:
    """Progress of long work outside the training steps (an evaluation's generation, a premise measurement, a TRL
    phase), in the console's style: a live bar where the run's console is a terminal, elsewhere a plain line
    (``PROGRESS_LOG``: the log file, and the console where it is not live) at every tenth of the work and at its end,
    and at least every minute (at the first update ``PLAIN_SECONDS`` after its last line). Work done within
    ``QUIET_SECONDS`` shows nothing (the tiny model's evaluations take a second or two); longer work gets its first
    line once that much time has passed.

    ``update(done, detail)`` takes the work done so far in ``unit`` (fractions allowed: a question half generated)
    and a detail for the line (``batch 2/4, token 120/384``); it reads the clock once and compares numbers unless a
    line is due. The time left is read from the pace since the first update: what came before it (a generation's
    prefill of long prompts) says nothing of the pace, so the first update's line has no estimate."""

    def __init__(self, name: str, total: float, unit: str, *, clock: Callable[[], float] = time.monotonic):
        self.name, self.total, self.unit, self.clock = name, max(total, 1e-9), unit, clock
        self.started = clock()
        self.last_line = self.started  # when the last plain line was written (none yet: the start)
        self.done = 0.0
        self.first: tuple[float, float] | None = None  # (time, done) of the first update: where the pace is read from
        self.next_line = 0.0  # the first line is due as soon as the work has lasted QUIET_SECONDS
        self.shown = False
        self._bar: Any = None
        if _live["console"]:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=round(total), desc=name, unit=f" {unit}", leave=False, dynamic_ncols=True,
                             mininterval=0.5, delay=QUIET_SECONDS, file=sys.stderr)  # fmt: skip

    def update(self, done: float, detail: str = "") -> None:
        moved, self.done = done - self.done, min(done, self.total)
        now = self.clock()
        if self.first is None:
            self.first = (now, self.done)
        if self._bar is not None:
            self._bar.update(round(self.done) - self._bar.n)
            if detail and moved:
                self._bar.set_postfix_str(detail, refresh=False)
        if self.shown:
            due = self.done >= self.next_line or now - self.last_line >= PLAIN_SECONDS
        else:
            due = now - self.started >= QUIET_SECONDS
        if due:
            self.shown, self.last_line = True, now
            self.next_line = (math.floor(self.done / self.total * PLAIN_LINES) + 1) * self.total / PLAIN_LINES
            logging.getLogger(PROGRESS_LOG).info(self.line(detail))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def line(self, detail: str = "") -> str:
        """``eval before training: greedy 32/100 questions | batch 2/4, token 120/384 | 0:45 elapsed, 1:30 left``."""
        now = self.clock()
        elapsed = now - self.started
        since, done_then = self.first or (now, self.done)
        pace = (self.done - done_then) / (now - since) if now > since and self.done > done_then else 0.0
        left = 0.0 if self.done >= self.total else (self.total - self.done) / pace if pace else math.inf
        shown = f"{self.done:.0f}/{self.total:.0f} {self.unit}"
        parts = [f"{self.name} {shown}", detail, f"{_format_duration(elapsed)} elapsed, {_format_duration(left)} left"]
        return " | ".join(part for part in parts if part)


def _format_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressDisplay:
    """The run's progress line. ``observe`` takes every metrics dict the run records (TRL's logs, the sampler's,
    the evaluations); ``start`` / ``advance`` / ``close`` follow the optimizer steps. On a terminal the line is live;
    a plain line (``PROGRESS_LOG``: the log file, and the console where it is not live) comes every tenth of the run,
    and at least every minute: at the first step that ends ``PLAIN_SECONDS`` or more after the last line (or the
    start), so a run whose steps take over a minute gets a line per step."""

    def __init__(
        self,
        objective: str = "eval/greedy_acc",
        *,
        stream: IO[str] | None = None,
        console: bool = True,
        live: bool | None = None,
        verbose: bool = False,
        name: str = "",
        signals: Mapping[str, tuple[Signal, ...]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.objective = objective
        self.method_signals = signals or {}  # {metric prefix: what shows once a metric with it is logged}
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.console = console
        self.live = console and not verbose and (live if live is not None else _is_terminal(self.stream))
        show_live_bars(self.live)
        self.clock = clock
        route(STEP_LOG, to_console=False)  # verbose: TRL's own printing is kept (drop_trainer_printing)
        route(PROGRESS_LOG, to_console=console and not self.live)
        route(EVAL_LOG, to_console=console)
        self.latest: dict[str, Any] = {}
        self.rewards: collections.deque[float] = collections.deque(maxlen=REWARD_WINDOW)
        self.held_out: tuple[int, float] | None = None
        self.signals: list[Signal] = []
        self._seen: set[str] = set()
        self.total = 0
        self.first_step = 0
        self.step = 0
        self.started: float | None = None
        self.next_line = 0
        self.last_line = 0.0  # when the last plain line fell due (the start, before the first)
        self._bar: Any = None
        self._redirect: Any = None
        self._dirty = False
        self._line_due = False

    # --- inputs -----------------------------------------------------------------------------------------------
    def observe(self, step: int, metrics: dict[str, Any]) -> None:
        """A metrics dict as the run records it (once per logging step, evaluation, sampler report)."""
        reward = metrics.get("reward")
        if isinstance(reward, int | float):
            self.rewards.append(float(reward))
        held_out = metrics.get(self.objective)
        if isinstance(held_out, int | float):
            self.held_out = (step, float(held_out))
            logging.getLogger(EVAL_LOG).info(evaluation_line(step, metrics, self.objective))
        if not self._seen.issuperset(metrics):  # a metric name not seen before may bring a method's signal
            self._find_signals(metrics.keys() - self._seen)
            self._seen.update(metrics)
        self.latest.update(metrics)
        self._dirty = True

    def _find_signals(self, metrics: Iterable[str]) -> None:
        for prefix, signals in self.method_signals.items():
            if any(key.startswith(prefix) for key in metrics):
                self.signals += [s for s in signals if s not in self.signals]

    def start(self, total: int, step: int = 0) -> None:
        """Training begins (``step`` > 0 when resumed)."""
        self.total, self.first_step, self.step = total, step, step
        self.started = self.last_line = self.clock()
        self.next_line = step + self._line_every()
        if self.live:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            before = list(logging.getLogger().handlers)
            self._redirect = logging_redirect_tqdm()  # log lines print above the bar, not through it
            self._redirect.__enter__()
            if any(CONSOLE_FILTER in h.filters for h in before):  # an older tqdm copies the format, not the filter
                for handler in logging.getLogger().handlers:
                    if handler not in before:
                        handler.addFilter(CONSOLE_FILTER)
            self._bar = tqdm(
                total=total,
                initial=step,
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.5,
                bar_format=(f"{self.name}: " if self.name else "")
                + "{n_fmt}/{total_fmt} steps [{elapsed}<{remaining}]{postfix}",  # tqdm puts ", " before the postfix
            )
        resumed = f" (resumed at step {step})" if step else ""
        logging.getLogger(PROGRESS_LOG).info("%s: %d steps%s", self.name or "training", total, resumed)

    def advance(self, step: int) -> None:
        """An optimizer step ended (``step`` = the trainer's global step)."""
        if self.started is None:
            return
        moved, self.step = step - self.step, step
        if self._bar is not None:
            if self._dirty:
                self._bar.set_postfix_str(self.status(), refresh=False)
                self._dirty = False
            self._bar.update(moved)
        now = self.clock()
        if step >= self.next_line:  # a tenth of the run: printed once the step's logs are in (``flush``)
            self.next_line = step + self._line_every()
            self._line_due, self.last_line = True, now
        elif now - self.last_line >= PLAIN_SECONDS:  # a minute without a line; the tenths stay where they were
            self._line_due, self.last_line = True, now

    def flush(self) -> None:
        """The plain progress line, when one is due (called after the trainer's logs of a step, and before the
        next step begins when the step logged nothing)."""
        if self._bar is not None and self._dirty:  # the step's own numbers, now that its logs are in
            self._bar.set_postfix_str(self.status(), refresh=True)
            self._dirty = False
        if self._line_due:
            self._line_due = False
            logging.getLogger(PROGRESS_LOG).info(self.line())

    def close(self) -> None:
        self.flush()
        show_live_bars(False)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None
        self.started = None

    # --- output -----------------------------------------------------------------------------------------------
    def _line_every(self) -> int:
        return max(1, math.ceil(self.total / PLAIN_LINES))

    def status(self) -> str:
        """The numbers after the step count: reward, the method's signal, the held-out score."""
        parts = []
        if self.rewards:
            parts.append(f"reward {sum(self.rewards) / len(self.rewards):.2f}")
        for signal in self.signals:
            value = signal.value(self.latest)
            if value is not None:
                parts.append(f"{signal.label} {value:.{signal.digits}f}")
        if self.held_out is not None:
            step, value = self.held_out
            parts.append(f"{self.objective.removeprefix('eval/')} {value:.3f} (step {step})")
        return " | ".join(parts)

    def line(self) -> str:
        """The plain progress line: ``step 40/150 | 1:02 elapsed, 2:51 left | reward 0.62 | ...``."""
        elapsed = self.clock() - (self.started or self.clock())
        done = self.step - self.first_step
        left = elapsed / done * (self.total - self.step) if done > 0 else math.inf
        head = f"{self.name} " if self.name else ""
        head += f"step {self.step}/{self.total} | {_format_duration(elapsed)} elapsed, {_format_duration(left)} left"
        status = self.status()
        return f"{head} | {status}" if status else head


def result_table(initial: dict[str, float], final: dict[str, float], assisted_attempts: int) -> str:
    """The run's before/after table: each top-level held-out metric before and after training, and what it means."""
    meanings = {
        "eval/greedy_acc": "unassisted, greedy",
        "eval/sampled_acc": "unassisted, sampled",
        "eval/assisted_acc": f"with the teacher's guidance, up to {assisted_attempts} attempts",
        "eval/no_answer": "share without a readable answer",
        "eval/strict_acc": "greedy, answers read in the task's format",
        "eval/flexible_acc": "greedy, answers read leniently (e.g. the last number)",
        "eval/train_seconds": "training wall time (s), evaluations excluded",
        "eval/train_tokens": "tokens generated and read in training (prompts and completions)",
    }
    lines = [f"  {'':<24} {'before':>6}    {'after':>6}"]
    for key in (k for k in final if k.count("/") == 1):
        pass_k = key.removeprefix("eval/pass@") if key.startswith("eval/pass@") else None
        meaning = meanings.get(key, f"solved by any of {pass_k} samples" if pass_k else "")
        before = initial.get(key)
        shown = _table_number(before) if _is_number(before) else f"{'-':>6}"  # e.g. no assisted pass before training
        lines.append(f"  {key:<24} {shown} -> {_table_number(final[key])}   {meaning}")
    return "\n".join(lines)


def _table_number(value: float) -> str:
    """A count as a whole number (tokens), any other figure to three decimals."""
    return f"{value:>6d}" if isinstance(value, int) else f"{value:>6.3f}"


def evaluation_line(step: int, metrics: dict[str, Any], objective: str) -> str:
    """``held-out at step 50: greedy_acc 0.550, sampled_acc 0.431, pass@4 0.712``: the objective first, then the
    other top-level evaluation metrics (difficulty buckets and teacher counters are in metrics.jsonl)."""
    keys = [objective] + [k for k in metrics if k.startswith("eval/") and k.count("/") == 1 and k != objective]
    shown = ", ".join(f"{k.removeprefix('eval/')} {metrics[k]:.3f}" for k in keys if _is_number(metrics.get(k)))
    return f"held-out at step {step}: {shown}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
