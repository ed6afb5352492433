"""Stand-in models the fake servers play for the tools tests: deterministic, answering by what is asked."""

from __future__ import annotations

import json
import re

from answers_text import GOOD_PLAN
from fake_servers import Answer, Call, tool_results, user_text


def first_user(body) -> str:
    return user_text(next(m for m in body["messages"] if m["role"] == "user"))


def is_plan(body) -> bool:
    return "Plan the next candidate" in first_user(body)


class ToolModel:
    """Plans with `plan`, then writes the candidate with one tool call a turn from `calls` (a list, or a
    function of the results so far); after the last it answers `final` (text)."""

    def __init__(self, calls, plan: str = GOOD_PLAN, final: str = "done"):
        self.calls, self.plan, self.final = calls, plan, final

    def __call__(self, body):
        if is_plan(body):
            return self.plan
        done = tool_results(body)
        calls = self.calls(body, done) if callable(self.calls) else self.calls
        return Answer(calls=[calls[len(done)]]) if len(done) < len(calls) else Answer(self.final)


def toy_calls(block: int = 256) -> list[Call]:
    """read_file, edit, compile, check, submit on the toy op scale_add."""
    return [Call("read_file", {"path": "workloads/scale_add.yaml"}),
            Call("edit", {"search": 'CONFIG = {"BLOCK": 128}', "replace": f'CONFIG = {{"BLOCK": {block}}}'}),
            Call("compile"), Call("check", {"shapes": "smoke"}), Call("submit", {"note": f"BLOCK {block}"})]


class IdeaModel:
    """Deterministic planner over fixed one-line edits (name, search line, replacement): it plans the
    first idea whose name the plan prompt's 'This run so far' does not mention (measured or in flight)
    and writes it as one SEARCH/REPLACE block, or with `tools` as read_file (the contract), edit,
    compile, check and submit. A prompt that hides the candidate being measured makes it plan that
    candidate again."""

    def __init__(self, op: str, ideas: list[tuple[str, str, str]], tools: bool = False):
        self.op, self.ideas, self.tools = op, {n: (s, r) for n, s, r in ideas}, tools

    def __call__(self, body):
        text = first_user(body)
        if is_plan(body):
            history = text.split("## This run so far", 1)[1].split("## Measured noise", 1)[0]
            name = next(n for n in self.ideas if n not in history)
            return "```json\n" + json.dumps({"hypothesis": f"try {name}"}) + "\n```"
        name = re.search(r'"hypothesis": "try ([^"]+)"', text).group(1)
        search, replace = self.ideas[name]
        if not self.tools:
            return f"One line.\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"
        calls = [Call("read_file", {"path": f"workloads/{self.op}.yaml"}),
                 Call("edit", {"search": search, "replace": replace}), Call("compile"),
                 Call("check", {"shapes": "smoke"}), Call("submit", {"note": name})]
        done = tool_results(body)
        return Answer(calls=[calls[len(done)]]) if len(done) < len(calls) else Answer("done")
