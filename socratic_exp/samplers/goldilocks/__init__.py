"""``sampler=goldilocks``: Goldilocks difficulty sampling (Goldilocks RL, arXiv 2602.14868), for every algorithm.

A teacher-side utility predictor f_phi(q) estimates, for the current student, y_q = sqrt(p_q (1 - p_q)), p_q the
student's success rate on question q: the reward's standard deviation, to which a GRPO group's gradient is
proportional (zero for questions always or never solved). Each prompt of the next generation batch is the best, by
predicted utility, of its own ``candidates`` (the paper's K) questions drawn at random (Fig. 1). After each batch
of rollouts the sampler receives every question's rewards (``PromptSampler.observe``), stores (q, y_q) in a replay
buffer and, every ``update_every`` (N) new questions, refits f_phi with an MAE loss in a background thread.
Nothing else changes: the algorithm, batch and steps are those of ``sampler=uniform``, so a comparison spends the
same rollouts; only which questions they are spent on differs.

Which file holds what:
- ``config.py``: the settings (``GoldilocksSampler``, named by ``conf/sampler/goldilocks.yaml``) and the
  ``PromptSampler`` hooks; torch-free.
- ``selector.py``: the selection rules, pure (best of each prompt's K candidates; the batch-pool variant).
- ``predictor.py``: the utility predictor f_phi, its loss, replay buffer and refit schedule.
- ``features.py``: the frozen question features the predictor reads.
- ``sampler.py``: the runtime, the torch ``Sampler`` the trainer iterates (lazy batch choice, feedback, background
  refits, metrics, resume state).

Every difference from the paper is in the "Deviations from the paper" table of docs/goldilocks.md.
"""
