"""One run: validate, then build the components, train, evaluate and write the run folder.

``run_job`` is what the Hydra app calls. Every failure ends the same way: ``summary.json`` says ``failed`` with
the error (and its traceback, for bugs), W&B is closed with a non-zero exit code, and one line on stderr says
what went wrong; a single run then exits non-zero, while in ``-m`` the sweep goes on with its other jobs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from socratic_exp import distributed
from socratic_exp.components import GROUPS, Components, build_components
from socratic_exp.console import (
    ProgressDisplay,
    configure,
    filter_dependency_noise,
    import_quietly,
    quiet_console,
)
from socratic_exp.errors import ConfigError, UserError
from socratic_exp.lifecycle import as_typed, check_resume, record_failure, sigterm_as_interrupt
from socratic_exp.loggers.base import Logger, RunInfo
from socratic_exp.run_folder import MetricsFile, MetricsSink, RunRecord, run_name
from socratic_exp.secrets import protect_command_line, redact, redact_overrides, scrub_training_args

log = logging.getLogger("socratic_exp")


def run_job(cfg: DictConfig) -> float | None:
    # a sweep's job: the launcher prints its start and end, the job's own lines go to its log file
    with quiet_console(HydraConfig.get().mode == RunMode.MULTIRUN), sigterm_as_interrupt():
        return _run_job(cfg)


def _run_job(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    overrides = list(hydra_cfg.overrides.task)
    choices = {group: str(hydra_cfg.runtime.choices.get(group)) for group in GROUPS}
    if "sweep" in hydra_cfg.runtime.choices:
        choices["sweep"] = str(hydra_cfg.runtime.choices["sweep"])
    is_main = distributed.is_main()
    if not is_main:  # the main process speaks for the run; the others only warn
        logging.getLogger("socratic_exp").setLevel(logging.WARNING)
    record: RunRecord | None = None
    config: Any = {}
    filter_dependency_noise()
    protect_command_line(overrides, run_dir if is_main else None)  # the main process scrubs Hydra's dumps
    try:
        config = OmegaConf.to_container(cfg, resolve=True)
        try:
            components = build_components(cfg, choices)
        except ConfigError as err:
            raise as_typed(err, cfg) from None
        check_resume(cfg, run_dir, multirun)
        if cfg.dry_run:
            print(f"config OK: {' '.join(f'{g}={c}' for g, c in choices.items())}")
            return None
        record = RunRecord(run_dir, config, overrides, writes=is_main)
        if record.previous.get("status") == "completed":
            if is_main:
                print(f"{run_dir} already completed; nothing to resume")
            return record.previous.get("objective")
        record.save()
        return Experiment(cfg, components, record, run_dir, overrides, multirun, is_main).run()
    except KeyboardInterrupt as err:
        record_failure(record, run_dir, config, overrides, err, "interrupted")
        sys.exit(130)
    except Exception as err:  # report every failure the same way; bugs keep their traceback in summary.json
        record_failure(record, run_dir, config, overrides, err, "failed")
        if multirun:
            return None
        sys.exit(2 if isinstance(err, UserError) else 1)


class Experiment:
    """The heavy part of a run (imports torch, transformers and TRL)."""

    def __init__(
        self,
        cfg: DictConfig,
        components: Components,
        record: RunRecord,
        run_dir: Path,
        overrides: list[str],
        multirun: bool,
        is_main: bool,
    ):
        self.cfg = cfg
        self.c = components
        self.record = record
        self.run_dir = run_dir
        self.overrides = overrides
        self.multirun = multirun
        self.is_main = is_main
        self.verbose = bool(cfg.get("verbose", False))
        # in a sweep the jobs' progress goes to their log files; the launcher prints a line per job start and end
        configure(console=is_main and not multirun, verbose=self.verbose)
        self.display = ProgressDisplay(str(cfg.objective), console=is_main and not multirun, verbose=self.verbose)

    def run(self) -> float | None:
        from transformers import set_seed
        from transformers.trainer_utils import get_last_checkpoint

        from socratic_exp.assembly import build_trainer, workbench
        from socratic_exp.callbacks import (
            TRAIN_SECONDS,
            CollapseGuard,
            MetricsFileCallback,
            PeriodicEvalCallback,
            SamplerStateCallback,
            TrainClock,
            tracker_position,
        )
        from socratic_exp.evaluation import Evaluator
        from socratic_exp.plots import plot_learning_curves

        c, cfg = self.c, self.cfg
        if not self.verbose:  # datasets' "Map: 100%" and transformers' "Writing model shards" bars
            import datasets
            import transformers

            datasets.disable_progress_bars()
            transformers.utils.logging.disable_progress_bar()
        import_quietly("transformers.integrations.integration_utils")
        set_seed(cfg.seed)
        checkpoint_root = self.run_dir / "checkpoints"
        checkpoint = get_last_checkpoint(str(checkpoint_root)) if checkpoint_root.is_dir() else None
        metrics_file = MetricsFile(self.run_dir / "metrics.jsonl", writes=self.is_main)
        resumed_step = int(Path(checkpoint).name.rsplit("-", 1)[1]) if checkpoint else 0
        if "initial" in self.record.data:  # an earlier attempt got past the first evaluation
            dropped = metrics_file.truncate_after(resumed_step)
            log.info(
                "resuming from %s (dropped %d metric lines after step %d)",
                checkpoint or "the start",
                dropped,
                resumed_step,
            )
        else:
            metrics_file.path.unlink(missing_ok=True)
        name = run_name(c.choices, self.overrides)
        sink = MetricsSink(metrics_file, c.logger if self.is_main else Logger(), self.display.observe)
        if self.is_main:
            info = self._run_info(name, tracker_position(checkpoint))
            run_id = c.logger.start(info)
            sweep = info.config.get("sweep") or {}
            self.record.update(
                wandb_run_id=run_id, run_name=name, run_group=info.group, sweep_launch=sweep.get("launch")
            )
        try:
            c.teacher.preflight()  # a teacher server that does not answer fails the run before anything loads
            bench = workbench(c)
            student = bench.student
            assistant = c.teacher if c.teacher.present else None
            evaluator = Evaluator(c.task, bench.splits["eval"], c.eval, assistant)
            guard = CollapseGuard(
                cfg.objective, c.eval.collapse_margin, c.eval.collapse_patience, lora=c.model.lora.enabled
            )
            distributed.join()
            if "initial" not in self.record.data:
                initial = evaluator.evaluate(student) | {TRAIN_SECONDS: 0.0}
                sink.log_evaluation(initial, 0, c.teacher.samples())
                self.record.update(initial=initial)
                guard.observe(0, initial, student.model)
            metrics_callback = MetricsFileCallback(sink, c.sampler, c.teacher)
            clock = TrainClock()  # training wall time, evaluations and loading excluded (eval/train_seconds)
            callbacks = [
                metrics_callback,
                clock,
                PeriodicEvalCallback(evaluator, student, c.eval.every_steps, sink, c.teacher, guard, clock),
                SamplerStateCallback(c.sampler),
            ]
            trainer = build_trainer(
                bench,
                self.run_dir,
                run_name=name,
                seed=cfg.seed,
                callbacks=callbacks,
                report_to=c.logger.report_to() if self.is_main else [],
                sink=sink,
            )
            self.record.update(launch=distributed.launch_layout(trainer))
            self._console_callbacks(trainer)
            trainer.train(resume_from_checkpoint=checkpoint)
            step = trainer.state.global_step
            student.model = trainer.accelerator.unwrap_model(trainer.model)
            final = None if guard.stopped_at is not None else evaluator.evaluate(student)
            if final is None or guard.observe(step, final, student.model):  # collapse: the best weights are final
                guard.restore(student.model)
                log.warning(
                    "collapse: %s fell more than %s below its best (%.4f at step %s); stopped at step %s with the "
                    "best weights as the final model",
                    cfg.objective,
                    guard.margin,
                    guard.best,
                    guard.best_step,
                    guard.stopped_at,
                )
                final = evaluator.evaluate(student)
            final[TRAIN_SECONDS] = round(clock.seconds, 3)
            sink.log_evaluation(final, step, c.teacher.samples())
            if cfg.save_final_model:
                self._save_final(trainer, student, checkpoint_root / "final")
            objective = final[cfg.objective]
            if self.is_main:
                self.record.complete(
                    objective,
                    final=final,
                    steps=step,
                    train=metrics_callback.last_logs,
                    choices=c.choices,
                    student=student.info,
                    collapse=guard.summary(),
                )
                plot_learning_curves(metrics_file.read(), self.run_dir / "learning_curves.png")
                c.logger.finish(0, summary={"objective": objective, **final})
            if self.is_main:
                self._print_result(self.record.data.get("initial", {}), final)
            return objective
        except BaseException:
            self.display.close()
            if self.is_main:
                c.logger.finish(exit_code=1)
            raise
        finally:
            c.teacher.close()

    def _save_final(self, trainer: Any, student: Any, folder: Path) -> None:
        """The final model: with LoRA and ``model.lora.merge_on_save`` the adapters merged into the weights (a plain
        transformers model), else what the trainer saves (the weights, or the adapters alone)."""
        if self.c.model.lora.enabled and self.c.model.lora.merge_on_save:
            from socratic_exp.models.adapters import save_merged

            if self.is_main:
                save_merged(student.model, student.tokenizer, folder)
        else:
            trainer.save_model(str(folder))
        scrub_training_args(trainer.args, folder)

    def _console_callbacks(self, trainer: Any) -> None:
        """Our progress line instead of transformers' bar and TRL's per-step dictionaries (``verbose=true`` keeps
        theirs); each checkpoint's pickled arguments without secrets."""
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        from socratic_exp.callbacks import (
            ProgressDisplayCallback,
            SecretFreeArgumentsCallback,
            TrackerPositionCallback,
        )

        if not self.verbose:
            trainer.remove_callback(ProgressCallback)
            trainer.remove_callback(PrinterCallback)
        trainer.add_callback(ProgressDisplayCallback(self.display))
        trainer.add_callback(SecretFreeArgumentsCallback())
        if self.is_main:
            trainer.add_callback(TrackerPositionCallback(self.c.logger))

    def _run_info(self, name: str, resume_position: int | None = None) -> RunInfo:
        """In a sweep, the W&B group is the sweep's name (``+sweep=<name>``, else its folder's date/time) and the
        config's ``sweep`` block names the launch and the job's overrides, for reports to filter and group by."""
        group = None
        config = redact(OmegaConf.to_container(self.cfg, resolve=True))
        if self.multirun:
            hydra_cfg = HydraConfig.get()
            sweep_dir = Path(hydra_cfg.sweep.dir)
            launch = f"{sweep_dir.parent.name}/{sweep_dir.name}"
            group = self.c.choices.get("sweep") or launch
            overrides = dict(o.split("=", 1) for o in redact_overrides(self.overrides) if "=" in o)
            config["sweep"] = {
                "name": group,
                "launch": launch,
                "job": hydra_cfg.job.num,
                "overrides": {key.lstrip("+~"): value for key, value in overrides.items()},
            }
        return RunInfo(
            run_dir=self.run_dir,
            name=name,
            group=group,
            job_type=self.c.choices["algorithm"],
            tags=[f"{g}={v}" for g, v in self.c.choices.items() if g in GROUPS],
            config=config,
            resume_id=self.record.data.get("wandb_run_id"),
            resume_position=resume_position,
        )

    def _print_result(self, initial: dict[str, float], final: dict[str, float]) -> None:
        meanings = {
            "eval/greedy_acc": "unassisted, greedy",
            "eval/sampled_acc": "unassisted, sampled",
            "eval/assisted_acc": f"with the teacher's guidance, up to {self.c.eval.assisted_attempts} attempts",
            "eval/no_answer": "share without a readable answer",
            "eval/train_seconds": "training wall time (s), evaluations excluded",
        }
        lines = [f"  {'':<24} {'before':>6}    {'after':>6}"]
        for key in (k for k in final if k.count("/") == 1):
            pass_k = key.removeprefix("eval/pass@") if key.startswith("eval/pass@") else None
            meaning = meanings.get(key, f"solved by any of {pass_k} samples" if pass_k else "")
            lines.append(f"  {key:<24} {initial.get(key, float('nan')):>6.3f} -> {final[key]:>6.3f}   {meaning}")
        log.info("held-out results in %s\n%s", self.run_dir, "\n".join(lines))
