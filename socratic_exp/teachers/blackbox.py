"""``teacher=blackbox``: any OpenAI-compatible chat-completions server (vLLM, OpenAI, ``transformers serve``...).

Requests go through the official ``openai`` client, asynchronously, at most ``max_concurrency`` at a time, on an
event loop of their own (a background thread), so the trainer calls ``guide`` as a plain function. Each request
has a timeout; 429, 5xx, timeouts, dropped connections and malformed replies are retried with exponential
backoff and jitter (honouring ``Retry-After``); after the last retry the guidance falls back to the fixed retry
prompt and counts as ``teacher/failures`` instead of crashing the run. At start-up one tiny request checks that
the server answers, knows the model and accepts the key, and fails with one line when it does not.

The API key is read from the environment variable named by ``api_key_env`` (servers that need none, such as a
local vLLM, get a placeholder); it is never part of the config, logs or outputs. Responses are cached on disk.

Socratic-RL: ``reflect`` sends ``reflect_template`` (by default the reflection prompt the method hands over). A
remote teacher's weights cannot be trained, so its meta-learning is in the prompt: the ``exemplars`` viewpoints
measured most helpful for this student, and as many measured useless, are shown in every later reflection prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import random
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from socratic_exp.core.component import setting
from socratic_exp.core.errors import UserError
from socratic_exp.core.run_folder import default_cache_dir
from socratic_exp.teachers.base import GUIDANCE_TEMPLATE, Attempt, GuidanceRequest, render_template
from socratic_exp.teachers.reflection import (
    Reflective,
    ScoredViewpoint,
    Viewpoint,
    parse_viewpoint,
    reflection_template,
)
from socratic_exp.teachers.response_cache import ResponseCache, cache_key

log = logging.getLogger("socratic_exp")
T = TypeVar("T")
NO_KEY = "EMPTY"  # what local servers without authentication accept
FIXED_RETRY_PROMPT = "Your answer is incorrect. Please try again."


class MalformedReply(Exception):
    """The server answered 200 with something that is not a usable chat completion."""


class _LoopThread:
    """An asyncio loop in a daemon thread: synchronous callers submit coroutines and wait for their result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="teacher-client", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


@dataclasses.dataclass(kw_only=True)
class BlackboxTeacher(Reflective):
    base_url: str = setting("http://127.0.0.1:8000/v1", "the OpenAI-compatible server's URL (http or https)")
    model: str = setting("", "the served model name, e.g. Qwen/Qwen3.5-27B (required)")
    api_key_env: str = setting(
        "OPENAI_API_KEY", "the NAME of the environment variable holding the key, never the key (unset: no key)"
    )
    template: str = setting(GUIDANCE_TEMPLATE, "the guidance prompt (SocraticPO's teaching template, App. B.2)")
    system_prompt: str | None = setting(None, "a system turn before the guidance prompt (null: none)")
    temperature: float = setting(0.7, "the teacher's sampling temperature (0: greedy)", ge=0.0)
    top_p: float = setting(1.0, "the teacher's nucleus sampling (1: off)", gt=0.0, le=1.0)
    max_tokens: int = setting(256, "tokens per guidance reply at most", ge=1)
    extra_body: dict[str, Any] = setting(
        default_factory=dict,
        help="passed through in each request, e.g. {chat_template_kwargs: {enable_thinking: false}} for vLLM",
    )
    max_concurrency: int = setting(32, "requests in flight at once", ge=1)
    timeout_s: float = setting(60.0, "seconds per request before it counts as failed", gt=0.0)
    max_retries: int = setting(4, "retries on 429 / 5xx / timeouts / malformed replies (0: none)", ge=0)
    backoff_s: float = setting(0.5, "first backoff in seconds; doubles per retry, with jitter", ge=0.0)
    backoff_max_s: float = setting(20.0, "longest backoff in seconds", ge=0.0)
    fallback: str = setting(FIXED_RETRY_PROMPT, "the fixed guidance used after the last retry fails (counted)")
    cache: bool = setting(True, "on-disk response cache keyed by (model, messages, sampling parameters)")
    cache_dir: str | None = setting(None, "the response cache's folder (null: $SOCRATIC_EXP_CACHE/teacher_responses)")
    check_server: bool = setting(True, "one tiny request at start-up: server reachable, model served, key accepted")
    seed: int = setting(0, "seed of the retries' backoff jitter", ge=0)
    reflect_template: str | None = setting(
        None, "Socratic-RL: the reflection prompt that turns a failed attempt into a viewpoint (null: the method's own)"
    )
    exemplars: int = setting(
        3, "Socratic-RL meta-learning: best and worst measured viewpoints shown when reflecting (0: none)", ge=0
    )

    def __post_init__(self) -> None:
        self._loop: _LoopThread | None = None
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self._cache: ResponseCache | None = None
        self._jitter = random.Random(self.seed)
        self._utilities: dict[str, list[float]] = {}  # viewpoint -> measured utilities (for the exemplars)
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        self.check("model", bool(self.model.strip()), "names no model", "set teacher.model=<the served model name>")
        self.check(
            "base_url",
            self.base_url.startswith(("http://", "https://")),
            "is not an http(s) URL",
            "e.g. teacher.base_url=http://127.0.0.1:8000/v1",
        )
        self.check("template", "{question}" in self.template, "must contain {question}")
        self.check(
            "reflect_template",
            self.reflect_template is None or "{student_answer}" in self.reflect_template,
            "must contain {student_answer}",
        )

    # --- lifecycle --------------------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._loop is not None:
            return
        try:
            from openai import AsyncOpenAI
        except ImportError:  # pragma: no cover - a declared dependency
            raise UserError("teacher=blackbox needs the openai package", "pip install openai") from None
        api_key = os.environ.get(self.api_key_env) or NO_KEY
        self._loop = _LoopThread()
        # Retries are ours (with jitter, Retry-After and a fallback), so the client's own are off.
        self._client = AsyncOpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=self.timeout_s)
        if self.cache:
            path = Path(self.cache_dir) if self.cache_dir else default_cache_dir() / "teacher_responses"
            self._cache = ResponseCache(path / "responses.sqlite")

    def preflight(self) -> None:
        self._start()
        if self.check_server:
            assert self._loop is not None
            self._loop.run(self._check_server())

    def attach(self, task: Any, student: Any) -> None:
        super().attach(task, student)
        self._start()

    def close(self) -> None:
        if self._loop is None:
            return
        if self._client is not None:
            self._loop.run(self._client.close())
        self._loop.stop()
        if self._cache is not None:
            self._cache.close()
        self._loop = self._client = self._cache = self._semaphore = None

    # --- guidance ---------------------------------------------------------------------------------------------
    def messages_for(self, request: GuidanceRequest) -> list[dict[str, str]]:
        return self._conversation(render_template(self.template, request))

    def _conversation(self, content: str) -> list[dict[str, str]]:
        user = {"role": "user", "content": content}
        return [{"role": "system", "content": self.system_prompt}, user] if self.system_prompt else [user]

    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        self._start()
        assert self._loop is not None
        return self._loop.run(self._guide_all(requests))

    async def _guide_all(self, requests: list[GuidanceRequest]) -> list[str]:
        replies = await self._complete_all([self.messages_for(r) for r in requests])
        return [reply if reply is not None else self.fallback for reply in replies]

    async def _complete_all(self, conversations: list[list[dict[str, str]]]) -> list[str | None]:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return await asyncio.gather(*(self._complete(messages) for messages in conversations))

    # --- Socratic-RL ------------------------------------------------------------------------------------------
    def _reflect(self, questions: list[str], traces: list[Attempt], prompt: str | None) -> list[Viewpoint | None]:
        template = reflection_template(self.reflect_template, prompt)
        self._start()
        assert self._loop is not None
        block = self.exemplar_block()
        conversations = [
            self._conversation(render_template(template, GuidanceRequest(q, (t,))).replace("{exemplars}", block))
            for q, t in zip(questions, traces, strict=True)
        ]
        replies = self._loop.run(self._complete_all(conversations))
        return [
            parse_viewpoint(reply, source_trace=q + t.completion) if reply else None
            for reply, q, t in zip(replies, questions, traces, strict=True)
        ]

    def exemplar_block(self) -> str:
        """The best and the worst viewpoints measured so far (mean utility), as lines of the reflection prompt."""
        if not self.exemplars or not self._utilities:
            return ""
        ranked = sorted(self._utilities, key=lambda text: -sum(self._utilities[text]) / len(self._utilities[text]))
        mean = {text: sum(u) / len(u) for text, u in self._utilities.items()}
        helpful = [t for t in ranked if mean[t] > 0][: self.exemplars]
        useless = [t for t in reversed(ranked) if mean[t] <= 0][: self.exemplars]
        lines = []
        if helpful:
            lines += ["Viewpoints that measurably helped this student before:", *(f"- {t}" for t in helpful)]
        if useless:
            lines += ["Viewpoints that did not help (write something different):", *(f"- {t}" for t in useless)]
        return "\n".join(lines) + "\n" if lines else ""

    def meta_update(self, scored: Sequence[ScoredViewpoint], prompt: str | None = None) -> dict[str, float]:
        for item in scored:
            self._utilities.setdefault(item.text, []).append(item.utility)
        known = float(len(self._utilities))
        return {"teacher_meta/updates": float(len(scored)), "teacher_meta/known_viewpoints": known}

    def save_meta_state(self, folder: Path) -> None:
        (folder / "blackbox_teacher.json").write_text(json.dumps(self._utilities))

    def load_meta_state(self, folder: Path) -> None:
        path = folder / "blackbox_teacher.json"
        if path.is_file():
            self._utilities = json.loads(path.read_text())

    def _sampling(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "extra_body": self.extra_body,
        }

    async def _complete(self, messages: list[dict[str, str]]) -> str | None:
        """One chat completion with retries; None after the last failure (the caller falls back)."""
        import openai

        key = cache_key(self.model, messages, self._sampling())
        if self._cache is not None and (cached := self._cache.get(key)) is not None:
            self.stats.add(cache_hits=1)
            return cached
        assert self._semaphore is not None
        for attempt in range(self.max_retries + 1):
            try:
                async with self._semaphore:  # released while backing off
                    # The raw reply, parsed here: cheaper than the client's typed models, and a malformed reply
                    # is ours to detect (and retry).
                    raw = await self._client.chat.completions.with_raw_response.create(
                        model=self.model, messages=messages, **self._sampling()
                    )
                reply = json.loads(raw.text)
                text = _content(reply)
            except (openai.APIStatusError, openai.APIConnectionError, openai.APIResponseValidationError,
                    MalformedReply, json.JSONDecodeError) as err:  # fmt: skip
                if not _retryable(err) or attempt == self.max_retries:
                    self._count_failure(err)
                    return None
                self.stats.add(retries=1)
                await asyncio.sleep(self._delay(attempt, err))
                continue
            usage = reply.get("usage") or {}
            self.stats.add(
                prompt_tokens=usage.get("prompt_tokens") or 0, completion_tokens=usage.get("completion_tokens") or 0
            )
            if self._cache is not None:
                self._cache.put(key, text)
            return text
        return None  # pragma: no cover - the loop always returns

    def _delay(self, attempt: int, err: Exception) -> float:
        """Exponential backoff with jitter; a server's Retry-After wins when it is within ``backoff_max_s``."""
        response = getattr(err, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        try:
            if retry_after is not None and 0 <= float(retry_after) <= self.backoff_max_s:
                return float(retry_after)
        except ValueError:
            pass
        ceiling = min(self.backoff_max_s, self.backoff_s * 2**attempt)
        return ceiling * (0.5 + 0.5 * self._jitter.random())

    def _count_failure(self, err: Exception) -> None:
        self.stats.add(failures=1)
        log.warning("teacher request failed, using the fallback guidance: %s", _describe(err))

    # --- start-up check ---------------------------------------------------------------------------------------
    async def _check_server(self) -> None:
        import openai

        where = f"teacher server at {self.base_url}"
        key_set = bool(os.environ.get(self.api_key_env))
        try:
            for attempt in range(self.max_retries + 1):  # a server still warming up may answer 429 / 503
                try:
                    await self._client.chat.completions.create(
                        model=self.model,
                        messages=[{"role": "user", "content": "ping"}],
                        max_tokens=1,
                        timeout=min(self.timeout_s, 30.0),
                    )
                    return
                except openai.APIStatusError as err:
                    if not _retryable(err) or attempt == self.max_retries:
                        raise
                    await asyncio.sleep(self._delay(attempt, err))
        except openai.AuthenticationError:
            problem = (
                f"rejected the API key in ${self.api_key_env}"
                if key_set
                else f"needs an API key (${self.api_key_env} is not set)"
            )
            raise UserError(f"{where} {problem}", f"export {self.api_key_env}=<a valid key>") from None
        except openai.PermissionDeniedError as err:
            raise UserError(
                f"{where} refused access (HTTP 403: {_describe(err)})", f"check the key in ${self.api_key_env}"
            ) from None
        except openai.NotFoundError:
            raise UserError(
                f"{where} does not serve model {self.model!r}{await self._served_models()}",
                "set teacher.model to a served model, or serve it (see docs/teachers.md)",
            ) from None
        except openai.APIConnectionError as err:
            raise UserError(
                f"{where} is unreachable ({_describe(err)})",
                "start the server (docs/teachers.md: `vllm serve ...`) or fix teacher.base_url",
            ) from None
        except openai.APIStatusError as err:
            raise UserError(f"{where} answered HTTP {err.status_code} to a test request ({_describe(err)})") from None
        except (openai.APIResponseValidationError, json.JSONDecodeError) as err:
            raise UserError(
                f"{where} answered a test request with a malformed reply ({_describe(err)})",
                "check that teacher.base_url is an OpenAI-compatible /v1 endpoint",
            ) from None

    async def _served_models(self) -> str:
        try:
            models = [m.id async for m in self._client.models.list()]
        except Exception:  # listing is a courtesy; many servers do not offer it
            return ""
        return f" (it serves: {', '.join(models[:8])})" if models else ""


def _content(reply: Any) -> str:
    """The first choice's message text of a chat-completion reply (a parsed JSON object)."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedReply("no message in the reply") from None
    if not isinstance(content, str) or not content.strip():
        raise MalformedReply("empty message in the reply")
    return content.strip()


def _retryable(err: Exception) -> bool:
    import openai

    if isinstance(err, openai.APIStatusError):
        return err.status_code in (408, 409, 425, 429) or err.status_code >= 500
    return True  # connection errors, timeouts, malformed replies


def _describe(err: Exception) -> str:
    status = getattr(err, "status_code", None)
    text = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    return f"HTTP {status}: {text}" if status else f"{type(err).__name__}: {text}"
