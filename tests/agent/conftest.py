from __future__ import annotations

import shutil
import subprocess

import pytest
from fake_servers import FakeServer  # noqa: E402
from llm_helpers import TOY  # noqa: E402


@pytest.fixture(autouse=True)
def no_real_keys(monkeypatch, tmp_path):
    """Never reach a real provider: no keys, no user config, no SDK credential discovery."""
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "OPENAI_BASE_URL", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-anthropic-config"))
    cfg = tmp_path / "aka-config.toml"
    cfg.write_text("max_retries = 2\ntimeout_s = 30\n")
    monkeypatch.setenv("AKA_CONFIG", str(cfg))


@pytest.fixture(params=["anthropic", "openai"])
def kind(request):
    return request.param


@pytest.fixture
def server(kind):
    s = FakeServer(kind)
    yield s
    s.close()


@pytest.fixture
def toy_project(tmp_path):
    """The toy op in a fresh git repository (runs/ ignored), as `aka optimize` expects."""
    root = tmp_path / "proj"
    shutil.copytree(TOY, root)
    (root / ".gitignore").write_text("/runs/\n")
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"],
                ["add", "."], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root
