"""Socratic-RL's meta-learning of a teacher whose own weights write its viewpoints (``TrainableReflective``:
``teacher=llm``): one DPO phase (TRL's DPOTrainer, ``phases.dpo_phase``) per probe, on pairs of the teacher's own
viewpoints ranked by measured utility U(v). For the trace behind the better viewpoint the better one is preferred over
the worse (both are general principles, so either could have been written there). Pairs are formed across probes,
between the viewpoints just measured and every viewpoint measured before, of the same error class
(``meta_learning.cross_probe_pairs``), and need a utility gap of at least ``algorithm.meta_margin``.

The teacher offers what this needs: weights of its own apart from the student's (``separate_model``, after
``decouple_from_student``) and each reflection as a training example (``reflection_example``). What the meta-learning
has seen, and the weights it trained, go into every checkpoint and come back on resume.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socratic_exp.algorithms.socratic_rl.meta_learning import cross_probe_pairs
from socratic_exp.teachers.base import Attempt
from socratic_exp.teachers.reflection import ScoredViewpoint

if TYPE_CHECKING:
    from socratic_exp.algorithms.socratic_rl.config import SocraticRL
    from socratic_exp.teachers.reflection import TrainableReflective

# the names checkpoints have always had, so that a run resumes from a checkpoint written before the meta-learning
# became the algorithm's
WEIGHTS_FILE = "teacher_model.pt"
STATE_FILE = "llm_teacher_meta.json"


class TeacherDPO:
    """The teacher's DPO meta-updates: ``update`` after each probe, ``save`` / ``load`` with each checkpoint."""

    def __init__(self, teacher: TrainableReflective, settings: SocraticRL, seed: int):
        self.teacher = teacher
        self.settings = settings
        self.seed = seed
        self.measured: list[ScoredViewpoint] = []  # every measurement seen so far (earlier probes)
        self.updates = 0  # DPO phases run

    def update(self, scored: Sequence[ScoredViewpoint], asked: str | None = None) -> dict[str, float]:
        """One DPO phase on the teacher's weights from utility-ranked pairs of its viewpoints: this probe's
        (``scored``) against each other and against every viewpoint measured at earlier probes (Algorithm 1, line 17:
        "the utility of past viewpoints from V_KB"; with ``viewpoint_budget=1`` a probe holds one viewpoint, so pairs
        within one probe never form). ``asked``: the reflection prompt the viewpoints were asked with."""
        from socratic_exp.models.phases import dpo_phase

        model, tokenizer = self.weights()
        rows = self.preference_pairs(scored, self.measured, asked)
        self.measured += list(scored)
        found = {"teacher_meta/pairs": float(len(rows)), "teacher_meta/measured": float(len(self.measured))}
        if not rows:
            return found
        self.updates += 1
        settings = self.settings
        model.requires_grad_(True)
        try:
            return found | dpo_phase(
                model,
                tokenizer,
                rows,
                Path(tempfile.gettempdir()) / "socratic_exp_teacher_dpo",
                prefix="teacher_meta",
                steps=settings.meta_steps,
                batch_size=settings.meta_batch_size,
                learning_rate=settings.meta_learning_rate,
                beta=settings.meta_beta,
                seed=self.seed * 1_000_003 + self.updates,
            )
        finally:
            model.requires_grad_(False)
            model.eval()

    def weights(self) -> tuple[Any, Any]:
        """The teacher's own (model, tokenizer), which the meta-updates train."""
        weights = self.teacher.separate_model()
        if weights is None:
            raise RuntimeError(
                "the teacher's meta-update needs a teacher with weights of its own (decouple_from_student)"
            )
        return weights

    def preference_pairs(
        self, new: Sequence[ScoredViewpoint], past: Sequence[ScoredViewpoint] = (), asked: str | None = None
    ) -> list[dict[str, Any]]:
        """(prompt, chosen, rejected) rows, at most ``meta_max_pairs``, most separated first: the pairs of
        ``cross_probe_pairs`` (``new`` with each other and with ``past``, same error class, mean utilities at least
        ``meta_margin`` apart), each as the teacher's training example for the better viewpoint's trace."""
        rows = []
        for better, worse, _ in cross_probe_pairs(new, past, self.settings.meta_margin, self.settings.meta_max_pairs):
            prompt, chosen = self.teacher.reflection_example(better.question, better.trace, better.text, asked)
            _, rejected = self.teacher.reflection_example(better.question, better.trace, worse.text, asked)
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
        return rows

    # --- checkpoints ----------------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        weights = self.teacher.separate_model()
        if weights is not None:
            import torch

            torch.save(weights[0].state_dict(), folder / WEIGHTS_FILE)
        state = {"measured": [dataclasses.asdict(m) for m in self.measured], "meta_updates": self.updates}
        (folder / STATE_FILE).write_text(json.dumps(state))

    def load(self, folder: Path) -> None:
        path = folder / WEIGHTS_FILE
        weights = self.teacher.separate_model()
        if path.is_file() and weights is not None:
            import torch

            model = weights[0]
            model.load_state_dict(torch.load(path, map_location=model.device, weights_only=True))
        meta = folder / STATE_FILE
        if meta.is_file():
            state = json.loads(meta.read_text())
            self.measured = [
                ScoredViewpoint(m["question"], Attempt(**m["trace"]), m["text"], m["utility"])
                for m in state["measured"]
            ]
            self.updates = state["meta_updates"]
