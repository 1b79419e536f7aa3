"""SocraticPO (Socratic Policy Optimization, arXiv 2606.09887): interactive rollouts in which a teacher's guidance
follows each wrong student attempt, step-wise rewards with reward decay, and the Reinforce++ backend.

``config.py``: the settings (``SocraticPO``, the dataclass ``algorithm=socraticpo`` builds) and their checks;
``rewards.py``: the maths, pure (decayed rewards Eq. 17-19, the KL folded into the returns as REINFORCE++ does, the
batch normalisation Eq. 20, the attempt metrics); ``trainer.py``: ``SocraticPOTrainer``, TRL's GRPOTrainer with
the interactive rollout and per-attempt advantages; ``build.py``: that trainer made from the settings.
docs/socraticpo.md lists where this differs from the paper.
"""
