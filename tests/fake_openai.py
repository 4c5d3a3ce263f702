"""A real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a scripted queue.

Tests drive the llm proposer (through litellm and the openai client, unmodified) against it, so the
retry, timeout and extraction paths see real HTTP status codes and real sockets, never a mock object.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

import evaluation.seeds

SEED_SOURCE = (Path(evaluation.seeds.__file__).parent / "layernorm.py").read_text()


@dataclass
class Reply:
    """One scripted answer: an HTTP status, the assistant text, a delay before answering."""

    status: int = 200
    content: str = ""
    delay_s: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 50
    headers: dict = field(default_factory=dict)


def prose() -> Reply:
    return Reply(
        content="I would fuse the mean and variance into one pass and use a larger block. "
        "That should help memory traffic considerably."
    )


def malformed() -> Reply:
    return Reply(
        content="Here it is:\n```python\nimport triton\nclass ModelNew(nn.Module)\n    def forward(self x):\n"
        "        return x +\n```\n"
    )


def rate_limited() -> Reply:
    return Reply(status=429, content="rate limit exceeded", headers={"retry-after": "0"})


def server_error() -> Reply:
    return Reply(status=500, content="internal error")


def slow(delay_s: float) -> Reply:
    return Reply(content=good_kernel().content, delay_s=delay_s)


def good_kernel() -> Reply:
    return Reply(
        content="One row per program with fp32 accumulation, single pass.\n\n```python\n" + SEED_SOURCE + "```\n"
    )


CHEAT_SOURCE = """import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(n))
        self.bias = nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)
"""


def cheat() -> Reply:
    return Reply(content="Calling PyTorch is fastest.\n```python\n" + CHEAT_SOURCE + "```\n")


class FakeOpenAI:
    """`with FakeOpenAI() as server: server.enqueue(...); api_base=server.url`.

    An empty queue answers 503 so a test that asks more than it scripted fails loudly in its asserts.
    """

    def __init__(self, model_name: str = "fake-model"):
        self.model_name = model_name
        self.queue: deque[Reply] = deque()
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                with owner._lock:
                    owner.requests.append(body)
                    reply = owner.queue.popleft() if owner.queue else Reply(status=503, content="queue empty")
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    err = {"error": {"message": reply.content, "type": "fake", "code": reply.status}}
                    return self._send(reply.status, err, reply.headers)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(owner.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": owner.model_name,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": reply.content},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                        },
                    },
                )

            def _send(self, status: int, payload: dict, headers: Optional[dict] = None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> "FakeOpenAI":
        with self._lock:
            self.queue.extend(replies)
        return self

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
