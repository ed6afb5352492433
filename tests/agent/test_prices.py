"""Issue 40: a run with the default Anthropic model shows a cost out of the box; the config file's
[prices."MODEL"] table overrides the built-in one; an unknown model still says it has no price."""

from __future__ import annotations

import pytest

from aka.agent.llm.chat import LLMBackend
from aka.config import DEFAULT_PRICES, LLMConfig, LLMSettings, load_config
from aka.records import Attempt, Usage


def test_the_default_anthropic_model_has_a_price():
    cfg = LLMConfig()
    model = cfg.anthropic.model
    price = cfg.price(model)
    assert price is not None, f"the default model {model} has no built-in price"
    # platform.claude.com/docs/en/about-claude/pricing: Claude Sonnet 4.6
    assert (price.input, price.output, price.cached_input, price.cache_write) == (3.0, 15.0, 0.3, 3.75)
    assert cfg.price(f"{model}-20260217") == price  # a dated id falls back to its prefix
    be = LLMBackend("anthropic", None, None, LLMSettings(), cfg)
    u = be._cost(Usage(input_tokens=2_000_000, cached_tokens=1_000_000, cache_write_tokens=500_000,
                       output_tokens=100_000), model)
    assert u.cost_usd == pytest.approx(0.5 * 3.0 + 0.5 * 3.75 + 1.0 * 0.3 + 0.1 * 15.0)


def test_the_default_openai_model_has_its_own_price_and_no_other_model_borrows_one():
    cfg = LLMConfig()
    assert cfg.openai.model == "gpt-5.5"
    p = cfg.price("gpt-5.5")
    assert (p.input, p.output, p.cached_input) == (5.0, 30.0, 0.5)  # OpenAI standard tier, <= 272K input
    assert cfg.price("gpt-5.5-2026-04-23") == p
    assert cfg.price("gpt-5.4") is None  # not gpt-5's price by prefix
    assert cfg.price("gpt-4.1-2025-04-14") == DEFAULT_PRICES["gpt-4.1"]


def test_every_built_in_price_is_complete():
    for name, p in DEFAULT_PRICES.items():
        assert p.input > 0 and p.output > p.input, name
        assert p.cached_input is None or p.cached_input < p.input, name


def test_a_config_file_price_overrides_the_built_in_one(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('[prices."claude-sonnet-4-6"]\ninput = 2.0\noutput = 10.0\ncache_read = 0.2\ncache_write = 2.5\n'
                 '[prices."my-local-model"]\ninput = 0.0\noutput = 0.0\n')
    cfg = load_config(f)
    p = cfg.price("claude-sonnet-4-6")
    assert (p.input, p.output, p.cached_input, p.cache_write) == (2.0, 10.0, 0.2, 2.5)  # cache_read: the cache hit
    assert cfg.price("claude-sonnet-4-6-20260217") == p
    assert cfg.price("my-local-model").output == 0.0  # a free local model is priced at 0, not unknown
    assert cfg.price("claude-haiku-4-5") == DEFAULT_PRICES["claude-haiku-4-5"]  # the others stay
    assert LLMConfig().price("claude-sonnet-4-6").input == 3.0  # the built-in table itself is unchanged


def test_an_unknown_model_still_says_no_price(tmp_path):
    from aka.cli.runs import usage_text

    cfg = LLMConfig()
    assert cfg.price("some-new-model") is None
    be = LLMBackend("openai", None, None, LLMSettings(), cfg)
    u = be._cost(Usage(input_tokens=1000, output_tokens=10), "some-new-model")
    assert u.cost_usd is None
    rec = Attempt(n=0, usage=u.model_dump(), tokens=u.total)
    assert "no price for this model" in usage_text([rec])
    priced = Attempt(n=0, usage=be._cost(Usage(input_tokens=1000, output_tokens=10), "claude-sonnet-4-6").model_dump())
    assert "no price" not in usage_text([priced]) and "~$" in usage_text([priced])
