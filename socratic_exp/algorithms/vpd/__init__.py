"""``algorithm=vpd``: Variational Policy Distillation (VPD, arXiv 2605.15113), variational EM on ``algorithm=sdpo``.

M-step: SDPO's distillation of the feedback-conditioned teacher into the student. E-step (once every
``e_step_every`` M-steps, Section 3.2): the teacher is refined by unpaired preference optimisation (BCO) of its
implicit reward beta * log(q_phi / pi_ref) on successful and failed trajectories, pi_ref the current student (the
dynamic reference prior, Eq. 7). Which file holds what:

- ``config.py``: the settings (``VPD``, extending SDPO's; torch-free).
- ``estep.py``: the E-step's maths (pure): implicit rewards, the reward shift and its running mean, BCO's loss.
- ``trainer.py``: ``VPDTrainer``, ``SDPOTrainer`` with the E-step before every ``e_step_every``-th M-step;
  ``build.py``: that trainer made from the settings.
"""
