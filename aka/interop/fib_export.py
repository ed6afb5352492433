"""`aka export OP --format flashinfer-bench`: an op as a FlashInfer-Bench TraceSet folder.

What goes where (FlashInfer-Bench's layout, so `TraceSet.from_path(OUT)` reads it):
  definitions/<op_type>/<op>.json        the contract: axes, inputs (scalars too), outputs, reference
  workloads/<op_type>/<op>.jsonl         the full shape set, one workload trace per case
  blob/workloads/<op_type>/<op>/...      the index tensors (cu_seqlens, page tables) by value
  solutions/<op_type>/<op>/<name>.json   the promoted kernel (else the baseline)
  traces/<op_type>/<op>.jsonl            that kernel's recorded GPU timings with the gate's errors, one trace
                                         per case and device (aka.interop.fib_traces says what is in them)
  aka/<op>.json                          this export's manifest: case ids per uuid, notes, validation
Everything is built and validated in memory first, so a failure writes nothing.
"""

from __future__ import annotations

import ast
import json
import time
import uuid
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from aka.contract.shapes import ShapeSet
from aka.errors import AkaError
from aka.evaluate.parent.outcomes import code_hash
from aka.interop import blob, recorded
from aka.interop.axes import Dim, bind, parse_shape
from aka.interop.fib_models import (
    FIB_DTYPES,
    FIB_VERSION,
    AxisConst,
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    Trace,
    Workload,
    fib_check,
    load_fib,
)
from aka.interop.fib_traces import TRACE_EXCLUDE, build_traces

_SCALAR_DTYPES = {"float": "float32", "int": "int64", "bool": "bool"}
_BY_VALUE = ("int32", "int64")  # index tensors: their values, not just their shapes, define the workload


class ExportError(AkaError):
    """The op cannot be expressed in FlashInfer-Bench's schema (the message lists every reason)."""


class ExportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    op: str
    format: Literal["flashinfer-bench"] = "flashinfer-bench"
    out: Path = Field(description="the TraceSet root to write into (created when missing)")
    op_type: str | None = Field(None, description="FlashInfer-Bench's category (gdn, gqa_paged, ...); default: the op")
    seed: int = Field(0, description="input generator seed: shapes and index tensors of each case")


class ExportReport(BaseModel):
    """What an export wrote, and what it could not say."""

    op: str
    root: Path
    files: dict[str, str] = Field(description="record kind -> path relative to root")
    workloads: int
    blobs: int
    kernel: str = Field(description="promoted or baseline")
    kernel_path: str
    solution: str
    traces: int
    measurements: list[str] = Field(description="where each exported timing came from")
    notes: list[str]
    validation: str
    cases: dict[str, str] = Field(description="workload uuid -> aka case id")
    seconds: float = 0.0


# -- definition ----------------------------------------------------------------------------------

def _reference_source(op) -> str:
    """Our reference module plus the `run` FlashInfer-Bench calls: inputs in definition order, outputs
    cast from float64 to the declared dtypes (its checker compares at those)."""
    src = op.path("reference").read_text()
    if any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in ast.parse(src).body):
        raise ExportError(f"{op.spec.modules.reference} already defines run(); FlashInfer-Bench needs that name "
                          "for its entry: rename ours")
    spec = op.spec
    names = [t.name for t in spec.interface.inputs] + [s.name for s in spec.interface.scalars]
    dtypes = ", ".join(f"torch.{t.dtype}" for t in spec.interface.outputs)
    kwargs = ", ".join(f"{n}={n}" for n in names)
    return (src.rstrip() + "\n\n\n# -- added by `aka export`: FlashInfer-Bench calls run() with the definition's "
            "inputs in order --\nimport torch  # noqa: E402\n\n\n@torch.no_grad()\n"
            f"def run({', '.join(names)}):\n"
            f'    """aka\'s reference ({spec.modules.reference}), outputs cast to the definition\'s dtypes."""\n'
            f"    out = reference({kwargs})\n"
            "    out = out if isinstance(out, (tuple, list)) else (out,)\n"
            f"    return tuple(t.to(d) for t, d in zip(out, ({dtypes},)))\n")


def build_definition(op, op_type: str) -> tuple[Definition, dict[str, list[Dim]]]:
    spec = op.spec
    where = f"workloads/{op.name}.yaml"
    problems: list[str] = []
    dims: dict[str, list[Dim]] = {}
    tensors = [("inputs", t) for t in spec.interface.inputs] + [("outputs", t) for t in spec.interface.outputs]
    for section, t in tensors:
        try:
            dims[t.name] = parse_shape(t.shape)
        except ValueError as exc:
            problems.append(f"{where}: field 'interface.{section}.{t.name}.shape': {exc}")
        if t.dtype not in FIB_DTYPES:
            problems.append(f"{where}: field 'interface.{section}.{t.name}.dtype': {t.dtype} has no "
                            f"FlashInfer-Bench dtype (it has {', '.join(FIB_DTYPES)})")
    if problems:
        raise ExportError("\n".join(problems))
    axes: dict[str, AxisConst | AxisVar] = {}
    kinds: dict[str, str] = {}
    for name, ds in dims.items():
        for d in ds:
            if kinds.setdefault(d.axis, d.kind) != d.kind:
                raise ExportError(f"{where}: axis name {d.axis!r} stands for both a {kinds[d.axis]} and a {d.kind} "
                                  f"(in {name}'s shape); rename the dimension")
            if d.kind == "const":
                axes.setdefault(d.axis, AxisConst(type="const", value=d.value,
                                                  description=f"the literal {d.value} of aka shapes"))
            else:
                desc = f"aka shape dimension {d.text}" + (" (see constraints)" if d.kind == "expr" else "")
                axes.setdefault(d.axis, AxisVar(type="var", description=desc))
    constraints = list(dict.fromkeys(f"{d.axis} == {d.expr}" for ds in dims.values() for d in ds if d.kind == "expr"))

    def tensor(t) -> TensorSpec:  # only the fields that say something: the JSON leaves the rest out
        extra = {"description": t.layout} if t.layout else {}
        return TensorSpec(shape=[d.axis for d in dims[t.name]], dtype=t.dtype, **extra,
                          **({"optional": True} if t.optional else {}))

    inputs = {t.name: tensor(t) for t in spec.interface.inputs}
    for s in spec.interface.scalars:  # FlashInfer-Bench: a scalar is an input with no shape
        default = "None (the kernel's own default)" if s.default is None else repr(s.default)
        inputs[s.name] = TensorSpec(shape=None, dtype=_SCALAR_DTYPES[s.type],
                                    description=f"{s.doc} (scalar; aka's default: {default})".strip())
    definition = Definition(
        name=op.name, op_type=op_type, axes=axes, inputs=inputs,
        outputs={t.name: tensor(t) for t in spec.interface.outputs},
        reference=_reference_source(op), tags=["source:aka"], constraints=constraints,
        description=f"{spec.description}\n\n{spec.formula.rstrip()}")
    return definition, dims


# -- workloads -----------------------------------------------------------------------------------

def _case_uuid(op: str, case) -> str:
    # stable across exports of the same case, new when its parameters change
    # "config": the knobs' key from when cases forced CONFIG values; the name stays so exported UUIDs stay
    key = json.dumps({"op": op, "id": case.id, **case.params(), "config": case.knobs}, sort_keys=True, default=str)
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"aka:{key}"))


def build_workloads(op, definition: Definition, dims, op_type: str, seed: int
                    ) -> tuple[dict[str, Workload], dict[str, dict[str, torch.Tensor]], list[str]]:
    """Per full-set case: its workload and the index tensors to write by value."""
    spec = op.spec
    var_axes = [a for a, ax in definition.axes.items() if ax.type == "var"]
    workloads: dict[str, Workload] = {}
    blobs: dict[str, dict[str, torch.Tensor]] = {}
    absent: dict[str, list[str]] = {}
    problems: list[str] = []
    # a GPU makes the full set's inputs in seconds where the CPU takes minutes (fa4's paged pools)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for case in op.cases(ShapeSet.FULL):
        made = op.inputs.make_inputs(case, seed, device)  # the op's own generator: its shapes are the truth
        present = {k: v for k, v in made.items() if isinstance(v, torch.Tensor)}
        try:
            values = bind(dims, {k: tuple(v.shape) for k, v in present.items()})
        except ValueError as exc:
            problems.append(f"{case.id}: {exc}")
            continue
        missing = [a for a in var_axes if a not in values]
        if missing:
            problems.append(f"{case.id}: axes {missing} are pinned by no input of this case")
            continue
        wid = _case_uuid(op.name, case)
        rel = f"blob/workloads/{op_type}/{op.name}/{op.name}_{wid}.safetensors"
        inputs: dict[str, RandomInput | SafetensorsInput | ScalarInput] = {}
        by_value: dict[str, torch.Tensor] = {}
        for t in spec.interface.inputs:
            if t.name not in present:
                absent.setdefault(t.name, []).append(case.id)  # FlashInfer-Bench has no "absent" input
            elif t.dtype in _BY_VALUE:
                by_value[t.name] = present[t.name]
                inputs[t.name] = SafetensorsInput(path=rel, tensor_key=t.name)
            else:
                inputs[t.name] = RandomInput()
        for s in spec.interface.scalars:
            if s.default is not None:
                inputs[s.name] = ScalarInput(value=s.default)
        if by_value:
            blobs[rel] = by_value
        workloads[case.id] = Workload(axes={a: values[a] for a in var_axes}, inputs=inputs, uuid=wid)
        del made, present
    if problems:
        raise ExportError(f"kernels/{op.name}/inputs.py makes tensors the contract's shapes do not describe:\n"
                          + "\n".join(problems))
    notes = [f"{name}: absent in {len(ids)} case(s) ({', '.join(ids[:4])}{', ...' if len(ids) > 4 else ''}), where aka "
             "passes None; FlashInfer-Bench has no absent input and draws it at random"
             for name, ids in absent.items()]
    notes += [f"{s.name}: no value in the workloads (aka's default is None, the kernel's own); FlashInfer-Bench "
              "draws a random scalar for it" for s in spec.interface.scalars if s.default is None]
    floats = [t.name for t in spec.interface.inputs if t.dtype not in _BY_VALUE]
    notes.append(f"{', '.join(floats)}: random in FlashInfer-Bench; aka draws them from "
                 f"{spec.modules.inputs} (realistic distributions), which no workload record can express")
    return workloads, blobs, notes


# -- solution and traces -------------------------------------------------------------------------

def _imports(src: str) -> set[str]:
    """Top-level package names a module imports."""
    names: set[str] = set()
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.Import):
            names |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            names.add(n.module.split(".")[0])
    return names


def build_solution(op) -> tuple[Solution, str, Path, list[str]]:
    kernel = op.default_kernel()
    label = "baseline" if kernel == op.path("baseline") else "promoted"
    src = kernel.read_text()
    notes = []
    fn = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == op.spec.entry), None)
    order = [t.name for t in op.spec.interface.inputs] + [s.name for s in op.spec.interface.scalars]
    if fn is None:
        notes.append(f"{kernel.name} defines no top-level {op.spec.entry}(): the entry point will not resolve")
    elif [a.arg for a in fn.args.args][:len(order)] != order:
        notes.append(f"{op.spec.entry}() takes ({', '.join(a.arg for a in fn.args.args)}), not the definition's "
                     f"order ({', '.join(order)}): FlashInfer-Bench passes inputs by position")
    imports = _imports(src)
    if "aka" in imports:
        notes.append(f"{kernel.name} imports aka: the solution runs only where aka is installed")
    what = "promoted kernel" if label == "promoted" else "baseline (no promoted kernel)"
    h = code_hash(src)
    sol = Solution(
        name=f"aka_{op.name}_{label}_{h}", definition=op.name, author="aka",
        spec=BuildSpec(language="triton" if "triton" in imports else "python", target_hardware=["cuda"],
                       entry_point=f"{kernel.name}::{op.spec.entry}",
                       destination_passing_style=False),  # aka kernels return their outputs
        sources=[SourceFile(path=kernel.name, content=src)],
        description=f"aka's {what} for {op.name} ({kernel.relative_to(op.root)}, code hash {h})")
    return sol, label, kernel, notes


def _validate(records: list[tuple[str, str, str]]) -> str:
    """flashinfer-bench's own models over every record, when it is installed."""
    data, why = load_fib()
    if data is None:
        return (f"validation against flashinfer-bench's models skipped: {why} (pip install 'aka[fib]'); "
                f"written from aka's copy of its {FIB_VERSION} schema")
    problems = [f"{label}: {line}" for kind, label, text in records for line in fib_check(kind, text)]
    if problems:
        raise ExportError("flashinfer-bench rejects the export (a bug in aka's mapping):\n" + "\n".join(problems))
    from importlib import metadata

    try:  # the distribution's version: the package's own __version__ reads 0.0.0.dev0 in 0.1.2's wheel
        version = metadata.version("flashinfer-bench")
    except metadata.PackageNotFoundError:
        version = getattr(__import__("flashinfer_bench"), "__version__", "?")
    return f"every record validated against flashinfer-bench {version}'s models"


def export(op, settings: ExportSettings) -> ExportReport:
    t0 = time.monotonic()
    op_type = settings.op_type or op.name
    definition, dims = build_definition(op, op_type)
    def_notes = ([f"{op.spec.modules.reference} imports aka: the definition's reference runs only where aka is "
                  "installed"] if "aka" in _imports(op.path("reference").read_text()) else [])
    workloads, blobs, notes = build_workloads(op, definition, dims, op_type, settings.seed)
    sol, label, kernel, sol_notes = build_solution(op)
    found, rec_notes = recorded.measurements(op.root, op.name, label, kernel.read_text())
    traces, used, trace_notes = build_traces(definition, sol, workloads, found)
    rec_notes += trace_notes
    if not traces:
        rec_notes.append(f"no GPU measurement of this {label} source is recorded with a gate error figure "
                         "(promoted.json, runs/): the solution is written without traces")
    files = {"definition": f"definitions/{op_type}/{op.name}.json", "workloads": f"workloads/{op_type}/{op.name}.jsonl",
             "solution": f"solutions/{op_type}/{op.name}/{sol.name}.json",
             "traces": f"traces/{op_type}/{op.name}.jsonl", "manifest": f"aka/{op.name}.json"}
    # exclude_unset, as flashinfer-bench's own save_json_file: a scalar's "shape": null must stay
    texts = {"definition": definition.model_dump_json(indent=2, exclude_unset=True) + "\n",
             "workloads": "".join(Trace(definition=op.name, workload=w).model_dump_json() + "\n"
                                  for w in workloads.values()),
             "solution": sol.model_dump_json(indent=2, exclude_unset=True) + "\n",
             "traces": "".join(t.model_dump_json(exclude=TRACE_EXCLUDE) + "\n" for t in traces)}
    records = [(kind, files[kind], texts[kind]) for kind in ("definition", "solution")]
    for kind, key in (("workload", "workloads"), ("trace", "traces")):
        records += [(kind, f"{files[key]}:{i}", line) for i, line in enumerate(texts[key].splitlines(), 1)]
    validation = _validate(records)
    root = settings.out
    for kind in ("definition", "workloads", "solution"):
        _write(root / files[kind], texts[kind])
    if traces:
        _write(root / files["traces"], texts["traces"])
    elif (root / files["traces"]).exists():  # an earlier export's traces would describe another kernel
        (root / files["traces"]).unlink()
    for rel, tensors in blobs.items():
        blob.save(tensors, root / rel)
    if not traces:
        del files["traces"]
    report = ExportReport(op=op.name, root=root, files=files, workloads=len(workloads), blobs=len(blobs), kernel=label,
                          kernel_path=str(kernel.relative_to(op.root)), solution=sol.name, traces=len(traces),
                          measurements=used, notes=def_notes + sol_notes + notes + rec_notes, validation=validation,
                          cases={w.uuid: cid for cid, w in workloads.items()})
    report.seconds = round(time.monotonic() - t0, 2)
    _write(root / files["manifest"], report.model_dump_json(indent=2) + "\n")
    return report


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
