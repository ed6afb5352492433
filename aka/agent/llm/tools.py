"""The tools a model may call while it writes one attempt's candidate: definitions and dispatch.

Provider-agnostic: the definitions are JSON Schema (each transport wraps them in its wire format),
arguments arrive as the JSON text the model wrote, results go back as text. Names and arguments:

- ``read_file(path)``: read-only; files of kernels/<op>/, the contract workloads/<op>.yaml, wiki/;
- ``edit(search, replace)``: one search/replace on the working candidate (exactly once, as edits.py);
- ``compile()``: policy check + compile of the working candidate, per-kernel registers/spills/smem;
- ``check(shapes)``: the gate on "smoke" or "edge": verdict and first errors per output;
- ``time(shapes)``: GPU only: paired medians, working candidate vs incumbent, on up to 4 shape ids;
- ``profile(shape)``: GPU only: the working candidate's per-kernel profile on one shape;
- ``submit(note)``: hand the working candidate to the full gate and benchmark; ends the attempt.

An unknown tool, arguments that do not validate and calls past the cap are error results, never
exceptions: a model's mistake costs it a turn, not the run. ``submit`` is accepted past the cap, so
a model told it has no calls left can still hand in its work.

The plan step sends the same definitions with tool_choice none (aka.agent.llm.chat.LLMBackend.plan);
a call that a server lets through anyway goes to ``Session.before_candidate``: read_file runs, the
tools of the candidate say that they come in the next step.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aka.agent.llm.edits import Edit, EditError, apply_edits

READ_LIMIT = 24_000  # characters of one read_file result (~6k tokens): the incumbent is in the prompt already
CLIP = 300  # characters of arguments and results kept in the attempts log


class Workbench(Protocol):
    """What the loop lends the tools for the working candidate's source: (ok, text for the model)."""

    def compile(self, source: str) -> tuple[bool, str]: ...
    def check(self, source: str, shapes: str) -> tuple[bool, str]: ...
    def time(self, source: str, shapes: list[str]) -> tuple[bool, str]: ...
    def profile(self, source: str, shape: str) -> tuple[bool, str]: ...


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFileArgs(_Args):
    path: str = Field(min_length=1)


class EditArgs(_Args):
    search: str = Field(min_length=1)
    replace: str


class NoArgs(_Args):
    pass


class CheckArgs(_Args):
    shapes: Literal["smoke", "edge"]


class TimeArgs(_Args):
    shapes: list[str] = Field(min_length=1, max_length=4)

    @field_validator("shapes", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:  # "G1,G2" is what models often send for a list
        return [s.strip() for s in v.split(",") if s.strip()] if isinstance(v, str) else v


class ProfileArgs(_Args):
    shape: str = Field(min_length=1)


class SubmitArgs(_Args):
    note: str = ""


_STR = {"type": "string"}
SPECS: dict[str, tuple[type[_Args], str, dict[str, Any]]] = {
    "read_file": (ReadFileArgs, "Read a file (read-only): files under kernels/{op}/, the contract workloads/{op}.yaml, "
                  "or wiki/ (a folder lists its files). The incumbent's source is in the prompt already.",
                  {"path": {**_STR, "description": "path from the project root, e.g. wiki/ or workloads/{op}.yaml"}}),
    "edit": (EditArgs, "Replace one exact passage of the working candidate (it starts as the incumbent). The search "
             "text must start at a line's beginning and occur exactly once, whitespace included.",
             {"search": {**_STR, "description": "exact lines of the working candidate"},
              "replace": {**_STR, "description": "their replacement"}}),
    "compile": (NoArgs, "Static policy check and compile of the working candidate: errors, and per kernel "
                "registers, spills and shared memory where the machine can tell.", {}),
    "check": (CheckArgs, "Run the correctness gate on the working candidate on a shape set: the verdict and the "
              "first errors per output.",
              {"shapes": {"type": "string", "enum": ["smoke", "edge"], "description": "shape set to gate"}}),
    "time": (TimeArgs, "GPU only: paired median times of the working candidate against the incumbent on up to 4 "
             "shape ids (e.g. [\"G1\", \"G4\"]).",
             {"shapes": {"type": "array", "items": _STR, "minItems": 1, "maxItems": 4, "description": "shape ids"}}),
    "profile": (ProfileArgs, "GPU only: per-kernel profile (ncu, else the torch profiler) of the working candidate "
                "on one shape id.", {"shape": {**_STR, "description": "one shape id, e.g. G1"}}),
    "submit": (SubmitArgs, "Hand the working candidate to the full gate and benchmark. Ends the attempt.",
               {"note": {**_STR, "description": "one line: what changed and why"}}),
}
NAMES = tuple(SPECS)
READ_ONLY = ("read_file",)  # what works before there is a candidate (the plan step): it reads, it measures nothing


def definitions(op: str) -> list[dict[str, Any]]:
    """The tools as JSON Schema, the same on every call of a run (so a prompt cache keeps them)."""
    out = []
    for name, (model, doc, props) in SPECS.items():
        required = [k for k, f in model.model_fields.items() if f.is_required()]
        schema = {"type": "object", "properties": {k: {kk: (vv.format(op=op) if isinstance(vv, str) else vv)
                                                       for kk, vv in v.items()} for k, v in props.items()},
                  "required": required, "additionalProperties": False}
        out.append({"name": name, "description": doc.format(op=op), "parameters": schema})
    return out


@dataclass
class Result:
    content: str
    is_error: bool = False


@dataclass
class CallRecord:
    """One tool call as the attempts log keeps it (usage: the share of the model turn that made it)."""

    n: int
    name: str
    arguments: str
    ok: bool
    result: str
    seconds: float
    turn: int
    usage: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "name": self.name, "arguments": self.arguments[:CLIP], "ok": self.ok,
                "result": self.result[:CLIP], "seconds": self.seconds, "turn": self.turn, "usage": self.usage}


class Session:
    """One attempt's tool calls over its working candidate."""

    def __init__(self, op: str, root: Path, incumbent: str, bench: Workbench | None, cap: int):
        self.op, self.root, self.bench, self.cap = op, root, bench, cap
        self.incumbent = self.working = incumbent
        self.records: list[CallRecord] = []
        self.submitted: str | None = None  # the note, once submit was called

    @property
    def changed(self) -> bool:
        return self.working != self.incumbent

    @property
    def over_cap(self) -> int:
        return sum(1 for r in self.records if r.n > self.cap and r.name != "submit")

    def call(self, name: str, arguments: str, turn: int) -> Result:
        t0 = time.monotonic()
        n = len(self.records) + 1
        res = self._dispatch(name, arguments, n)
        self.records.append(CallRecord(n, name, arguments, not res.is_error, res.content,
                                       round(time.monotonic() - t0, 3), turn))
        return res

    def before_candidate(self, name: str, arguments: str) -> Result:
        """A call made before there is a candidate to work on (the plan step, on a server that ignores
        tool_choice none): the read-only tools run, the others say what they are for and when."""
        if name in READ_ONLY:
            return self.call(name, arguments, 0)
        if name not in SPECS:
            return Result(f"error: unknown tool {name!r}; the tools are {', '.join(NAMES)}", True)
        return Result(f"not run: {name} works on the candidate, which you write in the next step, after the plan "
                      "(the incumbent's figures, profile and compile stats are in the prompt already); answer "
                      "this step with the plan JSON", True)

    def _dispatch(self, name: str, arguments: str, n: int) -> Result:
        if self.submitted is not None:
            return Result("error: not run: the attempt was already submitted", True)
        if name not in SPECS:
            return Result(f"error: unknown tool {name!r}; the tools are {', '.join(NAMES)}", True)
        if n > self.cap and name != "submit":
            return Result(f"error: this attempt's cap of {self.cap} tool calls is reached: call submit(note) to hand "
                          "in the working candidate, or answer with edits", True)
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return Result(f"error: the arguments of {name} are not valid JSON ({exc.msg} at column {exc.colno}); "
                          f"send one JSON object", True)
        model = SPECS[name][0]
        try:
            args = model.model_validate(raw if isinstance(raw, dict) else {"": raw})
        except ValidationError as exc:
            probs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()[:3])
            want = ", ".join(SPECS[name][2]) or "no arguments"
            return Result(f"error: bad arguments for {name} ({probs}); it takes: {want}", True)
        try:
            return getattr(self, f"_{name}")(args)
        except Exception as exc:  # a tool's own failure is the model's information, not the run's end
            return Result(f"error: {name} failed: {type(exc).__name__}: {str(exc)[:400]}", True)

    # -- the tools --------------------------------------------------------------------------
    def _read_file(self, a: ReadFileArgs) -> Result:
        root = self.root.resolve()
        allowed = [root / "kernels" / self.op, root / "workloads" / f"{self.op}.yaml", root / "wiki"]
        path = (root / a.path.lstrip("/").removeprefix("./")).resolve()
        if not any(path == p or path.is_relative_to(p) for p in allowed):
            return Result(f"error: {a.path} is outside what read_file may read: kernels/{self.op}/, "
                          f"workloads/{self.op}.yaml, wiki/", True)
        if path.is_dir():
            files = sorted(str(p.relative_to(root)) for p in path.rglob("*") if p.is_file()
                           and "__pycache__" not in p.parts)
            return Result("\n".join(files[:300]) or "(empty folder)")
        if not path.is_file():
            return Result(f"error: {a.path} does not exist (read_file on a folder lists its files)", True)
        text = path.read_text(errors="replace") or "(empty file)"  # an empty tool result is refused by some APIs
        if len(text) > READ_LIMIT:
            text = text[:READ_LIMIT] + f"\n[truncated: {len(text)} characters, the first {READ_LIMIT} shown]"
        return Result(text)

    def _edit(self, a: EditArgs) -> Result:
        try:
            new = apply_edits(self.working, [Edit(a.search, a.replace)])
        except EditError as exc:
            return Result(f"error: {str(exc).removeprefix('edit 1 of 1: ')}", True)
        line = self.working[: self.working.index(a.search)].count("\n") + 1
        self.working = new
        return Result(f"applied at line {line}; the working candidate has {new.count(chr(10)) + 1} lines")

    def _need(self) -> Workbench:
        if self.bench is None:
            raise RuntimeError("no measuring stages are lent to this call (a direct backend call, not a run)")
        return self.bench

    def _bench(self, ok_text: tuple[bool, str]) -> Result:
        ok, text = ok_text
        return Result(text if ok else f"error: {text}", not ok)

    def _compile(self, a: NoArgs) -> Result:
        return self._bench(self._need().compile(self.working))

    def _check(self, a: CheckArgs) -> Result:
        return self._bench(self._need().check(self.working, a.shapes))

    def _time(self, a: TimeArgs) -> Result:
        return self._bench(self._need().time(self.working, a.shapes))

    def _profile(self, a: ProfileArgs) -> Result:
        return self._bench(self._need().profile(self.working, a.shape))

    def _submit(self, a: SubmitArgs) -> Result:
        self.submitted = a.note
        return Result("submitted: the working candidate goes to the full gate and benchmark")
