"""REINFORCE++ (Hu et al. 2025; OpenRLHF's ``reinforce`` and ``reinforce_baseline`` estimators) as an algorithm of
its own, and the backend SocraticPO builds on.

``config.py``: ``algorithm=reinforce_pp``; ``returns.py``: the maths (KL-folded returns, group baseline, batch
normalisation); ``trainer.py``: ``ReinforcePPMixin`` (the shared implementation) and ``ReinforcePPTrainer``;
``build.py``: that trainer made from the settings.
"""
