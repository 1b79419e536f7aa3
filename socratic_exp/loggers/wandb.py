"""``logger=wandb``: Weights & Biases, offline by default.

The run is opened before training so that the transformers ``WandbCallback`` (TRL's metrics, completions tables)
logs into it rather than opening its own. Offline runs live in ``<run folder>/wandb/`` and upload later with
``wandb sync <run folder>/wandb/offline-run-*``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.loggers.base import Logger, RunInfo

log = logging.getLogger("socratic_exp")


@dataclasses.dataclass(kw_only=True)
class WandbLogger(Logger):
    project: str = setting("socratic_exp", "the W&B project")
    entity: str | None = setting(None, "the W&B team or user (null: your default entity)")
    mode: Literal["offline", "online", "disabled"] = setting(
        "offline", "offline: files to `wandb sync` later | online: needs a login | disabled"
    )
    group: str | None = setting(None, "the W&B run group (null: the sweep's name in -m runs)")
    notes: str | None = setting(None, "free-text notes stored with the W&B run")

    def __post_init__(self) -> None:
        self._run: Any = None
        super().__post_init__()

    def report_to(self) -> list[str]:
        return ["wandb"]

    def start(self, info: RunInfo) -> str | None:
        # W&B's terminal messages (its banner, the end-of-run table of every metric, "URL not available in offline
        # run" at each checkpoint) go to its debug log instead; WANDB_SILENT=false brings them back
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        try:
            self._run = wandb.init(
                project=self.project,
                entity=self.entity,
                mode=self.mode,
                group=self.group or info.group,
                job_type=info.job_type,
                name=info.name,
                tags=[*info.tags, *self.tags],
                notes=self.notes,
                config=info.config,
                dir=str(info.run_dir),
                id=info.resume_id,
                **self._resume(info),
                settings=wandb.Settings(silent=os.environ["WANDB_SILENT"].lower() in ("1", "true")),
            )
        except Exception as err:  # wandb raises many types (auth, network, usage)
            raise UserError(
                f"W&B could not start in {self.mode} mode: {err}".splitlines()[0],
                "run `wandb login` or set WANDB_API_KEY for online mode, or use logger.mode=offline / logger=none",
            ) from None
        if self.mode == "offline":
            folder = Path(self._run.dir).parent
            log.info("W&B offline run %s (upload: wandb sync %s)", self._run.id, folder)
        elif self.mode == "online":
            log.info("W&B run %s", self._run.url)
        return self._run.id

    def _resume(self, info: RunInfo) -> dict[str, Any]:
        """How a resumed run continues its W&B run. Offline, W&B 0.31 ignores ``resume`` (the new offline folder
        would restart at step 0 and overwrite the first one when synced), so the run is rewound to the W&B step of
        its checkpoint (``resume_from``): the second offline folder carries the same run id and continues the
        history after that step, as ``metrics.jsonl`` does (the rows logged after the checkpoint are replaced, not
        duplicated). Online, W&B's own resume continues the run."""
        if not info.resume_id:
            return {}
        if self.mode == "offline" and info.resume_position is not None:
            return {"resume_from": f"{info.resume_id}?_step={info.resume_position}"}
        return {"resume": "allow"}

    def position(self) -> int | None:
        return None if self._run is None or self._run.step == 0 else self._run.step - 1

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._run is not None:
            self._run.log({**metrics, "train/global_step": step})

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        import wandb

        if self._run is not None and rows:
            columns = list(rows[0])
            table = wandb.Table(columns=columns, data=[[row.get(c) for c in columns] for row in rows])
            self._run.log({name: table, "train/global_step": step})

    def finish(self, exit_code: int = 0, summary: dict[str, Any] | None = None) -> None:
        if self._run is None:
            return
        if summary:
            self._run.summary.update(summary)
        self._run.finish(exit_code=exit_code)
        self._run = None
