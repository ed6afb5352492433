"""The real anthropic and openai clients against the local fake servers: wire formats, retries, keys."""

from __future__ import annotations

import time

import pytest
from fake_servers import MODEL, Answer, Call, Error

from aka.agent.llm.base import ProviderError, get_backend
from aka.agent.llm.wire import Request, ToolCall
from aka.config import LLMConfig, LLMSettings, MissingKeyError


def transport(kind, server, monkeypatch, stream=True, key=True):
    if key:
        monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    cfg = LLMConfig(max_retries=2, timeout_s=10, stream=stream)
    return get_backend(kind, llm=LLMSettings(base_url=server.url), config=cfg).transport


def ask(t, text="hello"):
    return t.complete(Request("system words", [{"role": "user", "content": text}], 0, "plan", 1000))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_answer_text_and_usage_in_each_wire_format(kind, server, monkeypatch, stream):
    server.add("the answer " * 50)
    seen = []
    t = transport(kind, server, monkeypatch, stream)
    reply = t.complete(Request("sys", [{"role": "user", "content": "q" * 400}], 0, "plan", 1000), seen.append)
    assert reply.text == "the answer " * 50
    assert reply.model == MODEL[kind] and reply.stop_reason in ("end_turn", "stop")
    u = reply.usage
    assert u.output_tokens == len(reply.text) // 4 and u.input_tokens > 100
    assert u.cached_tokens == u.cache_write_tokens == 0  # ~100 tokens: below the 1,024-token minimum to cache
    assert ("".join(seen) == reply.text) if stream else seen == []  # streaming feeds the live display
    body = server.requests[-1]
    assert bool(body.get("stream")) == stream
    if kind == "anthropic":  # the fixed system prompt is marked for caching
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"} and body["max_tokens"] == 1000
    else:
        assert body["messages"][0] == {"role": "system", "content": "sys"} and body["max_tokens"] == 1000


def test_rate_limit_then_success_is_retried_with_the_servers_delay(kind, server, monkeypatch):
    server.add(Error(429, "slow down", {"retry-after-ms": "300"}), "fine now")
    t0 = time.monotonic()
    reply = ask(transport(kind, server, monkeypatch))
    assert reply.text == "fine now" and len(server.requests) == 2
    assert time.monotonic() - t0 >= 0.3  # honoured retry-after-ms (backoff, not a hammering loop)


def test_server_errors_are_retried_then_reported_in_one_line(kind, server, monkeypatch):
    server.add(Error(500, "boom"), Error(503, "still down", {"retry-after-ms": "10"}), "up again")
    assert ask(transport(kind, server, monkeypatch)).text == "up again" and len(server.requests) == 3
    server.add(*[Error(500, "down for good", {"retry-after-ms": "10"})] * 3)
    with pytest.raises(ProviderError, match="HTTP 500 after retries: down for good"):
        ask(transport(kind, server, monkeypatch))
    assert len(server.requests) == 6  # max_retries=2: three tries


def test_auth_error_is_not_retried(kind, server, monkeypatch):
    server.add(Error(401, "invalid x-api-key"))
    with pytest.raises(ProviderError, match="HTTP 401.*invalid x-api-key"):
        ask(transport(kind, server, monkeypatch))
    assert len(server.requests) == 1


def test_cut_answer_reports_the_limit(kind, server, monkeypatch):
    server.add(Answer("```python\ndef scale_add(", cut=True))
    assert ask(transport(kind, server, monkeypatch)).stop_reason in ("max_tokens", "length")


@pytest.mark.parametrize("provider,var", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_missing_key_fails_fast_naming_the_variable(provider, var):
    with pytest.raises(MissingKeyError, match=var):
        get_backend(provider, llm=LLMSettings(), config=LLMConfig())


def test_local_openai_compatible_server_needs_no_key_and_names_its_model(monkeypatch):
    from fake_servers import FakeServer

    with FakeServer("openai") as s:
        t = transport("openai", s, monkeypatch, key=False)
        assert t.model == MODEL["openai"] and s.paths == ["/v1/models"]  # asked the server, not a cloud default
        s.add("ok")
        assert ask(t).text == "ok" and s.requests[-1]["model"] == MODEL["openai"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_repeated_stable_prefix_is_read_from_the_cache_as_each_api_bills_it(kind, server, monkeypatch, stream):
    server.add("one", "two")
    t = transport(kind, server, monkeypatch, stream)
    stable = [{"text": "the incumbent " * 1000, "cache": True}]  # ~3.5k tokens
    first = t.complete(Request("sys", [{"role": "user", "content": [*stable, {"text": "attempt 0"}]}], 0, "plan", 100))
    second = t.complete(Request("sys", [{"role": "user", "content": [*stable, {"text": "attempt 1, longer"}]}],
                                1, "plan", 100))
    assert first.usage.cached_tokens == 0 and second.usage.cached_tokens > 3000
    assert second.usage.uncached < 100  # only the part after the stable block is new
    if kind == "anthropic":  # the stable block ends with a breakpoint; the first call wrote it
        assert first.usage.cache_write_tokens > 3000 and second.usage.cache_write_tokens == 0
        assert server.requests[0]["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in server.requests[0]["messages"][0]["content"][1]
    else:  # automatic prefix caching, in steps of 128 tokens
        assert second.usage.cached_tokens % 128 == 0


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_tool_calls_and_their_results_in_each_wire_format(kind, server, monkeypatch, stream):
    tools = [{"name": "check", "description": "gate", "parameters": {"type": "object", "properties": {
        "shapes": {"type": "string"}}, "required": ["shapes"]}}]
    server.add(Answer("Let me check.", calls=[Call("check", {"shapes": "smoke"}), Call("compile", {})]), "done")
    t = transport(kind, server, monkeypatch, stream)
    msgs = [{"role": "user", "content": "write it"}]
    reply = t.complete(Request("sys", msgs, 0, "codegen", 500, tools), None)
    assert reply.text == "Let me check." and reply.stop_reason in ("tool_use", "tool_calls")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("check", '{"shapes": "smoke"}'), ("compile", "{}")]
    assert all(c.id for c in reply.tool_calls) and reply.tool_calls[0].id != reply.tool_calls[1].id
    msgs += [{"role": "assistant", "content": reply.text, "tool_calls": [c.as_dict() for c in reply.tool_calls]},
             {"role": "tool", "results": [{"id": c.id, "name": c.name, "content": f"{c.name} ok", "is_error": False}
                                          for c in reply.tool_calls], "content": "and now?"}]
    assert t.complete(Request("sys", msgs, 0, "tools", 500, tools, cache_tail=True)).text == "done"
    first, body = server.requests
    if kind == "anthropic":
        assert first["tools"][0]["input_schema"]["required"] == ["shapes"]
        turn, results = body["messages"][1], body["messages"][2]
        assert [b["type"] for b in turn["content"]] == ["text", "tool_use", "tool_use"]
        assert turn["content"][1]["input"] == {"shapes": "smoke"}
        assert results["role"] == "user" and [b["type"] for b in results["content"]] == ["tool_result", "tool_result",
                                                                                          "text"]
        assert results["content"][0]["tool_use_id"] == reply.tool_calls[0].id
        assert results["content"][-1]["cache_control"] == {"type": "ephemeral"}  # the conversation's tail
    else:
        assert first["tools"][0]["type"] == "function" and first["tools"][0]["function"]["name"] == "check"
        turn = body["messages"][2]
        assert turn["tool_calls"][0]["function"] == {"name": "check", "arguments": '{"shapes": "smoke"}'}
        assert [m["role"] for m in body["messages"][3:]] == ["tool", "tool", "user"]
        assert body["messages"][3]["tool_call_id"] == reply.tool_calls[0].id


def test_tool_choice_none_keeps_the_tools_in_each_wire_format(kind, server, monkeypatch):
    """The plan's request: the same tool definitions as codegen's (the cached prefix), none callable."""
    tools = [{"name": "check", "description": "gate", "parameters": {"type": "object", "properties": {}}}]
    server.add("plan", "codegen")
    t = transport(kind, server, monkeypatch)
    msgs = [{"role": "user", "content": "q"}]
    t.complete(Request("sys", msgs, 0, "plan", 100, tools, tool_choice="none"))
    t.complete(Request("sys", msgs, 0, "codegen", 100, tools))
    plan, codegen = server.requests
    assert plan["tools"] == codegen["tools"] and "tool_choice" not in codegen  # codegen: the default, auto
    assert plan["tool_choice"] == ({"type": "none"} if kind == "anthropic" else "none")
    server.add("no tools")
    t.complete(Request("sys", msgs, 0, "plan", 100, tool_choice="none"))
    assert "tool_choice" not in server.requests[-1] and "tools" not in server.requests[-1]  # nothing to choose


def test_broken_json_arguments_arrive_as_written(monkeypatch):
    """Only chat completions can carry broken JSON (the Messages API sends tool input as an object)."""
    from fake_servers import FakeServer

    with FakeServer("openai") as s:
        s.add(Answer(calls=[Call("check", '{"shapes": "smo')]))
        reply = ask(transport("openai", s, monkeypatch))
    assert reply.tool_calls == [ToolCall(reply.tool_calls[0].id, "check", '{"shapes": "smo')]
