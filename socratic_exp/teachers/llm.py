"""``teacher=llm``: a local Hugging Face causal LM prompted with the SocraticPO teaching template.

With ``model: null`` the teacher is the student itself (the paper's self-guidance setting): it generates with the
student's own weights, the same object in memory, so it follows the student as it learns and costs no memory.
Any other ``model`` (a Hub name or a local folder) is loaded once, frozen.

Instruct models (those with a chat template) get ``template`` as a user turn. Base models get ``plain_template``,
a completion prompt whose last line starts the guidance (``Hint:``); the guidance is that line, completed. This
is what lets the embedded tiny student guide itself: it has seen ``Hint:`` lines after wrong attempts.

``backend: vllm`` generates with vLLM for a separate teacher model (not for self-guidance, whose weights change
every step).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from socratic_exp.errors import UserError
from socratic_exp.teachers.base import SOCRATICPO_TEMPLATE, GuidanceRequest, Teacher, render_template

if TYPE_CHECKING:
    from socratic_exp.models.base import Student
    from socratic_exp.tasks.base import Task


@dataclasses.dataclass(kw_only=True)
class LLMTeacher(Teacher):
    model: str | None = None
    template: str = SOCRATICPO_TEMPLATE
    plain_template: str = "{question}\n{student_answer}\nHint:"
    chat: bool | None = None  # null: use the chat template when the teacher's tokenizer has one
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    batch_size: int = 16
    backend: Literal["transformers", "vllm"] = "transformers"
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    enable_thinking: bool | None = False
    seed: int = 0

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
        self.check_range("max_new_tokens", ge=1)
        self.check_range("temperature", ge=0.0)
        self.check_range("batch_size", ge=1)
        self.check(
            "backend",
            not (self.backend == "vllm" and self.model is None),
            "self-guidance (teacher.model=null) shares the student's changing weights, which vLLM cannot",
            "use teacher.backend=transformers, or set teacher.model to a separate teacher model",
        )

    def attach(self, task: Task, student: Student) -> None:
        from socratic_exp.models.base import Student as StudentCls

        template_kwargs = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        if self.model is None or self.model == student.path:
            model, tokenizer, info = student.model, student.tokenizer, {"self_guidance": True}
        elif self.backend == "vllm":
            self._vllm = _load_vllm(self.model, self.dtype)
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

    def separate_model(self) -> tuple[Any, Any] | None:
        """The teacher's own (model, tokenizer) when it is a separate local transformers model, else None."""
        teacher = self._teacher
        if teacher is None or teacher.model is None or teacher.info.get("self_guidance"):
            return None
        return teacher.model, teacher.tokenizer

    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        from socratic_exp.evaluation import as_model_input, generate

        teacher = self._teacher
        if teacher is None:
            raise RuntimeError("LLMTeacher.attach() was not called")
        template = self.template if teacher.chat else self.plain_template
        prompts = [render_template(template, request) for request in requests]
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
        if teacher.chat:
            return [output.strip() for output in outputs]
        # A completion prompt ends with the start of the guidance line ("Hint:"); the guidance is that line.
        return [p.rsplit("\n", 1)[-1] + o.split("\n", 1)[0].rstrip() for p, o in zip(prompts, outputs, strict=True)]

    def _generate_vllm(self, inputs: list[str]) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=self.max_new_tokens, temperature=self.temperature, seed=self.seed * 1_000_003 + self._calls
        )
        return [result.outputs[0].text for result in self._vllm.generate(inputs, params, use_tqdm=False)]

    def close(self) -> None:
        self._teacher = None
        self._vllm = None


def _load_vllm(model: str, dtype: str) -> Any:
    try:
        from vllm import LLM
    except ImportError:
        raise UserError(
            "teacher.backend=vllm: vLLM is not installed",
            "pip install vllm (GPU machines), or use backend=transformers",
        ) from None
    return LLM(model=model, dtype=dtype)
