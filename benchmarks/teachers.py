"""Teacher benchmarks.

``concurrency``: the blackbox teacher sends 64 guidance requests to a local OpenAI-compatible server (``serve``, in a
process of its own) that answers after a fixed 200 ms; efficiency = (64 x 0.2 s / concurrency) / wall time (goal
>= 0.8 at concurrency 32).

``guidance``: how much each teacher's guidance helps the warm-started tiny student on the held-out split: greedy
accuracy, then the accuracy after one guided retry of the wrong answers (``eval/assisted_acc``), the share of
wrong answers the guidance corrects, and the answer-leak rate. Builds the tiny student first if it is not cached.

    python benchmarks/teachers.py concurrency
    python benchmarks/teachers.py guidance [overrides...]
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

from socratic_exp.teachers.base import Attempt, GuidanceRequest, Teacher
from socratic_exp.teachers.blackbox import BlackboxTeacher

REQUESTS, DELAY_S = 64, 0.2


def concurrency() -> None:
    """The server runs in a process of its own, so that it does not share the client's interpreter lock."""
    request = GuidanceRequest("Q: 2+3*4=?\n", (Attempt("2+3=5\n5*4=20\nA: 20\n", 0.0, "wrong"),))
    server = subprocess.Popen([sys.executable, __file__, "serve"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        print(f"{'concurrency':>12}{'cold s':>9}{'warm s':>9}{'ideal s':>9}{'efficiency (warm)':>19}")
        for limit in (1, 8, 32, 64):
            teacher = BlackboxTeacher(
                model="stub-teacher", base_url=url, max_concurrency=limit, cache=False, check_server=False
            )
            walls = []
            for _ in range(2):  # cold: connections open during the burst; warm: the pool is open (steady state)
                started = time.perf_counter()
                teacher.guide([request] * REQUESTS)
                walls.append(time.perf_counter() - started)
            teacher.close()
            ideal = REQUESTS * DELAY_S / limit
            print(f"{limit:>12}{walls[0]:>9.2f}{walls[1]:>9.2f}{ideal:>9.2f}{ideal / walls[1]:>19.2f}")
    finally:
        server.terminate()


@dataclasses.dataclass(kw_only=True)
class FixedRetry(Teacher):
    """SocraticPO's "w/o teacher guidance": the same retry line whatever went wrong."""

    def _guide(self, requests: list[GuidanceRequest]) -> list[str]:
        return ["Hint: try again."] * len(requests)


def guidance(overrides: list[str]) -> None:
    from socratic_exp.core.config import compose
    from socratic_exp.runtime.assembly import build_components
    from socratic_exp.runtime.evaluation import Evaluator
    from socratic_exp.teachers.llm import LLMTeacher
    from socratic_exp.teachers.rule import RuleTeacher

    c = build_components(compose("eval.pass_k=0", *overrides))
    student = c.model.load(c.task)
    split = c.task.build()["eval"]
    teachers = {
        "fixed retry": FixedRetry(),
        "rule": RuleTeacher(),
        "rule + ground truth": RuleTeacher(access_ground_truth=True),
        "llm (self-guidance)": LLMTeacher(max_new_tokens=48),
    }
    print(f"{'teacher':<22}{'greedy':>8}{'assisted':>10}{'corrected':>11}{'leaks':>8}{'s':>7}")
    for name, teacher in teachers.items():
        teacher.attach(c.task, student)
        started = time.perf_counter()
        metrics = Evaluator(c.task, split, c.eval, teacher).evaluate(student)
        greedy, assisted = metrics["eval/greedy_acc"], metrics["eval/assisted_acc"]
        corrected = (assisted - greedy) / (1 - greedy) if greedy < 1 else 0.0
        leaks = metrics.get("eval/teacher/leak_rate", 0.0)
        seconds = time.perf_counter() - started
        print(f"{name:<22}{greedy:>8.3f}{assisted:>10.3f}{corrected:>11.3f}{leaks:>8.3f}{seconds:>7.1f}")


def serve() -> None:
    """A minimal asyncio OpenAI-compatible server answering every chat completion after DELAY_S: its own cost per
    request is far below the client's, so the benchmark measures the client (a thread-per-request test stub is
    not)."""
    import asyncio
    import json

    body = json.dumps(
        {
            "id": "bench",
            "object": "chat.completion",
            "created": 0,
            "model": "stub-teacher",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hint."}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # keep-alive: one request after another on the connection
            try:
                headers = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in headers.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            await asyncio.sleep(DELAY_S)
            writer.write(head + body)
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
        await server.serve_forever()

    asyncio.run(main())


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["concurrency"]:
        concurrency()
    elif sys.argv[1:2] == ["guidance"]:
        guidance(sys.argv[2:])
    else:
        sys.exit(__doc__)
