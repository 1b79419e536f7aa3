"""A worker for ``torchrun --nproc_per_node 2``: Socratic-RL trains 2 steps on the quick student, with a probe at
every step and a distillation (the kl distiller) at step 2, and each process writes the knowledge base it holds and
the viewpoints it put in front of its prompts to ``<out>/rank<i>.json``: one knowledge base for all processes.

    torchrun --nproc_per_node 2 tests/distributed/socratic_rl_one_knowledge_base.py <out folder>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from socratic_exp.runtime.assembly import trainer_from


def main(out: Path) -> None:
    trainer = trainer_from("algorithm=socratic_rl", "distiller=kl", "debug=fast", "logger=none",
                           "algorithm.max_steps=2", "algorithm.probe_every=1", "algorithm.distill_every=2",
                           "algorithm.save_steps=100", run_dir=out / "run")  # fmt: skip
    loop = trainer.viewpoint_loop
    shown: list[list[str]] = []
    active_texts = loop.active_texts

    def recorded() -> list[str]:
        shown.append(active_texts())
        return shown[-1]

    loop.active_texts = recorded
    trainer.train()
    result = {"kb": loop.kb.state_dict(), "shown": shown, "distillations": loop.distillations}
    (out / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
