"""The settings of ``sampler=goldilocks`` (the dataclass ``conf/sampler/goldilocks.yaml`` names) and its hooks.

Torch-free: the hooks import the runtime (``sampler.py``, ``features.py``) only when the trainer asks for a sampler.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.samplers.base import PromptSampler

if TYPE_CHECKING:
    from socratic_exp.samplers.goldilocks.sampler import GoldilocksSelector


@dataclasses.dataclass(kw_only=True)
class GoldilocksSampler(PromptSampler):
    """The settings; the trainer's torch ``Sampler`` is its ``selector`` (built in ``train_sampler``)."""

    candidates: int = setting(
        4,
        "K (paper: K random candidates per prompt; its value: ours): the best of them by predicted utility is kept",
        ge=1,
    )
    pool: Literal["per_prompt", "batch"] = setting(
        "per_prompt",
        "per_prompt (paper, Fig. 1): each prompt keeps the best of its own K | batch (ours): "
        "the B best of all K x B candidates",
    )
    selection: Literal["greedy", "softmax"] = setting(
        "greedy",
        "greedy (paper): the best prediction | softmax (ours): draw in proportion to exp(utility / temperature)",
    )
    temperature: float = setting(
        0.05,
        "softmax only (ours; utility lies in [0, 0.5])",
        gt=0.0,
    )
    epsilon: float = setting(
        0.0,
        "share of the picks drawn uniformly among the candidates (ours: exploration; 0 = off, as in the paper)",
        ge=0.0,
        le=1.0,
    )
    features: Literal["student", "embedding_model", "none"] = setting(
        "student",
        "what the predictor reads (ours; the paper fine-tunes an LM): "
        "student hidden states at the start | embedding_model | none",
    )
    embedding_model: str | None = setting(
        None,
        "features=embedding_model: a local folder or cached Hub encoder (e.g. a sentence-embedding model)",
    )
    embedding_batch_size: int = setting(
        512,
        "prompts per forward pass when computing the features",
        ge=1,
    )
    projection_dim: int = setting(
        256,
        "wider hidden states are cut to this many dimensions by a fixed random projection (ours)",
        ge=1,
    )
    prior_column: str | None = setting(
        None,
        "a row column in [0, 1] added to the features, e.g. prior_pass_rate (task=openmath; ours, not in the paper)",
    )
    hidden_size: int = setting(
        64,
        "the predictor's hidden width (0: a linear head; ours)",
        ge=0,
    )
    learning_rate: float = setting(
        3e-3,
        "the predictor's Adam learning rate (ours)",
        gt=0.0,
    )
    loss: Literal["mae", "mse"] = setting(
        "mae",
        "mae (paper: mean |f(q) - y_q|, its Fig. 6 metric) | mse (mean squared error)",
    )
    update_every: int = setting(
        32,
        "N (paper: refit once N new samples came back; its value: ours): new questions with feedback per refit",
        ge=1,
    )
    update_steps: int = setting(
        20,
        "Adam steps per refit (ours: bounds its cost)",
        ge=1,
    )
    update_batch_size: int = setting(
        128,
        "observations per refit step, drawn from the replay buffer (ours)",
        ge=1,
    )
    buffer_size: int = setting(
        4096,
        "the replay buffer (paper) keeps the latest observations (its size: ours)",
        ge=1,
    )
    background: bool = setting(
        True,
        "refit in a thread during the student's step (paper: asynchronous; false: inline, the same prompts either way)",
    )

    def validate(self) -> None:
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
        from socratic_exp.samplers.goldilocks.features import question_features
        from socratic_exp.samplers.goldilocks.sampler import GoldilocksSelector

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

    def refill(self, trainer: Any, dataset: Any, prompts: int) -> list[int]:
        """Goldilocks' next selection: a dynamic-sampling round's prompts are chosen as any batch's are."""
        chosen = self.selector.next_batch() if self.selector is not None else []
        if len(chosen) != prompts:
            raise RuntimeError(f"sampler=goldilocks chose {len(chosen)} prompts for a refill of {prompts}")
        return chosen

    def observe_groups(self, groups: dict[int, list[float]]) -> None:
        if self.selector is not None:
            self.selector.observe(groups)

    def model_copies(self, components: Any) -> list[Any]:
        """The utility predictor, for ``models/memory.py``: float32 heads in CPU memory (``predictor.py``: the live
        head, the learner, its gradients and Adam moments), and with ``features=embedding_model`` the encoder, loaded
        in CPU memory while the features are computed at the start. The head's width is at most ``projection_dim``
        (the student's hidden size, if narrower), plus 3 with ``prior_column``."""
        from socratic_exp.models.memory import HUB, PARAMETERS, ModelCopy

        width = (0 if self.features == "none" else self.projection_dim) + (3 if self.prior_column else 0)
        hidden = self.hidden_size
        head = width * hidden + hidden + hidden + 1 if hidden else width + 1  # Linear, GELU, Linear(hidden, 1)
        evidence = "samplers/goldilocks/predictor.py UtilityPredictor.__init__"
        copies = [
            ModelCopy("utility predictor: live and learner heads", of=PARAMETERS, parameters=2 * head, on_host=True,
                      trainable=True, key="predictor", note=f"width {width} at most", evidence=evidence),
            ModelCopy("utility predictor: learner's gradients", of=PARAMETERS, parameters=head, state="gradients",
                      on_host=True, key="predictor_grads", evidence=evidence),
            ModelCopy("utility predictor: learner's Adam moments", of=PARAMETERS, parameters=head, state="moments",
                      on_host=True, key="predictor_moments", evidence=evidence),
        ]  # fmt: skip
        if self.features == "embedding_model" and self.embedding_model:
            copies.append(
                ModelCopy(
                    f"feature encoder {self.embedding_model}",
                    of=HUB + self.embedding_model,
                    encoder=True,
                    on_host=True,
                    phase="while the features are computed (start)",
                    key="encoder",
                    evidence="samplers/goldilocks/features.py load_encoder",
                )
            )
        return copies

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
