"""The runtime of ``sampler=goldilocks``: the torch ``Sampler`` the trainer iterates, which chooses each generation
batch when the dataloader asks for it, takes in the rewards, and refits the predictor in a background thread.

**Where this departs from TRL and the paper.** TRL's ``RepeatSampler`` shuffles the dataset once per epoch; this
sampler yields the same structure (each of a generation batch's prompts ``num_generations`` times, the batch
repeated ``num_iterations x steps_per_generation`` times) but chooses the prompts lazily, batch by batch, so each
choice uses the latest predictor. The dataloader fetches one batch ahead, so a batch is chosen with the feedback
of all batches but the one being trained. The paper's teacher answers one prompt request at a time and is a
separate language model on a client-server loop (Appendix A); here a batch's B prompts are chosen together (each
from its own K candidates, ``selector.py``) and the refit runs in a thread of the same process. Its result is
swapped in at the next selection (waiting there if the refit is still running): that point is fixed by the order
of the calls, never by thread timing, so a run is deterministic for its seed and ``background=false`` (the refit
inline) gives exactly the same prompts. On resume the sampler restores its predictor, buffer and position from the
checkpoint (``state_dict``) and the trainer does not fast-forward the dataloader (see
``PromptOrderLayer``).
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from socratic_exp.samplers.base import utility
from socratic_exp.samplers.goldilocks.predictor import RefitSchedule, ReplayBuffer, UtilityPredictor
from socratic_exp.samplers.goldilocks.selector import best_of_each, candidate_groups, top_of_pool

if TYPE_CHECKING:
    import torch

    from socratic_exp.samplers.goldilocks.config import GoldilocksSampler

MAX_PENDING = 16  # chosen batches kept until their feedback arrives (the dataloader runs at most one batch ahead)


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
        self.predictor = UtilityPredictor(
            features, hidden_size=settings.hidden_size, learning_rate=settings.learning_rate, seed=seed
        )
        self.buffer = ReplayBuffer(settings.buffer_size)
        self.schedule = RefitSchedule(settings.update_every)
        self.seen = torch.zeros(self.num_samples, dtype=torch.bool)
        self.selections = 0  # batches chosen so far: with the seed, it names the candidate draw of the next one
        self.fits = 0
        self.replay: collections.deque[list[int]] = collections.deque()  # chosen before a resume, not yet trained
        self.pending: collections.deque[tuple[list[int], set[int]]] = collections.deque(maxlen=MAX_PENDING)
        self.predicted: dict[int, float] = {}  # utility predicted for a chosen question, until its feedback
        self.refit: Future | None = None
        self.finished_fit: tuple[dict[str, Any], float, float] | None = None  # weights, loss, seconds
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
        """Goldilocks RL, Fig. 1 (steps 1-2): K random candidates per prompt, the predicted best of each kept
        (``pool=per_prompt``); or the B best of the K x B candidates (``pool=batch``, ours)."""
        settings = self.settings
        rng = random.Random(f"goldilocks:{self.seed}:{self.selections}")  # str seeds hash the same in every process
        self.selections += 1
        groups = candidate_groups(self.num_samples, self.batch_size, settings.candidates, rng)
        pool = [position for group in groups for position in group]
        if not self.predictor.fitted:  # nothing learnt yet: a uniform draw
            return [group[0] for group in groups] if settings.pool == "per_prompt" else pool[: self.batch_size]
        scores = self.predictor.predict(pool)
        rule = {"rule": settings.selection, "temperature": settings.temperature, "epsilon": settings.epsilon}
        if settings.pool == "per_prompt":
            size = len(groups[0])
            grouped = [scores[start : start + size] for start in range(0, len(scores), size)]
            picks = [b * size + pick for b, pick in enumerate(best_of_each(grouped, rng, **rule))]
        else:
            picks = top_of_pool(scores, self.batch_size, rng, **rule)
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
            self.buffer.add(position, target)
            self.seen[position] = True
            if position in self.predicted:
                self.window.add("predicted_utility", self.predicted.pop(position))
                self.window.add("realised_utility", target)
        self._settle_pending(positions)
        if self.schedule.add(len(positions)):
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
        mean = self.buffer.mean()
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
        self._apply_finished_fit()  # at most one refit at a time, applied in order
        positions, targets = self.buffer.tensors()
        self.fits += 1
        seed = self.seed * 1_000_003 + self.fits
        if self.executor is None:
            self.finished_fit = self._fit(positions, targets, seed)
        else:
            self.refit = self.executor.submit(self._fit, positions, targets, seed)

    def _fit(self, positions: torch.Tensor, targets: torch.Tensor, seed: int) -> tuple[dict[str, Any], float, float]:
        """One refit of the predictor's learner copy (in the background thread unless ``background=false``)."""
        started = time.perf_counter()
        settings = self.settings
        weights, loss = self.predictor.fit(
            positions,
            targets,
            steps=settings.update_steps,
            batch_size=settings.update_batch_size,
            loss=settings.loss,
            seed=seed,
        )
        return weights, loss, time.perf_counter() - started

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
        self._join()
        positions, targets = self.buffer.tensors()
        return {
            "predictor": self.predictor.state_dict(),
            "finished_fit": None if self.finished_fit is None else list(self.finished_fit),
            "buffer_positions": positions,
            "buffer_targets": targets,
            "seen": self.seen.clone(),
            "selections": self.selections,
            "fits": self.fits,
            "new_observations": self.schedule.count,
            # served but without feedback yet (in the order served), then those still to replay
            "replay": [list(chunk) for chunk, _ in self.pending] + [list(chunk) for chunk in self.replay],
            "predicted_positions": list(self.predicted),
            "predicted_values": list(self.predicted.values()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._join()
        self.predictor.load_state_dict(state["predictor"])
        self.finished_fit = None if state["finished_fit"] is None else tuple(state["finished_fit"])
        self.buffer.load(state["buffer_positions"].tolist(), state["buffer_targets"].tolist())
        self.seen = state["seen"].clone()
        self.selections = int(state["selections"])
        self.fits = int(state["fits"])
        self.schedule.count = int(state["new_observations"])
        self.replay = collections.deque(list(chunk) for chunk in state["replay"])
        self.pending.clear()
        self.predicted = dict(zip(state["predicted_positions"], state["predicted_values"], strict=True))

    def close(self) -> None:
        self._join()
        if self.executor is not None:
            self.executor.shutdown(wait=True)
