"""The teacher of ``sampler=goldilocks``: the utility predictor f_phi, its loss, replay buffer and refit schedule.

Goldilocks RL (arXiv 2602.14868: Fig. 1, the method section, Fig. 6 and Appendix A, the client-server loop):
- **Target.** y_q = sqrt(p_q (1 - p_q)), p_q the share of the student's G rollouts on q that were right: the
  reward's standard deviation, to which a GRPO group's gradient norm is proportional. It is
  ``socratic_exp.samplers.base.utility`` (shared with every sampler's metrics; rewards are clipped into [0, 1]).
- **Loss.** The mean absolute error |f_phi(q) - y_q| (``regression_loss``, ``loss=mae``), the error the paper
  reports on unseen questions (Fig. 6); ``loss=mse``, the squared error, is an option.
- **Replay buffer.** The student's feedback (q, y_q) is kept in a buffer (``ReplayBuffer``: the latest
  ``buffer_size``), on which the teacher trains.
- **Updates.** Once N new questions have come back (``update_every``; ``RefitSchedule``), the teacher refits, while
  the student goes on (asynchronous: the refit runs in a thread, ``sampler.py``).

The predictor itself is ours (the paper fine-tunes a language model as the regressor): an MLP head on frozen question
features (``features.py``) whose sigmoid output is scaled to [0, 0.5], the range of y.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Loss = Literal["mae", "mse"]
MAX_UTILITY = 0.5  # sqrt(p (1 - p)) at p = 1/2: the predictor's output range is [0, MAX_UTILITY]


def regression_loss(predictions: torch.Tensor, targets: torch.Tensor, kind: Loss) -> torch.Tensor:
    """The mean absolute error (``mae``, the paper's) or the mean squared error (``mse``) of the predictions."""
    error = predictions - targets
    return error.abs().mean() if kind == "mae" else error.pow(2).mean()


class ReplayBuffer:
    """The latest ``size`` observations (dataset position, target y), oldest first."""

    def __init__(self, size: int):
        self.entries: collections.deque[tuple[int, float]] = collections.deque(maxlen=size)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, position: int, target: float) -> None:
        self.entries.append((position, target))

    def mean(self) -> float:
        return sum(t for _, t in self.entries) / len(self.entries)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions, targets) as a long and a float32 tensor, oldest first."""
        import torch

        positions = torch.tensor([p for p, _ in self.entries], dtype=torch.long)
        return positions, torch.tensor([t for _, t in self.entries], dtype=torch.float32)

    def load(self, positions: Sequence[int], targets: Sequence[float]) -> None:
        self.entries.clear()
        self.entries.extend(zip(positions, targets, strict=True))


class RefitSchedule:
    """A refit once ``every`` new observations (the paper's N) have arrived since the last one. At most one refit per
    batch of feedback (two would train on the same buffer); the observations beyond N count towards the next."""

    def __init__(self, every: int):
        self.every = every
        self.count = 0  # observations since the last refit

    def add(self, observations: int) -> bool:
        """Count a batch's observations; True when a refit is due now."""
        self.count += observations
        if self.count < self.every:
            return False
        self.count %= self.every
        return True


class UtilityPredictor:
    """f_phi: a small regression head on the frozen features, output in [0, 0.5].

    ``live`` answers predictions; refits train ``learner`` (with its own Adam state) and hand back its weights, which
    the sampler copies into ``live`` at a fixed point. A refit may thus run in a thread while ``live`` answers.
    """

    def __init__(self, features: torch.Tensor, *, hidden_size: int, learning_rate: float, seed: int):
        import copy

        import torch

        self.features = features
        with torch.random.fork_rng(devices=[]):  # the initial weights follow the seed; the global stream is untouched
            torch.manual_seed(seed)
            self.live = build_head(features.size(1), hidden_size)
        self.learner = copy.deepcopy(self.live)
        self.optimizer = torch.optim.Adam(self.learner.parameters(), lr=learning_rate)
        self.fitted = False

    def predict(self, positions: Sequence[int]) -> list[float]:
        import torch

        with torch.no_grad():
            return (MAX_UTILITY * self.live(self.features[list(positions)])[:, 0]).tolist()

    def fit(
        self, positions: torch.Tensor, targets: torch.Tensor, *, steps: int, batch_size: int, loss: Loss, seed: int
    ) -> tuple[dict[str, Any], float]:
        """``steps`` Adam steps of ``loss`` on mini-batches drawn (with replacement) from (positions, targets);
        returns the learner's new weights and the mean loss over the steps."""
        import torch

        generator = torch.Generator().manual_seed(seed)
        inputs = self.features[positions]
        total = 0.0
        with torch.enable_grad():
            for _ in range(steps):
                batch = torch.randint(len(positions), (batch_size,), generator=generator)
                predictions = MAX_UTILITY * self.learner(inputs[batch])[:, 0]  # the head's single output
                value = regression_loss(predictions, targets[batch], loss)
                self.optimizer.zero_grad()
                value.backward()
                self.optimizer.step()
                total += value.item()
        weights = {k: v.detach().clone() for k, v in self.learner.state_dict().items()}
        return weights, total / steps

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


def build_head(width: int, hidden: int) -> torch.nn.Module:
    """Linear -> GELU -> Linear -> sigmoid (``hidden`` units), or Linear -> sigmoid when ``hidden`` is 0."""
    from torch import nn

    body = [nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, 1)] if hidden else [nn.Linear(width, 1)]
    return nn.Sequential(*body, nn.Sigmoid())
