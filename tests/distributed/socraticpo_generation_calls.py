"""A worker for ``torchrun --nproc_per_node 2``: SocraticPO trains 2 steps on the quick student and each process
writes the rows of every generation call it made (``<out>/rank<i>.json``). Under vLLM's server mode, ZeRO-3 and
FSDP a generation call is collective, so the processes must make the same calls with as many rows. The rollout
generates through TRL there (``algorithm.reuse_cache=false`` here: the KV-cache continuation is for a whole model on
each process, whose generate calls are its own).

    torchrun --nproc_per_node 2 tests/distributed/socraticpo_generation_calls.py <out folder> <warm-start cache>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from socratic_exp.runtime.assembly import trainer_from


def main(out: Path, cache: str) -> None:
    trainer = trainer_from("algorithm=socraticpo", "debug=quick_warmstart", "logger=none", f"model.cache_dir={cache}",
                           "algorithm.max_steps=2", "algorithm.save_steps=100",
                           "algorithm.reuse_cache=false")  # fmt: skip
    calls: list[int] = []
    generate = trainer._generate_single_turn

    def recorded(prompt_ids, *args, **kwargs):
        calls.append(len(prompt_ids))
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = recorded
    trainer.train()
    (out / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(calls))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
