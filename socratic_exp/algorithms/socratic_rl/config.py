"""``algorithm=socratic_rl``: the settings of Socratic-RL (Wu, 2025; Algorithm 1, Sections 3.2-3.5) and their checks;
torch-free. ``build.py`` puts the run together around TRL's GRPOTrainer (the loop, its callback, the reward hook).

No public code exists for this paper; the choices are ours and are listed in docs/socratic-rl.md's "Deviations from the
paper" table. The phases of Algorithm 1 and where they live:

1. **Student interaction** (``trainer.SocraticRLTrainer``): the active viewpoints V are put in front of every
   training prompt (``with_context``: before the question, where the warm-started student has seen principles),
   and GRPO trains the student on those rollouts: pi_S(a | s, V).
2. **Teacher reflection** (``loop.ViewpointLoop.reflect``): traces selected by ``reflect_on`` (``loop.select_traces``),
   at most ``reflections_per_step`` per batch, go to ``teacher.reflect``; its viewpoints join V and V_KB,
   near-duplicates merged, V capped at ``viewpoint_budget`` (``knowledge_base.py``).
3. **Utility and teacher meta-learning** (``loop.ViewpointLoop.probe``): every ``probe_every`` steps U(v) of each
   viewpoint in V on ``probe_items`` probe questions (``utility.py``); viewpoints at or below ``retire_threshold``
   for ``retire_patience`` probes retire. With ``meta_learning`` the measurements go to the teacher's meta-learning:
   what a reflective teacher learns by itself (``teacher.meta_update``; rule: phrasings reweighted; blackbox:
   exemplars in its prompt), or, for a teacher whose own weights write its viewpoints (llm), DPO on utility-ranked
   pairs formed across probes (``teacher_dpo.TeacherDPO``, ``meta_learning.cross_probe_pairs``; the ``meta_*``
   settings).
4. **Distillation** (``loop.ViewpointLoop.distill``) every ``distill_every`` steps through the ``distiller`` group;
   then V is reset.

Everything is recorded in ``viewpoints.jsonl``; ``python -m socratic_exp.algorithms.socratic_rl <run>`` prints it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Literal

from socratic_exp.algorithms.entropy_masked.config import EntropyMask
from socratic_exp.algorithms.grpo.config import GRPO
from socratic_exp.core.component import setting
from socratic_exp.core.errors import ConfigError
from socratic_exp.teachers.reflection import Reflective

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options

# The settings of the DPO meta-learning of a teacher whose own weights write its viewpoints (teacher=llm), which were
# that teacher's before the meta-learning became the algorithm's: a user who types the old key is told where it lives
# (the declaration's ``moved_keys``).
META_SETTINGS = ("meta_steps", "meta_learning_rate", "meta_beta", "meta_margin", "meta_max_pairs", "meta_batch_size")


@dataclasses.dataclass(kw_only=True)
class SocraticRL(GRPO):
    requires_teacher = True
    uses_distiller = True
    # build_loop gives a self-guiding teacher weights of its own (what a teacher then holds: its model_copies)
    decouples_teacher: ClassVar[bool] = True

    max_steps: int = setting(150, "optimizer steps of the run", ge=1)
    reflect_on: Literal["wrong", "below_group_mean", "all"] = setting(
        "wrong", "which traces the teacher reflects on: wrong | below_group_mean | all (Algorithm 1, line 10)"
    )
    reflections_per_step: int = setting(8, "at most this many traces per batch go to the teacher", ge=1)
    viewpoint_budget: int = setting(1, "|V| at most; later viewpoints queue until a place frees", ge=1)
    merge_similarity: float = setting(
        0.8, "a viewpoint this similar to a known one (difflib ratio) is merged into it", gt=0.0, le=1.0
    )
    probe_every: int = setting(10, "steps between utility probes (0: none)", ge=0)
    probe_items: int = setting(100, "probe questions per measurement of U(v) (Section 3.3)", ge=1)
    retire_threshold: float = setting(
        0.0, "U(v) at or below this for retire_patience probes retires v", ge=-1.0, le=1.0
    )
    retire_patience: int = setting(2, "probes in a row at or below retire_threshold that retire a viewpoint", ge=1)
    meta_learning: bool = setting(True, "teacher meta-learning from the measured utilities (false: the ablation)")
    # the DPO meta-learning of a teacher whose own weights write its viewpoints (teacher=llm; teacher_dpo.py)
    meta_steps: int = setting(8, "teacher=llm meta-learning: DPO steps per meta-update of the teacher", ge=1)
    meta_learning_rate: float = setting(1e-5, "teacher=llm meta-learning: the teacher's DPO learning rate", gt=0.0)
    meta_beta: float = setting(0.1, "teacher=llm meta-learning: DPO's beta", gt=0.0)
    meta_margin: float = setting(
        0.02, "teacher=llm meta-learning: least utility gap between a pair's two viewpoints", ge=0.0
    )
    meta_max_pairs: int = setting(64, "teacher=llm meta-learning: preference pairs per meta-update at most", ge=1)
    meta_batch_size: int = setting(8, "teacher=llm meta-learning: pairs per DPO step", ge=1)
    distill_every: int = setting(50, "steps between distillations through the distiller group (0: never)", ge=0)
    entropy_mask: EntropyMask | None = setting(
        None, "e.g. {rho: 0.2, mode: top}: the policy loss on the high-entropy tokens only (as entropy_masked)"
    )

    @property
    def trains_teacher(self) -> bool:
        """Whether the teacher's weights are trained (its meta-updates), which a teacher's memory plan reads."""
        return self.meta_learning

    def check_compatible(self, components: Options) -> None:
        super().check_compatible(components)
        teacher, name = components.teacher, components.choices["teacher"]
        if not isinstance(teacher, Reflective):
            raise ConfigError(
                "teacher",
                name,
                "does not reflect on traces, which algorithm=socratic_rl asks its teacher to do",
                "use teacher=rule (task=arithmetic), teacher=llm or teacher=blackbox",
            )
        if (problem := teacher.cannot_reflect_on(components.task)) is not None:
            raise ConfigError(
                "teacher",
                name,
                f"{problem} (task={components.choices['task']})",
                "use teacher=llm or teacher=blackbox for algorithm=socratic_rl on this task",
            )
        if self.meta_learning and (obstacle := teacher.cannot_meta_learn()) is not None:
            problem, fix = obstacle
            raise ConfigError("algorithm.meta_learning", True, problem, f"{fix}, or algorithm.meta_learning=false")
