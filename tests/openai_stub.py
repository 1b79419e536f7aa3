"""A small OpenAI-compatible server on 127.0.0.1 with scripted faults, for tests and the concurrency benchmark.

Each chat-completion request takes the next entry of ``faults`` (then answers normally): ``"429"``, ``"500"``,
``"slow"`` (sleeps ``slow_s`` before answering), ``"broken_json"``, ``"empty"`` (a reply without choices).
``delay_s`` delays every answer; ``api_key`` makes it demand ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # the default backlog (5) makes bursts of connections wait for SYN retries
    daemon_threads = True


class StubServer:
    def __init__(
        self,
        model: str = "stub-teacher",
        *,
        faults: list[str] | None = None,
        delay_s: float = 0.0,
        slow_s: float = 5.0,
        api_key: str | None = None,
        reply: str = "Hint: check the order of operations in step 1.",
    ):
        self.model = model
        self.faults = deque(faults or [])
        self.delay_s = delay_s
        self.slow_s = slow_s
        self.api_key = api_key
        self.reply = reply
        self.requests = 0
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_fault(self) -> str | None:
        with self._lock:
            self.requests += 1
            return self.faults.popleft() if self.faults else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Without this, a response split into header and body segments waits ~40 ms for a delayed ACK.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes | str, headers: dict[str, str] | None = None) -> None:
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                header = self.headers.get("Authorization", "")
                stub.authorizations.append(header)
                if stub.api_key is None or header == f"Bearer {stub.api_key}":
                    return True
                self._send(401, json.dumps({"error": {"message": "Incorrect API key", "type": "auth"}}))
                return False

            def do_GET(self) -> None:
                if self._authorized():
                    self._send(200, json.dumps({"object": "list", "data": [{"id": stub.model, "object": "model"}]}))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self._authorized():
                    return
                if body.get("model") != stub.model:
                    message = f"The model `{body.get('model')}` does not exist."
                    self._send(404, json.dumps({"error": {"message": message, "type": "NotFoundError"}}))
                    return
                fault = stub._next_fault()
                if stub.delay_s:
                    time.sleep(stub.delay_s)
                if fault == "429":
                    self._send(429, json.dumps({"error": {"message": "rate limited"}}), {"Retry-After": "0"})
                elif fault == "500":
                    self._send(500, json.dumps({"error": {"message": "internal error"}}))
                elif fault == "broken_json":
                    self._send(200, '{"id": "x", "choices": [{"message": {"content": "Hi')
                elif fault == "empty":
                    self._send(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                                "model": stub.model, "choices": []}))  # fmt: skip
                else:
                    if fault == "slow":
                        time.sleep(stub.slow_s)
                    self._send(200, json.dumps(_completion(stub.model, stub.reply)))

        return Handler


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


if __name__ == "__main__":  # a stand-alone server, e.g. for benchmarks in a process of their own
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    with StubServer(delay_s=args.delay) as server:
        print(server.url, flush=True)
        threading.Event().wait()
