"""Local stand-ins for the Anthropic Messages and OpenAI Chat Completions APIs, in their wire formats.

A FakeServer listens on 127.0.0.1 (ephemeral port, one thread per request) and answers each POST
from a script: a queue of steps (answer text, or an HTTP error with headers such as retry-after-ms),
then an optional responder function for whatever is left. It records every request body so
tests can see what the real SDK clients sent. JSON or SSE streaming, as the request asks.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Error:
    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Answer:
    text: str
    cut: bool = False  # stop at the output limit (max_tokens / length)


Step = Answer | Error | str
MODEL = {"anthropic": "claude-fake-1", "openai": "local-model"}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _prompt_text(body: dict[str, Any]) -> str:
    parts = [m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
             for m in body.get("messages", [])]
    system = body.get("system", "")
    return json.dumps(system) + "".join(parts)


class FakeServer:
    def __init__(self, kind: str, responder: Callable[[dict[str, Any]], Step] | None = None, port: int = 0):
        assert kind in ("anthropic", "openai")
        self.kind = kind
        self.script: deque[Step] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                server.paths.append(self.path)
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": MODEL["openai"], "object": "model",
                                                                 "created": 0, "owned_by": "test"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                    step = server.script.popleft() if server.script else None
                if step is None:
                    step = server.responder(body) if server.responder else Error(400, "fake server: script exhausted")
                if isinstance(step, str):
                    step = Answer(step)
                if isinstance(step, Error):
                    return self._error(step)
                if body.get("stream"):
                    return self._sse(body, step)
                return self._json(200, server.message(body, step))

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, e: Error) -> None:
                if server.kind == "anthropic":
                    kind = {429: "rate_limit_error", 401: "authentication_error"}.get(e.status, "api_error")
                    obj: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": e.message}}
                else:
                    obj = {"error": {"message": e.message, "type": "server_error", "code": None}}
                self._json(e.status, obj, e.headers)

            def _sse(self, body: dict[str, Any], a: Answer) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for event, data in server.events(body, a):
                    line = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
                    self.wfile.write(line.encode())
                    self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        """What --base-url takes: the Anthropic SDK adds /v1/messages, the OpenAI one /chat/completions."""
        return f"http://127.0.0.1:{self.port}" + ("/v1" if self.kind == "openai" else "")

    def add(self, *steps: Step) -> FakeServer:
        self.script.extend(steps)
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- wire formats -----------------------------------------------------------------------
    def _usage(self, body: dict[str, Any], a: Answer) -> tuple[int, int, int]:
        prompt = _tokens(_prompt_text(body))
        return prompt, _tokens(a.text), prompt // 2  # half the prompt "cached": exercises the cached field

    def message(self, body: dict[str, Any], a: Answer) -> dict[str, Any]:
        inp, out, cached = self._usage(body, a)
        if self.kind == "anthropic":
            return {"id": "msg_fake", "type": "message", "role": "assistant", "model": MODEL["anthropic"],
                    "content": [{"type": "text", "text": a.text}] if a.text else [],
                    "stop_reason": "max_tokens" if a.cut else "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": inp - cached, "output_tokens": out, "cache_read_input_tokens": cached,
                              "cache_creation_input_tokens": 0}}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": MODEL["openai"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": a.text},
                             "finish_reason": "length" if a.cut else "stop"}],
                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
                          "prompt_tokens_details": {"cached_tokens": cached}}}

    def events(self, body: dict[str, Any], a: Answer) -> list[tuple[str, str]]:
        inp, out, cached = self._usage(body, a)
        chunks = [a.text[i : i + 200] for i in range(0, len(a.text), 200)]
        if self.kind == "anthropic":
            msg = {"id": "msg_fake", "type": "message", "role": "assistant", "model": MODEL["anthropic"],
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": inp - cached, "output_tokens": 1, "cache_read_input_tokens": cached,
                             "cache_creation_input_tokens": 0}}
            ev = [("message_start", {"type": "message_start", "message": msg}),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}})]
            ev += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": c}}) for c in chunks]
            ev += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
                   ("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "max_tokens" if a.cut else "end_turn",
                                                "stop_sequence": None}, "usage": {"output_tokens": out}}),
                   ("message_stop", {"type": "message_stop"})]
            return [(e, json.dumps(d)) for e, d in ev]

        def chunk(delta: dict[str, Any], finish: str | None) -> str:
            return json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                               "model": MODEL["openai"], "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]})

        data = [chunk({"role": "assistant", "content": ""}, None)] + [chunk({"content": c}, None) for c in chunks]
        data.append(chunk({}, "length" if a.cut else "stop"))
        data.append(json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                                "model": MODEL["openai"], "choices": [],
                                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
                                          "prompt_tokens_details": {"cached_tokens": cached}}}))
        data.append("[DONE]")
        return [("", d) for d in data]


def dead_url(kind: str) -> str:
    """An endpoint URL where nothing listens (a port bound, then closed): connections are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")
