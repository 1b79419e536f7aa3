"""High-entropy token masking ("Beyond the 80/20 Rule", arXiv 2506.01939) as a piece any GRPO-based algorithm uses.

``config.py``: the settings (``EntropyMask``) and ``algorithm=entropy_masked``; ``mask.py``: the maths (pure: kept
count, selection, token weights per normalisation and loss type); ``trainer.py``: the TRL mixin
(``EntropyMaskMixin``) and ``EntropyMaskedTrainer``; ``build.py``: that trainer made from the settings.

The policy-gradient term of the loss keeps a share ``rho`` of the completion tokens, ranked by their entropy over the
whole batch (Section 5, Eq. 5), gathered across processes: ``mode=top`` keeps the highest-entropy ("forking") tokens,
as in the paper; ``bottom`` the lowest (the paper's ablation: ``mode=bottom rho=0.8``); ``random`` a uniformly random
share of the same size (the control the paper lacks). The kept count is ``round(rho x tokens)`` (at least one) and
ties go to the earlier token, so the kept share is rho within one token even when entropies tie (bf16 entropies often
do).

**The batch ranked** is Eq. 5's batch B, the prompts drawn together whose rollouts the updates use: TRL's
generation batch (``batch_size x steps_per_generation`` completions per process, all processes). With
``steps_per_generation=1`` it is one loss call, ranked inside TRL's loss by the entropies of the policy being trained
(the default; also every ``num_iterations`` pass). When TRL splits it into several loss calls (gradient accumulation,
several optimizer steps per rollout, as the paper's 16 updates per rollout of 512 prompts), the mixin ranks all its
tokens at once, right after generation, from one extra no-grad forward pass of the rollout policy, and each loss call
applies its share of that ranking (``EntropyMaskMixin._weigh_generation_batch``). An optimizer step must lie inside
one generation batch (``steps_per_generation`` a multiple of ``gradient_accumulation_steps``): other settings are
refused when the config is built and again when the trainer is.

**Normalisation** (``mask.token_weights``). ``normalize=all_tokens`` (Eq. 5: ``1 / sum_i |o^i|`` over all tokens,
DAPO's) divides the masked loss by all completion tokens, so the gradient is about rho times smaller than full
GRPO's; ``kept_tokens`` (the official verl fork's token mean over the kept tokens) divides by the kept tokens instead.
It is applied as a weight (tokens / kept tokens) on the kept tokens, counted per sequence for TRL's per-sequence
losses (``loss_type=grpo|sapo``) and over the ranked batch otherwise. The weight reaches the policy term only (and
TRL's entropy bonus, a mean over the kept tokens); TRL's KL term (``beta``) always covers every token.

**Why a TRL subclass.** TRL's ``top_entropy_quantile`` already routes the loss through ``get_high_entropy_mask``
and applies its result where it belongs (the policy term and TRL's entropy bonus, not the KL). The mixin overrides
that hook only, because TRL's own selection (a ``torch.quantile`` threshold kept with ``>=``) keeps every tie at
the threshold, has no bottom or random mode and no kept-token normalisation, and logs nothing about the mask.

**Logged** once per ranked batch (so with ``steps_per_generation > 1`` at the first optimizer step of each
generation batch), averaged per logging step like TRL's metrics, reaching ``metrics.jsonl`` and W&B:
``entropy_mask/kept_fraction`` (reads rho: a mask that silently keeps everything was a real bug of the official
code), ``entropy_mask/entropy_p50|p80|p90|p99`` over all completion tokens, and the mean entropy of the kept and
dropped tokens. At each log, the ``forking_tokens`` highest-entropy tokens of the latest batch go, in context, to
the ``forking_tokens`` table (``<run folder>/forking_tokens.jsonl`` and W&B), through the run's metrics sink.
Deviations from the paper and the official code: docs/entropy-masking.md.

**Composing it with another algorithm** (e.g. ``algorithm=socraticpo``):

1. Settings: give the option a field ``entropy_mask: EntropyMask | None = None`` (YAML ``entropy_mask: null``).
   Components build a nested block from its dict and check it: ``algorithm.entropy_mask={rho:0.2,mode:top}`` on
   the command line; errors read ``algorithm.entropy_mask.rho=...``.
2. Trainer: put the mixin (``trainer.py``) before TRL's trainer, ``class MyTrainer(EntropyMaskMixin, GRPOTrainer)``,
   and construct it with ``entropy_mask=<settings or None>`` and ``metrics_sink=ctx.sink`` (the build's
   ``trainer_extras``). With ``None`` it changes
   nothing.
3. The mask acts on TRL's token mask (``completion_mask`` times ``tool_mask``): tokens outside it, such as teacher
   turns, are neither counted nor kept, so only the student's tokens compete for the rho share. Overriding the
   rollout or the advantages is fine (the mixin ranks what ``_prepare_inputs`` returns, after every override of
   ``_generate_and_score_completions``); overrides of ``_compute_loss`` and ``_prepare_inputs`` must call super().
4. Leave ``trl_args.top_entropy_quantile`` unset: the mixin drives that switch itself.

The random mode's stream is not checkpointed: a resumed run draws other random masks than an uninterrupted one.
"""
