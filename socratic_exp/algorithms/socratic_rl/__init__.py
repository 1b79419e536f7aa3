"""Socratic-RL (Wu, 2025, arXiv 2506.13358): a teacher reflects on the student's traces and writes viewpoints; the
active ones (V) stand in front of the student's prompts while GRPO trains it; every viewpoint is kept in a knowledge
base (V_KB) with its measured utility U(v); the teacher learns from those utilities; V_KB is distilled into the
student's weights every so often (Algorithm 1).

- ``config.py``: ``SocraticRL``, the settings (``algorithm=socratic_rl``) and their checks (torch-free).
- ``build.py``: how the run is put together around the trainer (the loop, its callback, the reward hook).
- ``trainer.py``: ``SocraticRLTrainer`` (TRL's GRPOTrainer with V in the prompts) and the loop's callback.
- ``loop.py``: ``ViewpointLoop``, the phases around the RL steps: reflection, probes, meta-learning, distillation.
- ``knowledge_base.py``: V and V_KB (budget, merging, queue, retirement) and their record, ``viewpoints.jsonl``.
- ``utility.py``: the pure rule of U(v) (Section 3.3); ``meta_learning.py``: the pure rule of the teacher's preference
  pairs across probes; ``teacher_dpo.py``: the DPO meta-updates of a teacher whose own weights write its viewpoints. The
  distillations and those meta-updates run as short TRL phases (``socratic_exp.models.phases``).
- ``__main__.py``: ``python -m socratic_exp.algorithms.socratic_rl <run folder>`` prints the knowledge base's timeline.
"""
