"""The config file, key lookup order, prices and the cost estimate; answer extraction edge cases."""

from __future__ import annotations

import pytest

from aka.agent.llm.answers import AnswerError, extract_code, parse_plan
from aka.agent.llm.chat import LLMBackend
from aka.config import ConfigError, LLMConfig, LLMSettings, api_key, load_config
from aka.records import Usage


def test_config_file_keys_prices_and_env_precedence(tmp_path, monkeypatch):
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('max_retries = 1\n[openai]\napi_key = "from-file"\nmodel = "my-model"\n'
                        '[prices."my-model"]\ninput = 1.0\noutput = 4.0\ncached_input = 0.25\n')
    cfg = load_config(cfg_file)
    assert cfg.max_retries == 1 and cfg.openai.model == "my-model"
    assert api_key("openai", cfg) == "from-file"
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert api_key("openai", cfg) == "from-env"  # a CI secret wins over a developer's file
    assert cfg.price("my-model-2026-01-01").output == 4.0  # dated ids fall back to the longest prefix
    assert cfg.price("unknown-model") is None
    be = LLMBackend("openai", None, None, LLMSettings(), cfg)
    u = be._cost(Usage(input_tokens=1_000_000, cached_tokens=400_000, output_tokens=500_000), "my-model")
    assert u.cost_usd == pytest.approx(0.6 * 1.0 + 0.4 * 0.25 + 0.5 * 4.0)
    assert be._cost(Usage(input_tokens=10), "unknown-model").cost_usd is None


def test_config_errors_are_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text("[openai]\napi_kye = 'x'\n")
    with pytest.raises(ConfigError, match=r"field 'openai.api_kye': Extra inputs are not permitted"):
        load_config(bad)
    monkeypatch.setenv("AKA_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


def test_local_endpoint_needs_no_key():
    assert api_key("openai", LLMConfig(), "http://localhost:11434/v1")


def test_code_extraction_picks_the_entry_module_and_tolerates_a_cut_block():
    text = ("```python\ndef helper():\n    pass\n```\nand\n"
            "```python\nimport torch\n\ndef scale_add(x, y):\n    return x\n")
    assert extract_code(text, "scale_add").startswith("import torch")  # unterminated fence: the compile judges
    with pytest.raises(AnswerError, match="it defines helper"):
        extract_code("```python\ndef helper():\n    pass\n```", "scale_add")


def test_plan_parsing_reports_what_is_wrong():
    with pytest.raises(AnswerError, match="hypothesis: Field required"):
        parse_plan('```json\n{"risks": []}\n```')
    with pytest.raises(AnswerError, match="not valid JSON"):
        parse_plan('```json\n{"hypothesis": "x",}\n```')
    with pytest.raises(AnswerError, match="pattern: Extra inputs"):  # aka owns the pattern field
        parse_plan('{"hypothesis": "x", "pattern": "single_pass"}')
    assert parse_plan('Sure: {"hypothesis": "x", "param_ranges": {"BV": [32, 64]}}').param_ranges == {"BV": [32, 64]}
