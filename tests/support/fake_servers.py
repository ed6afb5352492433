"""Local stand-ins for the Anthropic Messages and OpenAI Chat Completions APIs, in their wire formats.

A FakeServer listens on 127.0.0.1 (ephemeral port, one thread per request) and answers each POST
from a script: a queue of steps (answer text, tool calls, or an HTTP error with headers such as
retry-after-ms), then an optional responder function for whatever is left. It records every request
body so tests can see what the real SDK clients sent. JSON or SSE streaming, as the request asks.

Token counts are 4 characters a token. Prompt caching is simulated as each API bills it, so that
the figures the tests measure mean something:
- Anthropic: explicit breakpoints (``cache_control``, at most 4, else HTTP 400). The prefix up to a
  breakpoint, in the order tools -> system -> messages, is written to the cache when it is at least
  1,024 tokens; a later request reads the longest cached prefix that ends at a block boundary at
  most 20 blocks before one of its breakpoints. ``input_tokens`` is what is neither read nor
  written, ``cache_creation_input_tokens`` the tokens written, ``cache_read_input_tokens`` those read.
  A change of ``tool_choice`` keeps the cached tools and system but not the messages, as the API
  documents ("Changes to tool_choice parameter only affect message blocks"); an absent one is auto.
- OpenAI: automatic prefix caching: ``cached_tokens`` is the longest prefix shared with an earlier
  request, in steps of 128 tokens, once it is at least 1,024 tokens (tools and messages; tool_choice
  is taken as outside the prompt).

``tool_choice`` none (Anthropic ``{"type": "none"}``, OpenAI ``"none"``) is honoured as the APIs do: a
scripted answer's tool calls are dropped, its text stays. ``honour_tool_choice=False`` plays a server
that ignores it (some OpenAI-compatible ones do) and answers the calls anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
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
class Call:
    """A tool call the model makes; arguments as a dict, or (OpenAI) raw text that may not be JSON."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)


@dataclass
class Answer:
    text: str = ""
    cut: bool = False  # stop at the output limit (max_tokens / length)
    calls: list[Call] = field(default_factory=list)


Step = Answer | Error | str
MODEL = {"anthropic": "claude-fake-1", "openai": "local-model"}
MIN_CACHED = 1024  # Anthropic's minimum cacheable prefix (Sonnet, Opus); OpenAI's too
LOOKBACK = 20  # Anthropic checks this many block boundaries before each breakpoint for a hit
MAX_BREAKPOINTS = 4


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def user_text(message: dict[str, Any]) -> str:
    """A message's text whatever its form (a string, or Anthropic/OpenAI content blocks)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n\n".join(b.get("text", "") if b.get("type") == "text" else json.dumps(b.get("content", ""))
                       for b in content or [])


def prompt_text(body: dict[str, Any]) -> str:
    """Everything the model reads in a request, as one string (stand-in models search it)."""
    system = body.get("system") or ""
    parts = [system if isinstance(system, str) else "\n\n".join(b.get("text", "") for b in system)]
    return "\n\n".join(parts + [user_text(m) for m in body.get("messages", [])])


def _canon(block: Any) -> str:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}  # the marker is not content
        if set(block) == {"type", "text"}:
            return block["text"]
    return json.dumps(block, sort_keys=True)


def anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """(content, is a breakpoint) for every block, in the cache's order: tools, system, messages."""
    out = [(_canon(t), "cache_control" in t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        out.append((system, False))
    else:
        out += [(_canon(b), "cache_control" in b) for b in system or []]
    for m in body.get("messages", []):
        content = m["content"]
        if isinstance(content, str):
            out.append((m["role"] + ":" + content, False))
        else:
            out += [(m["role"] + ":" + _canon(b), "cache_control" in b) for b in content]
    return out


class AnthropicCache:
    """The prefixes written so far (hash -> tokens); the usage one request is billed."""

    def __init__(self):
        self.written: set[str] = set()

    def usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens) of a request."""
        blocks = anthropic_blocks(body)
        head = len(anthropic_blocks({k: v for k, v in body.items() if k != "messages"}))  # tools and system
        choice = json.dumps(body.get("tool_choice") or {"type": "auto"}, sort_keys=True).encode()
        hashes, cum, h, total = [], [], hashlib.sha256(), 0
        for i, (text, _) in enumerate(blocks):
            if i == head:  # the messages' prefixes are cached per tool_choice, tools and system across them
                h.update(b"tool_choice:" + choice + b"\x00")
            h.update(text.encode() + b"\x00")
            hashes.append(h.copy().hexdigest())
            total += _tokens(text)
            cum.append(total)
        marks = [i for i, (_, bp) in enumerate(blocks) if bp]
        read_at = -1
        for b in marks:
            for i in range(b, max(-1, b - LOOKBACK - 1), -1):
                if hashes[i] in self.written:
                    read_at = max(read_at, i)
                    break
        read = cum[read_at] if read_at >= 0 else 0
        writes = [b for b in marks if b > read_at and cum[b] >= MIN_CACHED]
        created = cum[max(writes)] - read if writes else 0
        self.written.update(hashes[b] for b in writes)
        return total - read - created, created, read


class OpenAICache:
    """Automatic prefix caching over the serialised prompt (tools, then messages)."""

    def __init__(self):
        self.seen: list[str] = []

    def cached(self, body: dict[str, Any]) -> int:
        text = json.dumps([body.get("tools") or [], body.get("messages", [])], sort_keys=True)
        common = max((len(os.path.commonprefix([text, s])) for s in self.seen), default=0)
        self.seen.append(text)
        tokens = common // 4 // 128 * 128
        return tokens if tokens >= MIN_CACHED else 0


def openai_prompt_tokens(body: dict[str, Any]) -> int:
    return _tokens(json.dumps([body.get("tools") or [], body.get("messages", [])], sort_keys=True))


class FakeServer:
    def __init__(self, kind: str, responder: Callable[[dict[str, Any]], Step] | None = None, port: int = 0,
                 honour_tool_choice: bool = True):
        assert kind in ("anthropic", "openai")
        self.kind = kind
        self.honour_tool_choice = honour_tool_choice
        self.script: deque[Step] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []  # what each answered request was billed, in the API's terms
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._ids = 0
        self.anthropic_cache, self.openai_cache = AnthropicCache(), OpenAICache()
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
                if step.calls and server.honour_tool_choice and tool_choice_none(body):
                    step = Answer(step.text, step.cut)  # the model may not call tools: its text only
                marks = sum(b for _, b in anthropic_blocks(body)) if server.kind == "anthropic" else 0
                if marks > MAX_BREAKPOINTS:  # what the API answers
                    return self._error(Error(400, f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control "
                                                  f"may be provided. Found {marks}."))
                with server._lock:
                    usage = server.bill(body, step)
                if body.get("stream"):
                    return self._sse(server.events(step, usage))
                return self._json(200, server.message(step, usage))

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
                    kind = {429: "rate_limit_error", 401: "authentication_error", 400: "invalid_request_error"}.get(
                        e.status, "api_error")
                    obj: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": e.message}}
                else:
                    obj = {"error": {"message": e.message, "type": "server_error", "code": None}}
                self._json(e.status, obj, e.headers)

            def _sse(self, events: list[tuple[str, str]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for event, data in events:
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

    # -- billing ----------------------------------------------------------------------------
    def _calls(self, a: Answer) -> list[tuple[str, str, Any]]:
        """(id, name, arguments) with fresh ids; arguments kept as given (dict or raw text)."""
        out = []
        for c in a.calls:
            self._ids += 1
            out.append((f"{'toolu' if self.kind == 'anthropic' else 'call'}_{self._ids:04d}", c.name, c.arguments))
        return out

    def bill(self, body: dict[str, Any], a: Answer) -> dict[str, Any]:
        calls = self._calls(a)
        out = _tokens(a.text) if a.text else 0
        out += sum(_tokens(args if isinstance(args, str) else json.dumps(args)) for _, _, args in calls)
        if self.kind == "anthropic":
            fresh, created, read = self.anthropic_cache.usage(body)
            u = {"input_tokens": fresh, "cache_creation_input_tokens": created, "cache_read_input_tokens": read,
                 "output_tokens": max(out, 1)}
        else:
            prompt = openai_prompt_tokens(body)
            u = {"prompt_tokens": prompt, "completion_tokens": max(out, 1),
                 "cached_tokens": self.openai_cache.cached(body)}
        self.usages.append(u)
        return {"usage": u, "calls": calls}

    # -- wire formats -----------------------------------------------------------------------
    def message(self, a: Answer, billed: dict[str, Any]) -> dict[str, Any]:
        u, calls = billed["usage"], billed["calls"]
        if self.kind == "anthropic":
            content = [{"type": "text", "text": a.text}] if a.text else []
            content += [{"type": "tool_use", "id": i, "name": n, "input": args if isinstance(args, dict) else {}}
                        for i, n, args in calls]
            stop = "max_tokens" if a.cut else "tool_use" if calls else "end_turn"
            return {"id": "msg_fake", "type": "message", "role": "assistant", "model": MODEL["anthropic"],
                    "content": content, "stop_reason": stop, "stop_sequence": None, "usage": u}
        msg: dict[str, Any] = {"role": "assistant", "content": a.text or None}
        if calls:
            msg["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": _raw(args)}}
                                 for i, n, args in calls]
        finish = "length" if a.cut else "tool_calls" if calls else "stop"
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": MODEL["openai"],
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": _openai_usage(u)}

    def events(self, a: Answer, billed: dict[str, Any]) -> list[tuple[str, str]]:
        u, calls = billed["usage"], billed["calls"]
        chunks = [a.text[i : i + 200] for i in range(0, len(a.text), 200)]
        if self.kind == "anthropic":
            msg = {"id": "msg_fake", "type": "message", "role": "assistant", "model": MODEL["anthropic"],
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**u, "output_tokens": 1}}
            ev: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": msg})]
            index = 0
            if a.text:
                ev.append(("content_block_start", {"type": "content_block_start", "index": 0,
                                                   "content_block": {"type": "text", "text": ""}}))
                ev += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": c}}) for c in chunks]
                ev.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
                index = 1
            for i, name, args in calls:
                raw = json.dumps(args if isinstance(args, dict) else {})
                ev.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": i, "name": name, "input": {}}}))
                ev += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": raw[j : j + 50]}}) for j in range(0, len(raw), 50)]
                ev.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
                index += 1
            stop = "max_tokens" if a.cut else "tool_use" if calls else "end_turn"
            ev += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": u["output_tokens"]}}),
                   ("message_stop", {"type": "message_stop"})]
            return [(e, json.dumps(d)) for e, d in ev]

        def chunk(delta: dict[str, Any], finish: str | None) -> str:
            return json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                               "model": MODEL["openai"], "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]})

        data = [chunk({"role": "assistant", "content": ""}, None)] + [chunk({"content": c}, None) for c in chunks]
        for k, (i, name, args) in enumerate(calls):  # the id and name first, the arguments in pieces
            raw = _raw(args)
            data.append(chunk({"tool_calls": [{"index": k, "id": i, "type": "function",
                                               "function": {"name": name, "arguments": ""}}]}, None))
            data += [chunk({"tool_calls": [{"index": k, "function": {"arguments": raw[j : j + 50]}}]}, None)
                     for j in range(0, len(raw), 50)]
        data.append(chunk({}, "length" if a.cut else "tool_calls" if calls else "stop"))
        data.append(json.dumps({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                                "model": MODEL["openai"], "choices": [], "usage": _openai_usage(u)}))
        data.append("[DONE]")
        return [("", d) for d in data]


def _raw(args: dict[str, Any] | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _openai_usage(u: dict[str, int]) -> dict[str, Any]:
    return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]}}


def tool_choice_none(body: dict[str, Any]) -> bool:
    """The request asks for no tool call (Anthropic {"type": "none"}, OpenAI "none")."""
    return body.get("tool_choice") in ("none", {"type": "none"})


def dead_url(kind: str) -> str:
    """An endpoint URL where nothing listens (a port bound, then closed): connections are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")


def tool_results(body: dict[str, Any]) -> list[str]:
    """The results of earlier tool calls in a request, in order, in either wire format."""
    out = []
    for m in body.get("messages", []):
        if m["role"] == "tool":
            out.append(m.get("content") or "")
        elif m["role"] == "user" and isinstance(m.get("content"), list):
            out += [b["content"] if isinstance(b["content"], str) else json.dumps(b["content"])
                    for b in m["content"] if b.get("type") == "tool_result"]
    return out
