"""SocraticPO's trainer: TRL's GRPOTrainer with the interactive rollout and per-attempt advantages.

**Interactive rollout (Section 4.1, Algorithm 1).** Each rollout makes up to ``max_attempts`` (K) student attempts.
After a wrong attempt k < K the teacher's guidance f(k) is appended and the student tries again from
c(k+1) = c(k) || y(k) || f(k) (Eq. 10); solved rollouts leave the active set, and the loop ends when it is empty.
Only the active rollouts are generated again. A rollout is trained as one sequence, prompt x then
y(1) f(1) y(2) ... y(L) (Eq. 11): the student's tokens of attempt k are conditioned on exactly c(k), as generated,
and the teacher's tokens are context only (TRL's ``env_mask``: zero loss weight, Eq. 15). Each attempt keeps its
own reward and advantage (a per-token advantage tensor, which TRL's loss accepts), so with a token-level loss
(``loss_type=dapo``, which the config requires) this is the same objective as training every attempt as a sample
of its own, without recomputing the shared context K times.

**Advantages** (the maths is in ``rewards.py``): step-wise decayed rewards over the global batch (Eq. 17-19); with
``backend=reinforce_pp`` the k1 KL to the initial policy folded into each attempt's token returns, then normalised
over the batch (Eq. 20), by ``algorithm=reinforce_pp``'s own implementation (``ReinforcePPMixin``, each attempt one
segment); with ``backend=grpo`` normalised within each prompt's group of rollouts, TRL's ``beta`` KL in the loss.
The rollout records each row's attempts (``attempt_segments``, ``attempt_outcomes``, ``attempt_formats``) among TRL's
extra fields, and the rewards, metrics and advantages are computed from the rows of the batch trained.

The rollout uses TRL's ``rollout_func`` hook. With transformers generation a later attempt continues from the KV
cache of the attempts before it, and the sampled tokens' log-probabilities are recorded for REINFORCE++'s KL
(``rollout_generation.Continuation``: the same tokens as re-reading the context); elsewhere (vLLM, sharded models,
``reuse_cache=false``) TRL's ``_generate_single_turn`` generates each attempt from its whole context. The subclass
exists because TRL has no per-attempt rewards, teacher turns or reward decay. The entropy mask composes as a mixin
(inert with ``entropy_mask=None``); teacher turns lie outside TRL's token mask, so only the student's tokens
compete for its rho share.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import TYPE_CHECKING, Any

import torch
from trl import GRPOTrainer

from socratic_exp.algorithms.entropy_masked.trainer import EntropyMaskMixin
from socratic_exp.algorithms.reinforce_pp.trainer import ReinforcePPMixin
from socratic_exp.algorithms.rollout_generation import Continuation, can_continue, records_policy_logps
from socratic_exp.algorithms.socraticpo.rewards import attempt_metrics, decayed_rewards, prompt_centred
from socratic_exp.algorithms.trl_batch import full_logits, loss_mask, sequence_inputs
from socratic_exp.core.distributed import most_on_any_process, summed

if TYPE_CHECKING:
    from socratic_exp.algorithms.base import Options
    from socratic_exp.algorithms.socraticpo.config import SocraticPO

TURN_BUDGET = 96  # tokens reserved for a guidance turn when checking that another attempt fits
# Packed rollouts differ several-fold in length (solved at once vs K attempts with guidance); scoring them in this
# many length-sorted chunks, each cut to its own padding, skips most of the padding's compute.
LENGTH_BUCKETS = 4


@dataclasses.dataclass
class _Rollout:
    """One rollout's attempts: the (start, end) of each attempt's tokens in the packed completion, delta, and
    whether the attempt is in the task's answer format (``task.format_reward``); while it is generated, also its
    context c(k), its packed completion (attempts and teacher turns) with the sampled log-probabilities and TRL's
    ``env_mask`` over it, the teacher's view of its attempts, and the teacher's last turn."""

    segments: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    outcomes: list[float] = dataclasses.field(default_factory=list)
    formats: list[float] = dataclasses.field(default_factory=list)
    context: list[int] = dataclasses.field(default_factory=list)
    completion: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    env_mask: list[int] = dataclasses.field(default_factory=list)
    attempts: list[Any] = dataclasses.field(default_factory=list)
    turn: list[int] = dataclasses.field(default_factory=list)

    def add(self, ids: list[int], logps: list[float], sampled: bool) -> None:
        """Append tokens to the completion and the context: the student's own (``sampled``) or a teacher turn."""
        self.completion += ids
        self.logps += logps
        self.env_mask += [int(sampled)] * len(ids)
        self.context += ids


@dataclasses.dataclass
class _Batch:
    """The rollouts generated together, which of them are still trying, and what their generation keeps between
    attempts: the KV cache's continuation (transformers) and each rollout's row in its last generate call."""

    prompt_ids: list[list[int]]
    images: Any
    multimodal: Any
    continuation: Continuation | None
    rollouts: list[_Rollout]
    active: list[int]
    row_of: dict[int, int]
    generated_tokens: float = 0.0
    generation_slots: float = 0.0  # a padded batch computes every row until its longest completion ends
    teacher_seconds: float = 0.0


class SocraticPOTrainer(ReinforcePPMixin, EntropyMaskMixin, GRPOTrainer):
    """TRL's GRPOTrainer with SocraticPO's interactive rollout (``rollout_func``) and per-attempt advantages."""

    def __init__(self, *args: Any, socratic: SocraticPO, components: Options, chat: bool, **kwargs: Any):
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL
        self.socratic = socratic
        self.components = components
        self.chat = chat
        self._rows: list[dict[str, Any]] = []
        self._rollouts: list[_Rollout] = []
        super().__init__(*args, rollout_func=self._interactive_rollout, **kwargs)
        self._continues = socratic.reuse_cache and can_continue(self)
        self.sampled_logps_exact = self._continues and self.ref_policy is not None and records_policy_logps(self)
        self.kl_teacher = self._kl_teacher_model() if socratic.teacher_kl_every else None
        self._rewards: list[list[float]] = []  # the global batch's decayed rewards, rollouts x attempts

    # --- rollout ------------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._rows = inputs  # the rollout needs the rows' answers; TRL hands it only the prompts
        output = super()._generate_and_score_completions(inputs)
        # The batch's attempts as the rollout recorded them in its rows (TRL merged its extra fields into them): the
        # batch trained may be other rollouts than the last ones generated (algorithm.dynamic_sampling)
        self._rollouts = [
            _Rollout([tuple(s) for s in row["attempt_segments"]], list(row["attempt_outcomes"]), row["attempt_formats"])
            for row in inputs
        ]
        mode = "train" if self.model.training else "eval"
        outcomes, self._rewards, formats = self._attempt_rewards(self._rollouts)
        if self.components.task.format_reward:
            self._metrics[mode]["socraticpo/answer_format"].append(sum(formats) / len(formats))
        for name, value in attempt_metrics(outcomes, self._rewards, self.socratic.max_attempts).items():
            self._metrics[mode][f"socraticpo/{name}"].append(value)
        output["advantages"] = self._token_advantages(output)
        if self.kl_teacher is not None and self.state.global_step % self.socratic.teacher_kl_every == 0:
            self._metrics[mode]["socraticpo/teacher_student_kl"].append(self._teacher_student_kl(output))
        return output

    def _kl_teacher_model(self) -> Any:
        """The teacher's model when the KL diagnostic applies: a separate local model sharing the student's
        tokenizer (self-guidance would read 0; a remote teacher has no distributions to compare)."""
        model = self.components.teacher.separate_model()
        if model is None or model[1].get_vocab() != self.processing_class.get_vocab():
            return None
        return model[0]

    def _teacher_student_kl(self, output: dict[str, Any]) -> float:
        """Mean KL(student || teacher) over the student's tokens of the global batch (the paper's Figure 6), one
        row at a time so that only two vocabulary-sized distributions per row are in memory."""
        input_ids, attention = sequence_inputs(output)
        mask = loss_mask(output).float()
        keep = output["completion_ids"].size(1)
        total = count = 0.0
        with torch.no_grad():
            for row in range(input_ids.size(0)):
                ids, att = input_ids[row : row + 1], attention[row : row + 1]
                student = full_logits(self.model, ids, att, keep, 1.0)[0]
                teacher = full_logits(self.kl_teacher, ids, att, keep, 1.0)[0]
                log_p, log_q = student.log_softmax(-1), teacher.log_softmax(-1)
                per_token = (log_p.exp() * (log_p - log_q)).sum(-1)
                total += float((per_token * mask[row]).sum())
                count += float(mask[row].sum())
        total, count = summed(self.accelerator, total, count)  # the global batch's student tokens, not this process's
        return total / max(count, 1.0)

    def _interactive_rollout(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Algorithm 1: attempt, judge each attempt, guide the wrong ones, until none is left to retry."""
        started = time.perf_counter()
        batch = self._new_batch(prompts)
        for k in range(self.socratic.max_attempts):
            new_ids, new_logps = self._attempt(batch, k)
            wrong = self._judge(batch, k, new_ids, new_logps)
            if not most_on_any_process(len(wrong)):  # every process stops at the same attempt
                break
            self._guide(batch, wrong, prompts)
            batch.active = wrong
        return self._record(batch, started)

    def _new_batch(self, prompts: list[Any]) -> _Batch:
        prompt_ids, images, multimodal = self._tokenize_prompts(prompts)
        # transformers generation keeps the KV cache between the attempts and records the sampled log-probabilities
        continuation = None
        if self._continues and images is None and not multimodal:
            continuation = Continuation(self, record_logps=self.sampled_logps_exact)
        rollouts = [_Rollout(context=list(ids)) for ids in prompt_ids]
        everyone = list(range(len(prompts)))
        return _Batch(prompt_ids, images, multimodal, continuation, rollouts, everyone, {i: i for i in everyone})

    def _attempt(self, batch: _Batch, k: int) -> tuple[list[list[int]], list[list[float]] | None]:
        """Attempt k of the active rollouts: their new tokens (continuing the KV cache, their log-probabilities too)."""
        continuation, active = batch.continuation, batch.active
        if continuation is not None:  # each process's own generate calls (the whole model on every process)
            if k == 0:
                new_ids = continuation.start(batch.prompt_ids)
            elif active:
                new_ids = continuation.extend(
                    [batch.row_of[i] for i in active], [batch.rollouts[i].turn for i in active]
                )
                batch.row_of = {i: j for j, i in enumerate(active)}
            else:
                new_ids = []
            return new_ids, continuation.last_logps
        if k == 0:
            new_ids, _ = self._generate_single_turn(
                batch.prompt_ids, batch.images, batch.multimodal, self.num_generations
            )
            return new_ids, None
        # Every process makes the same generation calls with as many rows: under vLLM's server mode, ZeRO-3 and FSDP
        # a call is collective (a gather, a broadcast sliced by process, a parameter all-gather). A process with
        # fewer wrong attempts left fills its batch with prompts and drops their completions.
        contexts = [batch.rollouts[i].context for i in active]
        contexts += [batch.prompt_ids[0]] * (most_on_any_process(len(contexts)) - len(contexts))
        new_ids, _ = self._generate_single_turn(contexts, None, {}, 1)
        return new_ids[: len(active)], None

    def _judge(self, batch: _Batch, k: int, new_ids: list[list[int]], new_logps: list[list[float]] | None) -> list[int]:
        """Verify and record attempt k of each active rollout; the rollouts that try again (wrong, with attempts and
        context left)."""
        task, eos_ids, continuation = self.components.task, set(self.eos_token_ids), batch.continuation
        # A process may have no active rollout left while another has some; transformers' batch_decode reads an
        # empty batch as one empty sequence ([""]), so decode it only when there is something to decode.
        texts = self.processing_class.batch_decode(new_ids, skip_special_tokens=True) if new_ids else []
        batch.generation_slots += len(new_ids) * max(map(len, new_ids), default=0)
        # A rollout stops early when another guidance turn and attempt would not fit the model's context.
        limit = getattr(self.accelerator.unwrap_model(self.model).config, "max_position_embeddings", None)
        room = limit - self.max_completion_length if limit else None
        wrong = []
        for j, (i, ids, text) in enumerate(zip(batch.active, new_ids, texts, strict=True)):
            rollout, answer = batch.rollouts[i], self._rows[i]["answer"]
            verdict = task.verify(text, answer)
            solved = verdict.score >= 1.0
            no_room = room is not None and len(rollout.context) + len(ids) + TURN_BUDGET > room
            last = solved or k == self.socratic.max_attempts - 1 or no_room
            ids = list(ids)
            if not last and not self.chat:
                kept = len(ids)
                while ids and ids[-1] in eos_ids:  # a plain context continues after the text, not an EOS
                    ids.pop()
                if continuation is not None:
                    continuation.drop_last_tokens(batch.row_of[i], kept - len(ids))
            start = len(rollout.completion)
            recorded = continuation is not None and continuation.record_logps
            rollout.add(ids, new_logps[j][: len(ids)] if recorded else [], sampled=True)
            rollout.segments.append((start, len(rollout.completion)))
            rollout.outcomes.append(float(solved))
            # only where rewarded: a math task's strict reading compares with math-verify, per attempt
            rollout.formats.append(float(task.format_reward and task.follows_format(text, answer)))
            rollout.attempts.append(_as_attempt(text, verdict))
            batch.generated_tokens += len(ids)
            if not last:
                wrong.append(i)
        return wrong

    def _guide(self, batch: _Batch, wrong: list[int], prompts: list[Any]) -> None:
        """The teacher's turn f(k) after each wrong attempt, appended to the rollout as context (Eq. 10)."""
        started = time.perf_counter()
        guidance = self._guidance(wrong, prompts, [rollout.attempts for rollout in batch.rollouts])
        batch.teacher_seconds += time.perf_counter() - started
        eos_ids = set(self.eos_token_ids)
        for i, text in zip(wrong, guidance, strict=True):
            rollout = batch.rollouts[i]
            ends_with_eos = bool(rollout.completion) and rollout.completion[-1] in eos_ids
            rollout.turn = self._turn_ids(prompts[i], text, ends_with_eos=ends_with_eos)
            rollout.add(rollout.turn, [0.0] * len(rollout.turn), sampled=False)  # outside the loss and the KL

    def _record(self, batch: _Batch, started: float) -> dict[str, Any]:
        """The rollout's metrics, the sampler's observations and TRL's fields, each row's attempts among them."""
        rollouts, mode = batch.rollouts, "train" if self.model.training else "eval"
        # R(tau) (Eq. 14) of the local rollouts, the rewards decayed over the rollouts generated together: what TRL
        # logs as the reward (and what dynamic sampling compares within a group)
        _, rewards, _ = self._attempt_rewards(rollouts)
        offset = self.accelerator.process_index * len(rollouts)
        returns = [sum(r) for r in rewards[offset : offset + len(rollouts)]]
        self._metrics[mode]["socraticpo/generated_tokens"].append(batch.generated_tokens)
        self._metrics[mode]["socraticpo/teacher_seconds"].append(batch.teacher_seconds)
        self._metrics[mode]["socraticpo/generation_slots"].append(batch.generation_slots)
        self._metrics[mode]["socraticpo/rollout_seconds"].append(time.perf_counter() - started)
        self.components.sampler.observe([row["index"] for row in self._rows], [r.outcomes[0] for r in rollouts])
        recorded = batch.continuation is not None and batch.continuation.record_logps
        return {
            "prompt_ids": batch.prompt_ids,
            "completion_ids": [r.completion for r in rollouts],
            "logprobs": [r.logps for r in rollouts] if recorded else None,
            "env_mask": [r.env_mask for r in rollouts],
            "trajectory_return": returns,
            "attempt_segments": [r.segments for r in rollouts],
            "attempt_outcomes": [r.outcomes for r in rollouts],
            "attempt_formats": [r.formats for r in rollouts],
        }

    def _guidance(self, wrong: list[int], prompts: list[Any], attempts: list[list[Any]]) -> list[str]:
        if self.socratic.guidance == "fixed_retry":
            return [self.socratic.retry_prompt] * len(wrong)
        from socratic_exp.teachers.base import GuidanceRequest

        requests = [GuidanceRequest.for_row(self._rows[i], attempts[i]) for i in wrong]
        return self.components.teacher.guide(requests)

    def _turn_ids(self, prompt: Any, guidance: str, ends_with_eos: bool) -> list[int]:
        """The tokens between the end of an attempt and the start of the next: the guidance, as a user turn of
        the chat template, or as the next line of a plain prompt."""
        tokenizer = self.processing_class
        if not self.chat:
            return tokenizer(guidance.strip() + "\n", add_special_tokens=False)["input_ids"]
        marker = "\x00ATTEMPT\x00"
        messages = [*prompt, {"role": "assistant", "content": marker}, {"role": "user", "content": guidance}]
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **(self.chat_template_kwargs or {})
        )
        glue = text[text.index(marker) + len(marker) :]
        eos = tokenizer.eos_token or ""
        if ends_with_eos and eos and glue.startswith(eos):
            glue = glue[len(eos) :]  # the attempt's own end-of-turn token is already in place
        return tokenizer(glue, add_special_tokens=False)["input_ids"]

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[Any, Any, Any]:
        """TRL's log-probabilities, computed in length-sorted chunks that each drop the padding they do not need
        (left of the prompts, right of the completions). Exact for rotary position embeddings, which see only
        relative positions; MoE auxiliary losses and multimodal inputs take TRL's path unchanged."""
        rows = input_ids.size(0)
        if compute_aux_loss or rows <= 1 or any(value is not None for value in multimodal.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        prompt_width = input_ids.size(1) - logits_to_keep
        prompt_lengths = attention_mask[:, :prompt_width].sum(1)
        completion_lengths = attention_mask[:, prompt_width:].sum(1)
        size = math.ceil(rows / LENGTH_BUCKETS)
        if batch_size:
            size = min(size, batch_size)
        order = torch.argsort(prompt_lengths + completion_lengths)
        logps = entropies = None
        for start in range(0, rows, size):
            index = order[start : start + size]
            left = prompt_width - int(prompt_lengths[index].max())
            keep = max(int(completion_lengths[index].max()), 1)
            window = slice(left, prompt_width + keep)
            chunk_logps, chunk_entropies, _ = super()._get_per_token_logps_and_entropies(
                model, input_ids[index, window], attention_mask[index, window], keep, None, compute_entropy
            )
            if logps is None:
                logps = chunk_logps.new_zeros(rows, logits_to_keep)
                entropies = chunk_logps.new_zeros(rows, logits_to_keep) if compute_entropy else None
            logps[index, :keep] = chunk_logps
            if compute_entropy:
                entropies[index, :keep] = chunk_entropies
        return logps, entropies, None

    # --- rewards and advantages ---------------------------------------------------------------------------
    def _attempt_rewards(self, rollouts: list[_Rollout]) -> tuple[list[list[float]], list[list[float]], list[float]]:
        """Every process's outcomes and rewards (rollouts x attempts, in TRL's global order): delta decayed over the
        batch (Eq. 17-19), plus ``task.format_reward`` for an attempt in the answer format. Our reading (the paper
        has no format reward): the format term is added after the decay and stays out of Eq. 18's mean, so that the
        decay still measures how often earlier attempts were right. Third: each attempt's format flag, flat."""
        K = self.socratic.max_attempts
        local = torch.full((len(rollouts), K, 2), -1.0, device=self.accelerator.device)
        for i, rollout in enumerate(rollouts):
            local[i, : len(rollout.outcomes)] = torch.tensor([rollout.outcomes, rollout.formats]).T
        table = self.accelerator.gather(local).tolist()
        outcomes = [[d for d, _ in row if d >= 0] for row in table]
        formats = [[f for d, f in row if d >= 0] for row in table]
        rewards = decayed_rewards(outcomes, decay=self.socratic.reward_decay)
        weight = self.components.task.format_reward
        if weight:
            rewards = [
                [r + weight * f for r, f in zip(*pair, strict=True)] for pair in zip(rewards, formats, strict=True)
            ]
        return outcomes, rewards, [f for row in formats for f in row]

    def _token_advantages(self, output: dict[str, Any]) -> torch.Tensor:
        """Each student token's advantage: the KL-folded return of its attempt (REINFORCE++, ``reinforce_pp``),
        normalised over the global batch (or within its prompt's group); teacher tokens and padding get 0. With
        ``baseline=prompt`` each reward first loses its prompt's mean over every attempt (the authors' estimator)."""
        settings = self.socratic
        prompts = [i // self.num_generations for i in range(len(self._rewards))]  # TRL's global order: by prompt
        rewards = prompt_centred(self._rewards, prompts) if settings.baseline == "prompt" else self._rewards
        return self._folded_advantages(
            output,
            [r.segments for r in self._rollouts],
            rewards,
            kl_coef=settings.reward_kl_coef,
            weighting=settings.normalize_over,
            eps=settings.advantage_eps,
            groups=prompts if settings.backend == "grpo" else None,
            whitening=settings.whitening,
            kl_metric="socraticpo/reward_kl",
        )


def _as_attempt(text: str, verdict: Any) -> Any:
    """What the teacher reads of an attempt: its text and its verdict."""
    from socratic_exp.teachers.base import Attempt

    return Attempt(text, verdict.score, verdict.reason)
