"""``algorithm=sdpo``: Self-Distillation Policy Optimization (SDPO, arXiv 2601.20802), the baseline of VPD.

The student distils, on its own rollouts, the token distribution of the model conditioned on feedback (a successful
sibling rollout, the verifier's reason, a teacher's critique). Which file holds what:

- ``config.py``: the settings (``SDPO``, the dataclass ``conf/algorithm/sdpo.yaml`` names; torch-free).
- ``contexts.py``: the feedback sources and the teacher's prompt (pure, shared with ``algorithm=vpd``).
- ``losses.py``: the per-token divergence (TRL's loss functions), the teacher's scoring forward and the advantages of
  the VPD paper's hybrids (Appendix B).
- ``trainer.py``: ``SDPOTrainer``, TRL's ``GRPOTrainer`` with SDPO's loss, and the EMA teacher callback;
  ``build.py``: that trainer made from the settings.
"""
