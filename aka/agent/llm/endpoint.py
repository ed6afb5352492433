"""What an LLM endpoint's failure means and what fixes it, for both SDKs (they share their error types).

`probe` makes one cheap request (the model list) before `aka optimize` measures a baseline, so a
dead server or a rejected key costs a second, not the ~100 s of the baseline and a run that could
never make progress. `call` maps a failure during the run to a ProviderError that says whether
resuming can help.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aka.agent.llm.base import ProviderError
from aka.config import KEY_VARS, config_path

T = TypeVar("T")
PROBE_TIMEOUT_S = 15.0
_CLOUD = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


def where(provider: str, url: str | None) -> str:
    return url or _CLOUD[provider]


def url_fix(provider: str, url: str | None) -> str:
    if url:
        return f"start the server or fix --base-url (or base_url under [{provider}] in {config_path()})"
    return "check the network and any proxy settings (HTTPS_PROXY)"


def key_fix(provider: str) -> str:
    return f"set {KEY_VARS[provider]} or api_key under [{provider}] in {config_path()}"


def unreachable(provider: str, url: str | None, exc: Exception) -> ProviderError:
    fix = url_fix(provider, url)
    return ProviderError(f"{provider} endpoint {where(provider, url)} is not reachable ({exc}): {fix}", True, fix)


def http_fault(provider: str, status: int, message: str) -> ProviderError:
    """Rate limits and server errors pass (resume later); a rejected key can be fixed (then resume);
    any other refusal repeats on resume, since the same request is sent again."""
    text = f"{provider}: HTTP {status} after retries: {message}"
    if status in (401, 403):
        return ProviderError(f"{text}: {key_fix(provider)}", True, key_fix(provider))
    if status == 429 or status >= 500:
        return ProviderError(text, True, "wait for the provider's limit or outage to pass")
    if "tool" in message.lower():  # e.g. vLLM without a tool parser: '"auto" tool choice requires ...'
        fix = ("start a new run with --no-tools, or enable tool calling on the server (vLLM: "
               "--enable-auto-tool-choice --tool-call-parser NAME)")
        return ProviderError(f"{text}: {fix}", False, fix)
    return ProviderError(text, False, "the server refuses this request (model name? context length?)")


def body_message(exc: Any) -> str:
    """The provider's own words from an SDK error: its body's error.message (Anthropic nests it under
    "error", OpenAI-compatible servers sometimes do not), else the exception's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(exc)[:300]


def call(provider: str, sdk: Any, url: str | None, fn: Callable[[], T],
         message: Callable[[Any], str] = body_message) -> T:
    """fn() with the SDK's errors (after its retries) turned into ProviderErrors."""
    try:
        return fn()
    except sdk.APIStatusError as exc:
        raise http_fault(provider, exc.status_code, message(exc)) from None
    except sdk.APIConnectionError as exc:  # refused, reset, DNS, and timeouts (a subclass)
        raise unreachable(provider, url, exc) from None
    except sdk.APIError as exc:
        raise ProviderError(f"{provider}: {type(exc).__name__}: {exc}") from None


def probe(provider: str, sdk: Any, client: Any, url: str | None) -> list[str] | None:
    """The served model ids; None when the server answers but lists none (it is reachable all the same).

    Only an unreachable endpoint or a rejected key fails: those would fail every call of the run."""
    quick = client.with_options(timeout=PROBE_TIMEOUT_S, max_retries=1)
    try:
        return [m.id for m in quick.models.list()]
    except sdk.APIConnectionError as exc:
        raise unreachable(provider, url, exc) from None
    except sdk.APIStatusError as exc:
        if exc.status_code in (401, 403):
            raise ProviderError(f"{provider} endpoint {where(provider, url)} rejected the key "
                                f"(HTTP {exc.status_code}): {key_fix(provider)}", True, key_fix(provider)) from None
        return None
