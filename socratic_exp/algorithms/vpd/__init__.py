"""``algorithm=vpd``: Variational Policy Distillation (VPD, arXiv 2605.15113), variational EM on ``algorithm=sdpo``.

M-step: SDPO's distillation of the feedback-conditioned teacher into the student. E-step (every ``e_step_every``
steps): the teacher is refined toward a reward-tilted target within a trust region around the reference prior (our
reading of the paper's E-step until issue 17; the README's deviations table says what differs). Which file holds what:

- ``config.py``: the settings (``VPD``, extending SDPO's; torch-free).
- ``estep.py``: the E-step's maths (pure): the tilted target, its KL to the prior, the beta solve, the E-step loss and
  the trust-region acceptance rule of a teacher step.
- ``trainer.py``: ``VPDTrainer``, ``SDPOTrainer`` with the E-step before the M-step.
"""
