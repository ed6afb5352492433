"""`--backend replay --from RUN`: answer every LLM call with the recorded answers of another run.

Exchanges are matched by (attempt, call within the attempt), not by global order, so a plan
prepared ahead and discarded in the original run cannot shift every later answer. Replay makes
no network call and needs no key; its own exchanges are saved too, each noting whether the
request matched the recorded one (history figures differ between runs on a noisy machine).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aka.agent.llm.chat import LLMBackend, read_exchanges
from aka.agent.llm.wire import Reply, Request, ToolCall
from aka.config import LLMConfig, LLMSettings, load_config
from aka.errors import AkaError
from aka.records import Usage


class ReplayError(AkaError):
    """Nothing recorded to replay, or the replay asked for more than the run recorded."""


class ReplayTransport:
    provider = "replay"

    def __init__(self, runs_root: Path, run_id: str | None):
        from aka.records import find_run

        if not run_id:
            raise ReplayError("--backend replay needs --from RUN (a run id from `aka runs`)")
        self.source = find_run(runs_root, run_id)
        by_attempt: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for ex in read_exchanges(self.source):
            if ex.get("response") is not None:
                by_attempt[ex["attempt"]].append(ex)
        if not by_attempt:
            raise ReplayError(f"run {run_id} saved no LLM exchanges ({self.source / 'llm'}): nothing to replay")
        self.recorded = by_attempt
        self.used: dict[int, int] = defaultdict(int)
        self.model = next(iter(by_attempt.values()))[0]["response"].get("model", "replay")

    def complete(self, req: Request, on_text: Callable[[str], None] | None = None) -> Reply:
        k = self.used[req.attempt]
        calls = self.recorded.get(req.attempt, [])
        if k >= len(calls):
            raise ReplayError(f"replay of {self.source.name}: attempt {req.attempt} recorded {len(calls)} "
                              f"LLM calls, this run asks for call {k + 1} ({req.stage})")
        self.used[req.attempt] += 1
        ex = calls[k]
        if on_text:
            on_text(ex["response"]["text"])
        same = ex["request"].get("messages") == req.messages and ex["request"].get("system") == req.system
        calls = [ToolCall(**c) for c in ex["response"].get("tool_calls") or []]
        return Reply(ex["response"]["text"], Usage.model_validate(ex["usage"] or {}), ex["response"].get("model", ""),
                     ex["response"].get("stop_reason", ""),
                     {"replayed_from": f"{self.source.name}/llm/{ex['n']:04d}.json", "request_matches": same}, calls)


def make_backend(op=None, llm: LLMSettings | None = None, config: LLMConfig | None = None, **_: Any) -> LLMBackend:
    from aka.contract.ops import project_root

    llm = llm or LLMSettings()
    runs_root = (op.root if op is not None else project_root()) / "runs"
    return LLMBackend("replay", ReplayTransport(runs_root, llm.replay_from), op, llm, config or load_config())
