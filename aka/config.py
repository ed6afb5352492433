"""User configuration for LLM backends: keys, endpoints, models, limits and the price table.

Read from $AKA_CONFIG, else ~/.config/aka/config.toml (absent: all defaults). Keys come from the
standard variables first (ANTHROPIC_API_KEY, OPENAI_API_KEY), then from the file, so a CI secret
always wins over a developer's file. Per-run choices (model, base URL, repairs, language) live
in LLMSettings, which is stored in run.json so a resumed run asks the same model the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from aka.errors import AkaError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 has no tomllib; tomli is the same parser
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class ConfigError(AkaError):
    """The config file is unreadable or has a wrong field."""


class MissingKeyError(AkaError):
    """A cloud backend was chosen but no API key is configured."""


class Price(BaseModel):
    """USD per million tokens for one model."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0, description="USD per million uncached input tokens")
    output: float = Field(ge=0, description="USD per million output tokens")
    cached_input: float | None = Field(None, ge=0, validation_alias=AliasChoices("cached_input", "cache_read"),
                                       description="USD per million input tokens read from the cache (also "
                                       "`cache_read` in the config file; None: input)")
    cache_write: float | None = Field(None, ge=0, description="USD per million input tokens written to the cache "
                                      "(None: input; Anthropic: 1.25 x input for its 5-minute cache)")


# Public list prices (USD / 1M tokens) as the providers publish them; an estimate only. Every default
# model of LLMConfig below needs an entry here (tests/agent/test_prices.py), so that a run with the
# defaults shows a cost; a model without one shows "no price for this model": add it under
# [prices."MODEL"] in the config file, which also overrides any entry here.
# claude-sonnet-4-6: platform.claude.com/docs/en/about-claude/pricing (base input, 5-minute cache
# write, cache hit, output). gpt-5.5 (the OpenAI default): standard tier, prompts up to 272K tokens (above
# that OpenAI bills about 2x input and 1.5x output), as developers.openai.com/api/docs/pricing read by
# the API Commons plans file api-evangelist/openai (2026-05-04) and by two pricing write-ups of 2026;
# no copy of OpenAI's page itself was reachable to check (docs/llm.md, "Tokens and cost").
DEFAULT_PRICES: dict[str, Price] = {
    "claude-sonnet-4-6": Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75),
    "claude-opus-4-1": Price(input=15.0, output=75.0, cached_input=1.5, cache_write=18.75),
    "claude-opus-4-5": Price(input=5.0, output=25.0, cached_input=0.5, cache_write=6.25),
    "claude-sonnet-4-5": Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75),
    "claude-sonnet-4-0": Price(input=3.0, output=15.0, cached_input=0.3, cache_write=3.75),
    "claude-haiku-4-5": Price(input=1.0, output=5.0, cached_input=0.1, cache_write=1.25),
    "gpt-5.5": Price(input=5.0, output=30.0, cached_input=0.5),
    "gpt-5": Price(input=1.25, output=10.0, cached_input=0.125),
    "gpt-5-mini": Price(input=0.25, output=2.0, cached_input=0.025),
    "gpt-4.1": Price(input=2.0, output=8.0, cached_input=0.5),
    "gpt-4o": Price(input=2.5, output=10.0, cached_input=1.25),
    "o3": Price(input=2.0, output=8.0, cached_input=0.5),
}


class ProviderConfig(BaseModel):
    """One provider's section of the config file."""

    model_config = ConfigDict(extra="forbid")
    api_key: str | None = Field(None, description="key used when the standard environment variable is unset")
    base_url: str | None = Field(None, description="endpoint; for openai any OpenAI-compatible server (…/v1)")
    model: str | None = Field(None, description="default model name for this provider")


class LLMConfig(BaseModel):
    """The whole config file (~/.config/aka/config.toml or $AKA_CONFIG)."""

    model_config = ConfigDict(extra="forbid")
    anthropic: ProviderConfig = Field(default_factory=lambda: ProviderConfig(model="claude-sonnet-4-6"))
    openai: ProviderConfig = Field(default_factory=lambda: ProviderConfig(model="gpt-5.5"))
    timeout_s: float = Field(600.0, gt=0, description="seconds one LLM call may take before it is retried")
    max_retries: int = Field(4, ge=0, description="SDK retries (with backoff) on rate limits, 5xx and timeouts")
    max_output_tokens: int = Field(16000, ge=256, description="output token cap per call (a full module fits)")
    stream: bool = Field(True, description="stream answers so the live display shows progress")
    prices: dict[str, Price] = Field(default_factory=dict, description="model -> price; merged over the defaults")

    def price(self, model: str) -> Price | None:
        """The price of a model: exact name, else the longest known name followed by '-' (a dated id such as
        gpt-4.1-2025-04-14); never a mere prefix (gpt-5 is not gpt-5.5's price)."""
        table = {**DEFAULT_PRICES, **self.prices}
        if model in table:
            return table[model]
        hits = [k for k in table if model.startswith(k + "-")]
        return table[max(hits, key=len)] if hits else None


class LLMSettings(BaseModel):
    """Per-run LLM choices (stored in run.json, reused on resume)."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, description="model name (--model); None: the config's default")
    base_url: str | None = Field(None, description="endpoint override (--base-url)")
    lang: Literal["triton", "cuda"] = Field("triton", description="candidate language: triton or cuda (LLM backends)")
    repairs: int = Field(2, ge=0, description="codegen repairs after a check/compile error (LLM)")
    plan_retries: int = Field(2, ge=0, description="re-asks when a plan answer does not validate")
    sweep: int = Field(4, ge=0, description="offline-search points run on a plan's parameter ranges (0: none)")
    replay_from: str | None = Field(None, description="run id whose LLM exchanges --backend replay plays back")
    tools: bool = Field(True, description="codegen may call tools (read_file, edit, compile, check, time, profile, "
                        "submit) through the provider's native tool calling; False (--no-tools): plan -> codegen text")
    max_tool_calls: int = Field(16, ge=1, description="tool calls one attempt may make; later ones get an error result "
                                "(submit is always accepted)")


def config_path() -> Path:
    env = os.environ.get("AKA_CONFIG")
    return Path(env).expanduser() if env else Path.home() / ".config" / "aka" / "config.toml"


def load_config(path: Path | None = None) -> LLMConfig:
    """The config file validated; a missing default file means defaults, a missing AKA_CONFIG is an error."""
    path = path or config_path()
    if not path.is_file():
        if os.environ.get("AKA_CONFIG"):
            raise ConfigError(f"AKA_CONFIG={path} does not exist: point it at a config.toml or unset it")
        return LLMConfig()
    if tomllib is None:
        raise ConfigError(f"{path}: reading TOML on Python 3.10 needs tomli: pip install tomli")
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not readable TOML: {exc}") from None
    try:
        return LLMConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"{path}: field '{loc}': {first['msg']}") from None


def is_local(url: str | None) -> bool:
    """A server on this machine (vLLM, SGLang, Ollama, LM Studio): it needs no real key."""
    host = urlparse(url or "").hostname or ""
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def key_source(provider: str, cfg: LLMConfig) -> str | None:
    """Where the provider's key comes from: its variable's name, 'config', or None (not set).
    The one rule that the backends and `aka doctor` both read."""
    var = KEY_VARS[provider]
    if os.environ.get(var):
        return var
    return "config" if getattr(cfg, provider).api_key else None


def api_key(provider: str, cfg: LLMConfig, base_url: str | None = None) -> str:
    """The key: environment variable, then config file; local endpoints get a placeholder."""
    var = KEY_VARS[provider]
    src = key_source(provider, cfg)
    if src:
        return os.environ[var] if src == var else getattr(cfg, provider).api_key
    if is_local(base_url):
        return "local-endpoint-needs-no-key"
    raise MissingKeyError(
        f"no {provider} API key: set {var} or api_key under [{provider}] in {config_path()}"
        + (" (or use --base-url for a local OpenAI-compatible server)" if provider == "openai" else "")
    )
