"""``sampler=goldilocks``: Goldilocks difficulty sampling (Goldilocks RL, arXiv 2602.14868), for every algorithm.

A teacher-side utility predictor f_phi(q) estimates, for the current student, y_q = sqrt(p_q (1 - p_q)), p_q the
student's success rate on question q: the reward's standard deviation, to which a GRPO group's gradient is
proportional (zero for questions always or never solved). For each prompt of the next generation batch it draws
``candidates`` (the paper's K) questions uniformly and keeps the one the predictor rates best: ``greedy`` (the
paper), ``softmax`` over utility / temperature, and with ``epsilon`` a share of the picks uniform among the
candidates. Nothing else changes: the algorithm, batch and steps are the same as with ``sampler=uniform``, so the
comparison spends the same rollouts; only which questions they are spent on differs.

**Online learning.** After each batch of rollouts the sampler receives every question's rewards (the feedback
hook ``observe``: GRPO's reward function, SocraticPO's first attempts), stores (q, y_q) in a replay buffer of the
latest ``buffer_size`` observations and, every ``update_every`` new questions (the paper's N), refits f_phi with
``update_steps`` Adam steps on mini-batches of the buffer, with an MAE loss (``loss=mse`` for the other variant).
The refit runs in a background thread while the student's step goes on; its result is swapped in at the next
selection (waiting there only if the refit is still running). That point is fixed by the order of the calls,
never by thread timing, so a run is deterministic for its seed and ``background=false`` (the refit inline) gives
exactly the same prompts.

**The predictor** is a small MLP (``hidden_size``; 0: linear) with a sigmoid output scaled to [0, 0.5], the range
of y, on frozen question features (``question_features.py``): the student's own hidden states when training
starts, a separate local encoder, and / or a prior column. Until its first refit it has learnt nothing, and the
selection is uniform.

**Where this departs from TRL and the paper.** TRL's ``RepeatSampler`` shuffles the dataset once per epoch; this
sampler yields the same structure (each of a generation batch's prompts ``num_generations`` times, the batch
repeated ``num_iterations x steps_per_generation`` times) but chooses the prompts lazily, batch by batch, so each
choice uses the latest predictor. The dataloader fetches one batch ahead, so a batch is chosen with the feedback
of all batches but the one being trained. The paper's teacher is a separate language model fine-tuned as a
regressor on a client-server loop; here it is a head on frozen features, updated in a thread of the same process.
On resume the sampler restores its predictor, buffer and position from the checkpoint (``state_dict``) and the
trainer does not fast-forward the dataloader (see ``PromptSampler.trainer_class``).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.errors import UserError
from socratic_exp.samplers.base import PromptSampler, utility

if TYPE_CHECKING:
    import torch

MAX_PENDING = 16  # chosen batches kept until their feedback arrives (the dataloader runs at most one batch ahead)


@dataclasses.dataclass(kw_only=True)
class GoldilocksSampler(PromptSampler):
    """The settings (documented in ``conf/sampler/goldilocks.yaml``); the trainer's sampler is its ``selector``."""

    candidates: int = 4
    selection: Literal["greedy", "softmax"] = "greedy"
    temperature: float = 0.05
    epsilon: float = 0.0
    features: Literal["student", "embedding_model", "none"] = "student"
    embedding_model: str | None = None
    embedding_batch_size: int = 512
    projection_dim: int = 256
    prior_column: str | None = None
    hidden_size: int = 64
    learning_rate: float = 3e-3
    loss: Literal["mae", "mse"] = "mae"
    update_every: int = 32
    update_steps: int = 20
    update_batch_size: int = 128
    buffer_size: int = 4096
    background: bool = True

    def validate(self) -> None:
        for name in ("candidates", "embedding_batch_size", "projection_dim", "update_every", "update_steps",
                     "update_batch_size", "buffer_size"):  # fmt: skip
            self.check_range(name, ge=1)
        self.check_range("hidden_size", ge=0)
        self.check_range("temperature", gt=0.0)
        self.check_range("epsilon", ge=0.0, le=1.0)
        self.check_range("learning_rate", gt=0.0)
        self.check(
            "embedding_model",
            (self.features == "embedding_model") == bool(self.embedding_model),
            "is the encoder of sampler.features=embedding_model, and only of it",
            "set both sampler.features=embedding_model and sampler.embedding_model=<folder or Hub name>, or neither",
        )
        self.check(
            "features",
            self.features != "none" or bool(self.prior_column),
            "none leaves the predictor without any input",
            "use sampler.features=student, or give sampler.prior_column",
        )

    def __post_init__(self) -> None:
        self.selector: GoldilocksSelector | None = None
        self._restored: dict[str, Any] | None = None
        super().__post_init__()

    # --- the PromptSampler hooks ------------------------------------------------------------------------------
    def train_sampler(self, trainer: Any, dataset: Any) -> GoldilocksSelector:
        from socratic_exp.samplers.question_features import question_features

        args = trainer.args
        batch = args.generation_batch_size // trainer.num_generations
        if len(dataset) < batch:
            raise UserError(
                f"sampler=goldilocks: the training split has {len(dataset)} questions, fewer than the {batch} "
                "prompts of one generation batch",
                "use a larger task.train_size or a smaller algorithm.batch_size",
            )
        if "index" not in dataset.column_names:
            raise UserError("sampler=goldilocks: the training split has no `index` column", "add the row position")
        self.selector = GoldilocksSelector(
            self,
            features=question_features(self, trainer, dataset, seed=args.seed),
            indices=dataset["index"],
            batch_size=batch,
            mini_repeat_count=trainer.num_generations,
            repeat_count=trainer.num_iterations * args.steps_per_generation,
            seed=args.seed,
        )
        if self._restored is not None:  # a resumed run's state arrived before the trainer built its dataloader
            self.selector.load_state_dict(self._restored)
            self._restored = None
        return self.selector

    def observe_groups(self, groups: dict[int, list[float]]) -> None:
        if self.selector is not None:
            self.selector.observe(groups)

    def metrics(self) -> dict[str, float]:
        return super().metrics() | (self.selector.metrics() if self.selector else {})

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | ({"goldilocks": self.selector.state_dict()} if self.selector else {})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "goldilocks" not in state:
            return
        if self.selector is None:
            self._restored = state["goldilocks"]
        else:
            self.selector.load_state_dict(state["goldilocks"])


# --- the selection rule ---------------------------------------------------------------------------------------
def select_from_pool(
    scores: Sequence[float],
    count: int,
    rng: random.Random,
    rule: Literal["greedy", "softmax"] = "greedy",
    temperature: float = 1.0,
    epsilon: float = 0.0,
) -> list[int]:
    """``count`` distinct positions of a candidate pool, chosen by predicted utility ``scores``.

    Each pick is uniform among the candidates left with probability ``epsilon`` (exploration); the others are the
    best by ``greedy`` (ties: the earlier candidate; the pool is in random order) or drawn without replacement with
    probabilities proportional to exp(score / temperature) (``softmax``, by the Gumbel top-k trick).
    """
    import math

    count = min(count, len(scores))
    explore = sum(rng.random() < epsilon for _ in range(count))
    if rule == "softmax":
        keys = [s / temperature - math.log(-math.log(rng.random() or 1e-300)) for s in scores]
    else:
        keys = list(scores)
    ranked = sorted(range(len(scores)), key=lambda i: -keys[i])  # stable: ties keep pool order
    chosen = ranked[: count - explore]
    rest = ranked[count - explore :]
    return chosen + rng.sample(rest, explore)


# --- the runtime: predictor, replay buffer, selection ---------------------------------------------------------
class UtilityPredictor:
    """f_phi: a small regression head on the frozen features, output in [0, 0.5].

    ``live`` answers predictions; refits train ``learner`` (with its own Adam state) and hand back its weights, which
    the selector copies into ``live`` at a fixed point. A refit may thus run in a thread while ``live`` answers.
    """

    def __init__(self, features: torch.Tensor, settings: GoldilocksSampler, seed: int):
        import copy

        import torch

        self.features = features
        self.settings = settings
        with torch.random.fork_rng(devices=[]):  # the initial weights follow the seed; the global stream is untouched
            torch.manual_seed(seed)
            self.live = self._build(features.size(1), settings.hidden_size)
        self.learner = copy.deepcopy(self.live)
        self.optimizer = torch.optim.Adam(self.learner.parameters(), lr=settings.learning_rate)
        self.fitted = False

    @staticmethod
    def _build(width: int, hidden: int) -> torch.nn.Module:
        from torch import nn

        body = [nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, 1)] if hidden else [nn.Linear(width, 1)]
        return nn.Sequential(*body, nn.Sigmoid())

    def predict(self, positions: Sequence[int]) -> list[float]:
        import torch

        with torch.no_grad():
            return (0.5 * self.live(self.features[list(positions)]).squeeze(-1)).tolist()

    def fit(self, positions: torch.Tensor, targets: torch.Tensor, seed: int) -> tuple[dict[str, Any], float, float]:
        """``update_steps`` Adam steps on random mini-batches of (positions, targets); returns the new weights, the
        mean loss and the seconds it took."""
        import torch

        started = time.perf_counter()
        settings = self.settings
        generator = torch.Generator().manual_seed(seed)
        inputs = self.features[positions]
        total = 0.0
        with torch.enable_grad():
            for _ in range(settings.update_steps):
                batch = torch.randint(len(positions), (settings.update_batch_size,), generator=generator)
                error = 0.5 * self.learner(inputs[batch]).squeeze(-1) - targets[batch]
                loss = error.abs().mean() if settings.loss == "mae" else error.pow(2).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item()
        weights = {k: v.detach().clone() for k, v in self.learner.state_dict().items()}
        return weights, total / settings.update_steps, time.perf_counter() - started

    def state_dict(self) -> dict[str, Any]:
        return {
            "live": self.live.state_dict(),
            "learner": self.learner.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "fitted": self.fitted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.live.load_state_dict(state["live"])
        self.learner.load_state_dict(state["learner"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.fitted = bool(state["fitted"])


class Window:
    """Sums and counts since the last ``drain`` (the metrics of one logging interval)."""

    def __init__(self) -> None:
        self.sums: collections.Counter[str] = collections.Counter()
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, name: str, value: float, count: int = 1) -> None:
        self.sums[name] += value
        self.counts[name] += count

    def drain(self) -> dict[str, float]:
        means = {name: self.sums[name] / self.counts[name] for name in self.counts if self.counts[name]}
        self.sums.clear()
        self.counts.clear()
        return means


class GoldilocksSelector:
    """The torch ``Sampler`` the trainer iterates (dataset positions in TRL's ``RepeatSampler`` structure), and the
    sampler's state: predictor, replay buffer, position in the stream, metrics."""

    def __init__(
        self,
        settings: GoldilocksSampler,
        features: torch.Tensor,
        indices: Sequence[int],
        batch_size: int,
        mini_repeat_count: int,
        repeat_count: int,
        seed: int,
    ):
        import torch

        self.settings = settings
        self.num_samples = len(features)
        self.batch_size = batch_size
        self.mini_repeat_count = mini_repeat_count
        self.repeat_count = repeat_count
        self.seed = seed
        self.position = {int(index): position for position, index in enumerate(indices)}
        self.predictor = UtilityPredictor(features, settings, seed)
        self.buffer: collections.deque[tuple[int, float]] = collections.deque(maxlen=settings.buffer_size)
        self.seen = torch.zeros(self.num_samples, dtype=torch.bool)
        self.selections = 0  # batches chosen so far: with the seed, it names the candidate draw of the next one
        self.fits = 0
        self.new_observations = 0
        self.replay: collections.deque[list[int]] = collections.deque()  # chosen before a resume, not yet trained
        self.pending: collections.deque[tuple[list[int], set[int]]] = collections.deque(maxlen=MAX_PENDING)
        self.predicted: dict[int, float] = {}  # utility predicted for a chosen question, until its feedback
        self.refit: Future | None = None
        self.finished_fit: tuple[dict[str, Any], float, float] | None = None
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="goldilocks") if settings.background else None
        self.window = Window()
        self.totals: collections.Counter[str] = collections.Counter()  # seconds, for the overhead benchmark

    # --- the torch Sampler --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return (self.num_samples // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count

    def __iter__(self) -> Iterator[int]:
        for _ in range(self.num_samples // self.batch_size):
            chunk = self.next_batch()  # chosen only when the dataloader asks for it
            for _ in range(self.repeat_count):
                for position in chunk:
                    yield from [position] * self.mini_repeat_count

    # --- selection ----------------------------------------------------------------------------------------------
    def next_batch(self) -> list[int]:
        """The next generation batch's questions (dataset positions)."""
        if self.replay:
            chunk = self.replay.popleft()
        else:
            self._apply_finished_fit()
            started = time.perf_counter()
            chunk = self._select()
            self._timed("selection", time.perf_counter() - started)
        self.pending.append((chunk, set(chunk)))
        return chunk

    def _select(self) -> list[int]:
        settings = self.settings
        rng = random.Random(f"goldilocks:{self.seed}:{self.selections}")  # str seeds hash the same in every process
        self.selections += 1
        pool = rng.sample(range(self.num_samples), min(self.num_samples, settings.candidates * self.batch_size))
        if not self.predictor.fitted:
            return pool[: self.batch_size]  # nothing learnt yet: a uniform draw
        scores = self.predictor.predict(pool)
        picks = select_from_pool(
            scores, self.batch_size, rng, settings.selection, settings.temperature, settings.epsilon
        )
        self.window.add("candidate_utility", sum(scores), len(scores))
        for pick in picks:
            self.predicted[pool[pick]] = scores[pick]
        return [pool[pick] for pick in picks]

    # --- feedback and refits --------------------------------------------------------------------------------------
    def observe(self, groups: dict[int, list[float]]) -> None:
        started = time.perf_counter()
        positions, targets = [], []
        for index, rewards in groups.items():
            if index not in self.position:
                continue  # not a training row (e.g. an evaluation rollout)
            positions.append(self.position[index])
            targets.append(utility(rewards))
        if not positions:
            return
        self._record_errors(positions, targets)
        for position, target in zip(positions, targets, strict=True):
            self.buffer.append((position, target))
            self.seen[position] = True
            if position in self.predicted:
                self.window.add("predicted_utility", self.predicted.pop(position))
                self.window.add("realised_utility", target)
        self._settle_pending(positions)
        self.new_observations += len(positions)
        if self.new_observations >= self.settings.update_every:
            self.new_observations = 0
            self._start_fit()
        self._timed("feedback", time.perf_counter() - started)

    def _record_errors(self, positions: list[int], targets: list[float]) -> None:
        """The predictor's MAE on questions it has never had feedback on (the paper's error on unseen samples), and
        that of predicting the buffer's mean target, on the same questions."""
        if not self.predictor.fitted:
            return
        unseen = [i for i, position in enumerate(positions) if not self.seen[position]]
        if not unseen:
            return
        predictions = self.predictor.predict([positions[i] for i in unseen])
        mean = sum(t for _, t in self.buffer) / len(self.buffer)
        for i, prediction in zip(unseen, predictions, strict=True):
            self.window.add("predictor_mae_unseen", abs(prediction - targets[i]))
            self.window.add("mean_baseline_mae", abs(mean - targets[i]))

    def _settle_pending(self, positions: list[int]) -> None:
        """Chosen batches whose feedback has all arrived leave the queue a resume would replay."""
        for position in positions:  # the earliest batch waiting for it (a question may be in the next one too)
            waiting = next((w for _, w in self.pending if position in w), None)
            if waiting is not None:
                waiting.discard(position)
        while self.pending and not self.pending[0][1]:
            self.pending.popleft()

    def _start_fit(self) -> None:
        import torch

        self._apply_finished_fit()  # at most one refit at a time, applied in order
        positions = torch.tensor([p for p, _ in self.buffer])
        targets = torch.tensor([t for _, t in self.buffer])
        self.fits += 1
        seed = self.seed * 1_000_003 + self.fits
        if self.executor is None:
            self.finished_fit = self.predictor.fit(positions, targets, seed)
        else:
            self.refit = self.executor.submit(self.predictor.fit, positions, targets, seed)

    def _apply_finished_fit(self) -> None:
        """The latest refit's weights into the live predictor (waiting for it if it is still running)."""
        self._join()
        if self.finished_fit is None:
            return
        weights, loss, seconds = self.finished_fit
        self.finished_fit = None
        self.predictor.live.load_state_dict(weights)
        self.predictor.fitted = True
        self.window.add("predictor_loss", loss)
        self._timed("update", seconds)

    def _join(self) -> None:
        if self.refit is None:
            return
        started = time.perf_counter()
        self.finished_fit = self.refit.result()
        self.refit = None
        self._timed("wait", time.perf_counter() - started)

    def _timed(self, name: str, seconds: float) -> None:
        self.window.add(f"{name}_ms", seconds * 1000.0)
        self.totals[f"{name}_s"] += seconds
        self.totals[f"{name}_calls"] += 1

    # --- metrics and state ------------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        return self.window.drain() | {"updates": float(self.fits), "buffer": float(len(self.buffer))}

    def state_dict(self) -> dict[str, Any]:
        """Everything the next batches depend on. A refit still running is waited for and kept unapplied, as in the
        uninterrupted run; batches chosen but not yet trained on are kept to be served first after a resume."""
        import torch

        self._join()
        return {
            "predictor": self.predictor.state_dict(),
            "finished_fit": None if self.finished_fit is None else list(self.finished_fit),
            "buffer_positions": torch.tensor([p for p, _ in self.buffer], dtype=torch.long),
            "buffer_targets": torch.tensor([t for _, t in self.buffer], dtype=torch.float32),
            "seen": self.seen.clone(),
            "selections": self.selections,
            "fits": self.fits,
            "new_observations": self.new_observations,
            # served but without feedback yet (in the order served), then those still to replay
            "replay": [list(chunk) for chunk, _ in self.pending] + [list(chunk) for chunk in self.replay],
            "predicted_positions": list(self.predicted),
            "predicted_values": list(self.predicted.values()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._join()
        self.predictor.load_state_dict(state["predictor"])
        self.finished_fit = None if state["finished_fit"] is None else tuple(state["finished_fit"])
        self.buffer.clear()
        self.buffer.extend(zip(state["buffer_positions"].tolist(), state["buffer_targets"].tolist(), strict=True))
        self.seen = state["seen"].clone()
        self.selections = int(state["selections"])
        self.fits = int(state["fits"])
        self.new_observations = int(state["new_observations"])
        self.replay = collections.deque(list(chunk) for chunk in state["replay"])
        self.pending.clear()
        self.predicted = dict(zip(state["predicted_positions"], state["predicted_values"], strict=True))

    def close(self) -> None:
        self._join()
        if self.executor is not None:
            self.executor.shutdown(wait=True)
