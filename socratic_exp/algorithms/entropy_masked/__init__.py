"""High-entropy token masking ("Beyond the 80/20 Rule", arXiv 2506.01939) as a piece any GRPO-based algorithm uses.

``config.py``: the settings (``EntropyMask``) and ``algorithm=entropy_masked``; ``mask.py``: the selection and
normalisation maths (pure); ``trainer.py``: the TRL mixin and ``EntropyMaskedTrainer``.

The policy-gradient term of the loss keeps a share ``rho`` of the completion tokens, chosen by their entropy over
the whole batch, gathered across processes: ``mode=top`` keeps the highest-entropy ("forking") tokens, as in the
paper; ``bottom`` the lowest (the paper's ablation: ``mode=bottom rho=0.8``); ``random`` a uniformly random share
of the same size (the control the paper lacks). The kept count is ``round(rho x tokens)`` (at least one) and ties
go to the earlier token, so the kept share is rho within one token even when entropies tie (bf16 entropies often
do). "The batch" is what one loss call sees on all processes together: with ``gradient_accumulation_steps=1``
(the default) that is the whole optimizer step, as in the official code and TRL.

**Normalisation.** ``normalize=all_tokens`` (TRL's behaviour) divides the masked loss by all completion tokens,
so the gradient is about rho times smaller than full GRPO's; ``kept_tokens`` (the official verl fork's) divides by
the kept tokens instead. It is applied as a weight (completion tokens / kept tokens) on the kept tokens, counted
per sequence for TRL's per-sequence losses (``loss_type=grpo|sapo``) and over the gathered batch otherwise. The
weight reaches the policy term only (and TRL's entropy bonus, a mean over the kept tokens); TRL's KL term
(``beta``) always covers every token.

**Why a TRL subclass.** TRL's ``top_entropy_quantile`` already routes the loss through ``get_high_entropy_mask``
and applies its result where it belongs (the policy term and TRL's entropy bonus, not the KL). The mixin overrides
that hook only, because TRL's own selection (a ``torch.quantile`` threshold kept with ``>=``) keeps every tie at
the threshold, has no bottom or random mode and no kept-token normalisation, and logs nothing about the mask.

**Logged** (averaged per logging step like TRL's metrics, so they reach ``metrics.jsonl`` and W&B):
``entropy_mask/kept_fraction`` (reads rho: a mask that silently keeps everything was a real bug of the official
code), ``entropy_mask/entropy_p50|p80|p90|p99`` over all completion tokens, and the mean entropy of the kept and
dropped tokens. At each log, the ``forking_tokens`` highest-entropy tokens of the latest batch go, in context, to
the ``forking_tokens`` table (``<run folder>/forking_tokens.jsonl`` and W&B), through the run's metrics sink.

**Composing it with another algorithm** (e.g. ``algorithm=socraticpo``):

1. Settings: give the option a field ``entropy_mask: EntropyMask | None = None`` (YAML ``entropy_mask: null``).
   Components build a nested block from its dict and check it: ``algorithm.entropy_mask={rho:0.2,mode:top}`` on
   the command line; errors read ``algorithm.entropy_mask.rho=...``.
2. Trainer: put the mixin before TRL's trainer, ``class MyTrainer(EntropyMaskMixin, GRPOTrainer)`` (or
   ``with_entropy_mask(GRPOTrainer)``, both in ``trainer.py``), and construct it with
   ``entropy_mask=<settings or None>`` and
   ``metrics_sink=ctx.sink``. With ``None`` it changes nothing.
3. The mask acts on TRL's token mask (``completion_mask`` times ``tool_mask``): tokens outside it, such as teacher
   turns, are neither counted nor kept, so only the student's tokens compete for the rho share. Overriding the
   rollout or the advantages is fine; an override of ``_compute_loss`` must call ``super()._compute_loss``.
4. Leave ``trl_args.top_entropy_quantile`` unset: the mixin drives that switch itself.

The random mode's stream is not checkpointed: a resumed run draws other random masks than an uninterrupted one.
"""
