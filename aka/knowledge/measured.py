"""What earlier runs measured, kept beside the op's patterns: kernels/<op>/knowledge.json (issue 36).

Every run used to spend its first candidates on the offline search's first look at structures the
repository's own runs had already measured slower on the same device: on the H200 (2026-12-02 and
-03, gdn_prefill) single_pass 0.80-0.82x, split_context_parallel 0.63-0.66x and split_single_pass
0.53-0.58x, run after run (docs/perf/gdn_prefill.md, docs/perf/ray.md). A run's GPU-timed attempts
are recorded here (record_run), and the offline search (aka.agent.llm.offline) and the prompts
(knowledge_lines) read them back.

An entry applies only where it was measured: the same device model, the same ranked timing (the
op's rank_timing: "eager" or "graph"), the same incumbent (code_hash of its source) and the same
template code. The template's hash is template_hash(): the code_hash of the source with its module-level
CONFIG statement left out. A candidate the offline search renders is its template with only that
statement replaced, so the candidate file a run kept and the template it was rendered from hash
alike: a run recorded later still carries the hash of the code it actually measured, and an edit
of the template anywhere but its CONFIG makes the entries stale (not applied), never wrong. Code
written by hand or by an LLM under a pattern's name hashes differently and so never applies.

Code edited by hand (not promoted) is another incumbent: every entry against the code before it
stops applying. Most of them rightly so (a parameter's effect is specific to the code it was
measured on), but a structure whose first look lost against several kernels in a row is likely to
lose against the next one too: on the H200 (2026-12-07) a gdn_prefill run spent its first
candidate on single_pass's first look, 0.506x, after it had measured 0.73x and 0.614x against two
earlier incumbents. So the entries on this device model in this timing against code outside the
incumbent's chain (Knowledge.stale) defer a structure's first look (deferred()): when its first
looks there (not failed) span at least DEFER_AFTER incumbents and every one lost, and no applicable
entry of it did not lose. The offline search then takes that first look only when nothing else is
left (aka.agent.search, `deferred`); the prompts get one line per such structure, labelled as
measured against earlier code. Stale parameter entries restrict nothing.

Interpreter timings are never recorded: only ratios timed on a GPU (the ABBA re-measure's geomean
where there was one, else the screen's paired ratio to the incumbent).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aka.contract.files import write_atomic
from aka.contract.module_config import config_of, config_span
from aka.errors import AkaError
from aka.evaluate.parent.outcomes import code_hash
from aka.records import Attempt, RunRecord, RunRecordError, read_attempts, read_run_record

FILE = "knowledge.json"
VERSION = 1
# a ratio at or below this is a loss: 10% or more slower than the incumbent (aka.agent.search's LOSS)
LOSS = 0.9
# distinct earlier incumbents a structure's first look must have lost against to be deferred: one loss
# against other code may be that code's, two in a row are the structure's (module docstring)
DEFER_AFTER = 2


class KnowledgeError(AkaError):
    """A knowledge.json that cannot be read, or a run whose records cannot be turned into entries."""


class Entry(BaseModel):
    """What one structure or value measured against one incumbent on one device model."""

    model_config = ConfigDict(extra="forbid")
    device: str = Field(description="device model name, as run.json records it (e.g. 'NVIDIA H200')")
    timing: Literal["eager", "graph"] = Field(description="the op's rank timing the ratio was measured in")
    structure: str = Field(description="the pattern (structure) the candidate was rendered from")
    phase: Literal["structure", "parameters"] = Field(
        "parameters", description="'structure': the search's first look at it; 'parameters': a mutation")
    config: dict[str, Any] = Field(description="the candidate's full CONFIG")
    changes: dict[str, Any] = Field(description="the keys it changed relative to the incumbent's CONFIG, new values")
    ratio: float = Field(gt=0, description="candidate speed / incumbent speed (>1 faster)")
    measure: Literal["abba", "paired", "screen"] = Field(
        description="abba: the interleaved re-measure's geomean; paired: the screen's ratio to the incumbent "
        "timed beside it; screen: the screen against the set-up's incumbent figures")
    incumbent_hash: str = Field(description="code_hash of the incumbent it was compared with")
    template_hash: str = Field(description="template_hash of the code the candidate depends on")
    run_id: str
    attempt: int
    date: str = Field(description="when the attempt started, ISO 8601")
    failed: str = Field("", description="a stage it failed after being timed (the full-set gate), '' if none")
    blocked_by: str = Field("", description="the shape whose slowdown refused it although faster overall")

    @property
    def key(self) -> tuple[str, ...]:
        """Two entries with one key measured the same thing: the newer one replaces the older."""
        return (self.device, self.timing, self.incumbent_hash, self.template_hash, self.structure,
                _canon(self.config))

    @property
    def lost(self) -> bool:
        """Measured 10% or more slower than the incumbent (and not failed: that is another story)."""
        return not self.failed and self.ratio <= LOSS

    def what(self) -> str:
        """'single_pass (structure)' or 'context_parallel BV=32, fwd_warps=8'."""
        if self.phase == "structure" or not self.changes:
            return f"{self.structure} (structure)"
        return f"{self.structure} " + ", ".join(f"{k}={v}" for k, v in self.changes.items())

    def note(self, chained: bool = False) -> str:
        """One line for a plan's `avoided` list and rationale (`chained`: measured against a kernel this
        incumbent replaced, the ratio carried over through the promotions' re-measures)."""
        what = self.structure if self.phase == "structure" else self.what()
        tail = f"; failed {self.failed}" if self.failed else ""
        vs = "this incumbent (chained from the kernel it replaced)" if chained else "this incumbent"
        return (f"known: {what} {self.ratio:.2f}x vs {vs} on {self.device} ({self.timing}), "
                f"run {self.run_id} attempt {self.attempt}{tail}")


class Promotion(BaseModel):
    """One incumbent replacing another on a device model: the ABBA geomean of new over previous."""

    model_config = ConfigDict(extra="forbid")
    device: str
    timing: Literal["eager", "graph"]
    incumbent_hash: str = Field(description="code_hash of the promoted kernel")
    previous_hash: str = Field(description="code_hash of the kernel it replaced")
    ratio: float = Field(gt=0, description="promoted speed / previous speed (the ABBA re-measure's geomean)")
    run_id: str
    attempt: int


class Knowledge(BaseModel):
    """kernels/<op>/knowledge.json: every recorded entry, newest per key, and the promotions that chain
    one incumbent to the next."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = VERSION
    op: str = ""
    entries: list[Entry] = Field(default_factory=list)
    promotions: list[Promotion] = Field(default_factory=list)

    def ancestry(self, device: str, timing: str, incumbent_hash: str) -> dict[str, float]:
        """{incumbent hash: how many times faster the given incumbent is than it}: itself (1.0) and every
        kernel it replaced through recorded promotions on this device, in this timing."""
        back = {p.incumbent_hash: p for p in self.promotions if p.device == device and p.timing == timing}
        out, h, gain = {incumbent_hash: 1.0}, incumbent_hash, 1.0
        while h in back and back[h].previous_hash not in out:
            gain *= back[h].ratio
            h = back[h].previous_hash
            out[h] = gain
        return out

    def applicable(self, device: str, timing: str, incumbent_hash: str,
                   incumbent_config: dict[str, Any] | None = None) -> list[Entry]:
        """Entries measured on this device model, in this timing, against this incumbent or one it
        replaced. An entry against an earlier incumbent is chained: its ratio divided by how much faster
        the current one is (the promotions' ABBA geomeans), its changes recomputed against
        `incumbent_config` when given. Without that chain, every promotion made the knowledge of the runs
        before it useless: on the H200 (2026-12-03) a promotion of +2% would have had the next run take a
        first look again at structures measured 0.44-0.73x the kernel it replaced."""
        gains = self.ancestry(device, timing, incumbent_hash)
        out = []
        for e in self.entries:
            if e.device != device or e.timing != timing or e.incumbent_hash not in gains:
                continue
            if e.incumbent_hash != incumbent_hash:
                update: dict[str, Any] = {"ratio": e.ratio / gains[e.incumbent_hash]}
                if incumbent_config is not None:
                    update["changes"] = changes_from(incumbent_config, e.config)
                e = e.model_copy(update=update)
            out.append(e)
        return out

    def stale(self, device: str, timing: str, incumbent_hash: str) -> list[Entry]:
        """Entries measured on this device model, in this timing, against code that is neither this
        incumbent nor one it replaced through recorded promotions: what applicable() leaves out because
        the code changed otherwise (by hand). Only deferred() reads them."""
        gains = self.ancestry(device, timing, incumbent_hash)
        return [e for e in self.entries if e.device == device and e.timing == timing and e.incumbent_hash not in gains]


def deferred(stale: Iterable[Entry], applicable: Iterable[Entry] = ()) -> dict[str, list[Entry]]:
    """Structure -> its stale first looks, slowest first, for every structure whose first look they defer
    (pure; module docstring): among its `stale` entries of phase "structure" that did not fail, at least
    DEFER_AFTER distinct incumbents and a loss against every one, and none of its `applicable` entries
    measured and not lost. Stale parameter entries play no part."""
    cleared = {e.structure for e in applicable if not e.failed and not e.lost}
    looks: dict[str, list[Entry]] = {}
    for e in stale:
        if e.phase == "structure" and not e.failed:
            looks.setdefault(e.structure, []).append(e)
    out = {}
    for name in sorted(looks):
        es = looks[name]
        if name in cleared or not all(e.lost for e in es) or len({e.incumbent_hash for e in es}) < DEFER_AFTER:
            continue
        out[name] = sorted(es, key=lambda e: (e.ratio, e.date, e.run_id, e.attempt))
    return out


def deferred_note(structure: str, looks: list[Entry]) -> str:
    """One line for a plan's `avoided` list naming a deferred structure's stale first looks, e.g.
    'stale: single_pass (structure) 0.61x, 0.73x vs earlier code (2 earlier kernels, not this incumbent)
    on NVIDIA H200 (graph), runs 20261205-123114-a50f69 attempt 0, 20261203-190814-60434b attempt 0'."""
    ratios = ", ".join(f"{x.ratio:.2f}x" for x in looks)
    runs = ", ".join(dict.fromkeys(f"{x.run_id} attempt {x.attempt}" for x in looks))
    return (f"stale: {structure} (structure) {ratios} vs earlier code ({_kernels(looks)}) on {looks[0].device} "
            f"({looks[0].timing}), runs {runs}")


def _kernels(looks: list[Entry]) -> str:
    return f"{len({x.incumbent_hash for x in looks})} earlier kernels, not this incumbent"


# -- reading ----------------------------------------------------------------------------------------


def knowledge_path(kernel_dir: Path | str) -> Path:
    return Path(kernel_dir) / FILE


def read_knowledge(path: Path | str) -> Knowledge:
    """The file's knowledge; empty for a missing or empty file, one clear line for a malformed one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Knowledge()
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not text.strip():
        return Knowledge()
    try:
        return Knowledge.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        why = f"not JSON (line {exc.lineno}: {exc.msg})"
    except ValidationError as exc:
        e = exc.errors()[0]
        why = f"{'.'.join(map(str, e.get('loc', ()))) or 'file'}: {e.get('msg', '')}"[:200]
    raise KnowledgeError(f"{path}: not a knowledge file ({why}); fix it or delete it "
                         "(`aka optimize --record-knowledge` writes it again from the runs)")


# -- code identity ----------------------------------------------------------------------------------


def template_hash(source: str) -> str:
    """code_hash of the source without its CONFIG statement (the whole source when it has none): a
    rendered candidate and its template hash alike, whatever CONFIG each holds."""
    span = config_span(source)
    if span is None:
        return code_hash(source)
    lines = source.splitlines(keepends=True)
    return code_hash("".join(lines[: span[0] - 1]) + "CONFIG = ...\n" + "".join(lines[span[1]:]))


def templates(kernel_dir: Path | str) -> dict[str, Path]:
    """Structure name -> template file, from kernels/<op>/patterns/*.yaml (the baseline when there is
    no pattern library, as aka.agent.llm.offline reads it). Files it cannot read are left out."""
    kdir = Path(kernel_dir)
    files = sorted((kdir / "patterns").glob("*.yaml")) if (kdir / "patterns").is_dir() else []
    if not files:
        return {"baseline": kdir / "baseline.py"}
    out = {}
    for f in files:
        try:
            raw = yaml.safe_load(f.read_text()) or {}
            out[str(raw["name"])] = (f.parent / raw["template"]).resolve()
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            continue
    return out


def template_hashes(kernel_dir: Path | str) -> dict[str, str]:
    """Structure name -> template_hash of its template as it is now (unreadable templates left out)."""
    out = {}
    for name, path in templates(kernel_dir).items():
        try:
            out[name] = template_hash(path.read_text())
        except OSError:
            continue
    return out


# -- writing ----------------------------------------------------------------------------------------


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def changes_from(incumbent: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The (key, new value) pairs of `config` that differ from the incumbent's CONFIG."""
    return {k: v for k, v in config.items() if k not in incumbent or _canon(incumbent[k]) != _canon(v)}


def measured_ratio(rec: Attempt) -> tuple[float, str] | None:
    """(ratio to the incumbent, how it was measured), GPU timings only: the ABBA geomean when the
    re-measure ran cleanly, else the screen's ratio; None for an attempt not timed on a GPU."""
    c = rec.compare
    if c is not None and c.timing == "gpu" and not c.error and c.geomean:
        return float(c.geomean), "abba"
    b = rec.bench
    if b is not None and b.timing == "gpu" and b.vs_incumbent:
        return float(b.vs_incumbent), "paired" if b.paired else "screen"
    return None


def entry_from(rec: Attempt, run: RunRecord, incumbent_config: dict[str, Any], candidate_source: str,
               incumbent_hash: str | None = None) -> Entry | None:
    """The entry one finished attempt makes, or None (pure).

    `run` is the run's run.json; `incumbent_config` and `incumbent_hash` describe the incumbent the
    attempt was compared with (default hash: the run's starting incumbent); `candidate_source` is the
    code that was measured (candidates/<n>.py). None for: an interpreter run, an attempt without a
    pattern (not the offline search's), not timed on a GPU, or code that is no rendered template.
    """
    device = run.device
    if device.interpreter or not device.name:
        return None
    if not (rec.plan and rec.plan.pattern):
        return None
    got = measured_ratio(rec)
    config = config_of(candidate_source)
    if got is None or config is None:
        return None
    ratio, how = got
    failed = rec.failed_stage or ("bench" if rec.measurements and rec.measurements.bench_error else "")
    return Entry(
        device=device.name,
        timing=run.baseline.rank_timing or "eager",
        structure=rec.plan.pattern,
        phase="structure" if rec.plan.structural_change else "parameters",
        config=config,
        changes=changes_from(incumbent_config, config),
        ratio=ratio,
        measure=how,
        incumbent_hash=incumbent_hash or run.incumbent.hash,
        template_hash=template_hash(candidate_source),
        run_id=run.run_id,
        attempt=rec.n,
        date=rec.started or run.started,
        failed=failed,
        blocked_by=rec.decision.blocked_by if rec.decision else "",
    )


def entries_of_run(run_dir: Path | str) -> list[Entry]:
    """Every GPU-timed entry of one run directory (runs/<op>/<run-id>/), in attempt order.

    Each attempt is attributed to the incumbent in place when it was recorded: the run's starting
    one (candidates/incumbent.py), then each promoted candidate (candidates/<n>.py). An attempt may
    carry an `incumbent_hash` of its own (an extra field of the log); that one is used then.
    """
    run_dir = Path(run_dir)
    run = _run_of(run_dir)
    if not run.run_id:
        run.run_id = run_dir.name
    if run.device.interpreter or not run.device.name:
        return []  # interpreter timings are never knowledge
    cands = run_dir / "candidates"
    start = cands / "incumbent.py"
    if not start.is_file():
        start = Path(run.incumbent.path)
    try:
        inc_source = start.read_text()
    except OSError:
        raise KnowledgeError(f"{run_dir}: the run's incumbent ({start}) cannot be read; its attempts' changes "
                             "relative to it are unknown") from None
    inc_hash, inc_config = run.incumbent.hash, config_of(inc_source) or {}
    configs = {inc_hash: inc_config}
    out = []
    for rec in read_attempts(run_dir):
        path = cands / f"{rec.n}.py"
        source = path.read_text() if path.is_file() else None
        own = (rec.model_extra or {}).get("incumbent_hash")
        if source is not None:
            h = own if own in configs else inc_hash
            e = entry_from(rec, run, configs[h], source, h)
            if e is not None:
                out.append(e)
        if rec.promoted and source is not None:
            inc_hash = rec.code_hash or code_hash(source)
            configs[inc_hash] = config_of(source) or {}
    return out


def _run_of(run_dir: Path) -> RunRecord:
    try:
        return read_run_record(run_dir)
    except RunRecordError as exc:
        raise KnowledgeError(f"{run_dir}: run.json cannot be read ({exc})") from None


def promotions_of_run(run_dir: Path | str) -> list[Promotion]:
    """The promotions one GPU run made, each with its ABBA geomean over the kernel it replaced."""
    run_dir = Path(run_dir)
    run = _run_of(run_dir)
    device = run.device
    if device.interpreter or not device.name:
        return []
    timing = run.baseline.rank_timing or "eager"
    out, prev = [], run.incumbent.hash
    for rec in read_attempts(run_dir):
        got = measured_ratio(rec)
        if rec.promoted and rec.code_hash and got is not None and got[1] == "abba":
            out.append(Promotion(device=device.name, timing=timing, incumbent_hash=rec.code_hash,
                                 previous_hash=prev, ratio=got[0], run_id=run.run_id or run_dir.name,
                                 attempt=rec.n))
            prev = rec.code_hash
    return out


def _newer(a: Entry, b: Entry) -> bool:
    return (a.date, a.run_id, a.attempt) >= (b.date, b.run_id, b.attempt)


def record(path: Path | str, entries: Iterable[Entry], op: str = "", promotions: Iterable[Promotion] = ()) -> int:
    """Merge entries into the knowledge file (created when missing): per key the newest measurement
    stays. Returns how many of `entries` the file holds afterwards. Locked against a concurrent writer
    (another run of the op recording at the same time); written atomically."""
    path = Path(path)
    entries = [e if isinstance(e, Entry) else Entry.model_validate(e) for e in entries]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        k = read_knowledge(path)
        merged = {e.key: e for e in k.entries}
        kept = 0
        for e in entries:
            old = merged.get(e.key)
            if old is None or _newer(e, old):
                merged[e.key] = e
                kept += 1
        rows = sorted(merged.values(), key=lambda e: (e.device, e.timing, e.incumbent_hash, e.structure,
                                                      e.phase != "structure", e.date, e.attempt))
        chain = {(p.device, p.timing, p.incumbent_hash): p for p in [*k.promotions, *promotions]}
        _write(path, Knowledge(op=op or k.op, entries=rows, promotions=list(chain.values())))
        return kept
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write(path: Path, k: Knowledge) -> None:
    """One entry per line (fields in the model's order, CONFIG in the template's): a new measurement
    is a one-line diff."""
    lines = [json.dumps(e.model_dump(mode="json"), separators=(", ", ": "), default=str)
             for e in k.entries]
    body = ",\n".join(f"  {line}" for line in lines)
    chain = ",\n".join("  " + json.dumps(p.model_dump(mode="json"), separators=(", ", ": ")) for p in k.promotions)
    head = f'{{"version": {k.version}, "op": {json.dumps(k.op)}, "entries": '
    entries = f"[\n{body}\n]" if lines else "[]"
    promotions = f"[\n{chain}\n]" if k.promotions else "[]"
    text = f'{head}{entries}, "promotions": {promotions}}}\n'
    write_atomic(path, text)


def kernel_dir_of(op: Any, root: Path | None = None) -> Path:
    """kernels/<op>/ of an Op (aka.contract.ops), an op name, or that folder itself."""
    if hasattr(op, "path"):
        return op.path("baseline").parent
    if isinstance(op, str) and os.sep not in op:
        from aka.contract.ops import get_op

        return get_op(op, root).path("baseline").parent
    return Path(op)


def record_run(run: Any, op: Any, root: Path | None = None) -> int:
    """Merge a finished run's GPU-timed entries into kernels/<op>/knowledge.json; returns how many.

    `run`: the run directory (runs/<op>/<run-id>/) or a RunStore (anything with `.path`); `op`: the
    Op, its name (resolved under `root`, default the project's) or its kernel folder. An interpreter
    run records nothing and leaves the file untouched.
    """
    run_dir = Path(getattr(run, "path", run))
    entries = entries_of_run(run_dir)
    if not entries:
        return 0
    kdir = kernel_dir_of(op, root)
    return record(knowledge_path(kdir), entries, op=getattr(op, "name", "") or kdir.name,
                  promotions=promotions_of_run(run_dir))


# -- for the prompts --------------------------------------------------------------------------------


def knowledge_lines(op_dir: Path | str, device_model: str, timing: str, incumbent_hash: str,
                    incumbent_config: dict[str, Any] | None = None) -> list[str]:
    """Short lines of what earlier runs measured against this incumbent on this device model in this
    timing, e.g. 'single_pass (structure): 0.82x vs the incumbent, NVIDIA H200, graph'. Entries whose
    template changed since (or whose pattern is gone) are left out. First looks at structures first,
    then by ratio, slowest first; after them one line per structure whose first looks lost against
    earlier code (deferred()), e.g. 'single_pass (structure): 0.61x, 0.73x vs earlier code (2 earlier
    kernels, not this incumbent), NVIDIA H200, graph'."""
    k = read_knowledge(knowledge_path(op_dir))
    entries = k.applicable(device_model, timing, incumbent_hash, incumbent_config)
    current = template_hashes(op_dir)
    entries = [e for e in entries if current.get(e.structure) == e.template_hash]
    entries.sort(key=lambda e: (e.phase != "structure", e.ratio, e.structure))
    out = []
    for e in entries:
        tail = f" (failed {e.failed})" if e.failed else f" (refused for {e.blocked_by})" if e.blocked_by else ""
        out.append(f"{e.what()}: {e.ratio:.2f}x vs the incumbent, {e.device}, {e.timing}{tail}")
    # after the first looks that apply: the structures whose first looks lost against earlier code
    stale = [f"{name} (structure): {', '.join(f'{x.ratio:.2f}x' for x in looks)} vs earlier code "
             f"({_kernels(looks)}), {device_model}, {timing}"
             for name, looks in deferred(k.stale(device_model, timing, incumbent_hash), entries).items()
             if name in current]
    firsts = sum(e.phase == "structure" for e in entries)
    return out[:firsts] + stale + out[firsts:]
