"""Helpers shared by the LLM-backend tests (tests/agent) and whoever needs the toy op (tests/support/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from answers_text import BASELINE

from aka.agent.llm.base import Context, get_backend
from aka.config import LLMConfig, LLMSettings
from aka.evaluate.static.policy import check_source

TOY = Path(__file__).parent / "toyop"


def backend(kind, server, op, monkeypatch, **llm):
    """The named backend's real SDK client pointed at the fake server."""
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    return get_backend(kind, op=op, llm=LLMSettings(base_url=server.url, **llm),
                       config=LLMConfig(max_retries=1, timeout_s=10))


def context(op, run_dir, attempt=0, history=(), verify=None):
    return Context(op=op.name, attempt=attempt, incumbent_source=BASELINE, incumbent_label="baseline",
                   baseline_path=str(op.path("baseline")), kernel_dir=str(op.path("baseline").parent),
                   hardware={"name": "cpu (Triton interpreter)", "interpreter": True}, history=list(history),
                   run_dir=str(run_dir), verify=verify)


def policy_verify(op):
    """The repair loop's check without a worker: the real static policy (catches syntax errors too)."""
    def verify(source):
        rep = check_source(source, op.spec)
        return ("", "") if rep.ok else ("check", rep.message)
    return verify


def aka(project, *args, env_extra=None, timeout=240):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    # these tests read the summary's figures, not its layout: wide, whatever width CI runs at
    env.update(AKA_ROOT=str(project), COLUMNS="200", **(env_extra or {}))
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=project)


def run_dir(project, out):
    run_id = re.search(r"run (\S+) \(", out).group(1)
    return project / "runs" / "scale_add" / run_id
