"""`aka import DEFINITION.json`: draft workloads/<op>.yaml from a FlashInfer-Bench definition.

What maps: the interface (inputs with shapes, shape-less inputs as scalars, outputs, dtypes, the
`optional` flag), the formula (the definition's description, constraints, constant axes and reference
code, as text), the var axes as case parameters, and, from a workloads file, one full-set case per
distinct set of axis values. What aka needs and a definition does not say is drafted and marked DRAFT
in the file (tolerances, the torch calls a candidate may make, the modules, interpreter-sized smoke and
edge cases). Anything that cannot be mapped fails the import with one line per field, all of them.
The draft is checked by aka's own contract loader before it is written.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aka.contract.spec import DTYPES, load_contract
from aka.errors import AkaError, ContractError
from aka.interop.fib_models import FIB_VERSION, Definition, Trace, error_lines, fib_check, load_fib

_OP_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SCALAR_TYPES = {"bool": "bool", **{d: "int" for d in ("int64", "int32", "int16", "int8")}}  # else float
# drafted glue a candidate may call: allocation and views only (review against the kernel's needs)
DRAFT_TORCH = ["empty", "empty_like", "zeros", "zeros_like", "full", "arange", "device", "dtype", "Size", "Tensor",
               "is_tensor", "no_grad", "inference_mode", "cuda", "float32", "bfloat16", "float16", "int32", "int64",
               "bool"]
DRAFT_METHODS = ["view", "reshape", "contiguous", "stride", "size", "numel", "dim", "to", "data_ptr", "is_contiguous",
                 "element_size", "new_empty", "unsqueeze", "squeeze", "transpose", "permute", "get_device"]


class ImportProblems(AkaError):
    """Fields of a FlashInfer-Bench definition (or its workloads) that have no aka counterpart."""

    def __init__(self, source: Path, lines: list[str]):
        self.lines = lines
        super().__init__(f"{source}: {len(lines)} field(s) cannot be mapped to an aka contract (listed above); "
                         "fix them in the definition or write the contract by hand")


class ImportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    definition: Path
    workloads: Path | None = Field(None, description="its workloads JSONL; default: found beside it in a TraceSet")
    out: Path | None = Field(None, description="a folder (the contract is <name>.yaml in it) or a NAME.yaml file, "
                             "whose stem then names the op; default: workloads/<name>.yaml of the project")
    force: bool = Field(False, description="overwrite an existing contract")
    name: str | None = Field(None, description="the op name, when the definition's is not one")


class Draft(BaseModel):
    name: str
    text: str
    workloads_file: Path | None
    cases: int
    drafted: list[str]
    not_carried: list[str]
    validation: str


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise AkaError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise AkaError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None


def find_workloads(def_path: Path, raw: dict[str, Any]) -> Path | None:
    """<root>/workloads/<op_type>/<name>.jsonl beside <root>/definitions/<op_type>/<name>.json."""
    name, op_type = raw.get("name"), raw.get("op_type")
    if not isinstance(name, str):
        return None
    for parent in def_path.resolve().parents:
        if parent.name == "definitions":
            hits = [parent.parent / "workloads" / str(op_type) / f"{name}.jsonl"]
            hits += sorted((parent.parent / "workloads").rglob(f"{name}.jsonl"))
            return next((h for h in hits if h.is_file()), None)
    return None


# -- checks ----------------------------------------------------------------------------------------

def _mapping_problems(raw: dict[str, Any], name: str, skip: set[str]) -> list[tuple[str, str]]:
    """(field, problem) for what aka's contract cannot say; fields in `skip` already failed the schema."""
    out: list[tuple[str, str]] = []
    axes = raw.get("axes") if isinstance(raw.get("axes"), dict) else {}
    if not _OP_NAME.match(name):
        out.append(("name", f"{name!r} is not an aka op name (lowercase letters, digits and _); pass --name NAME"))
    var = [n for n, a in axes.items()
           if isinstance(a, dict) and a.get("type", "const" if "value" in a else "var") == "var"]
    if axes and not var:
        out.append(("axes", "no var axis: aka's shape cases need at least one parameter"))
    for n in var:  # var axes become case parameters: keyword names beside a case's id, note and config
        if not str(n).isidentifier() or n in ("id", "note", "config"):
            out.append((f"axes.{n}", "cannot name a case parameter (a Python identifier other than id, note, config)"))
    sections = {s: raw.get(s) if isinstance(raw.get(s), dict) else {} for s in ("inputs", "outputs")}
    for section, tensors in sections.items():
        for tname, t in tensors.items():
            if not isinstance(t, dict):
                continue
            if not str(tname).isidentifier():
                out.append((f"{section}.{tname}", "not a Python identifier: aka passes tensors by keyword"))
            shape, dtype = t.get("shape"), t.get("dtype")
            if shape is None and section == "outputs":
                out.append((f"{section}.{tname}.shape", "a scalar output: aka's outputs are tensors"))
            elif shape is not None and dtype not in DTYPES:
                out.append((f"{section}.{tname}.dtype", f"{dtype} has no aka dtype (aka has {', '.join(DTYPES)})"))
            for axis in shape if isinstance(shape, list) else []:
                if axis not in axes:
                    out.append((f"{section}.{tname}.shape", f"axis {axis!r} is not in axes"))
    for both in set(sections["inputs"]) & set(sections["outputs"]):
        out.append((f"outputs.{both}", "also an input: aka's inputs and outputs are distinct keyword names"))
    ref = raw.get("reference")
    if isinstance(ref, str) and ref:
        try:
            if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in ast.parse(ref).body):
                out.append(("reference", "defines no top-level run(): not a FlashInfer-Bench reference"))
        except SyntaxError as exc:
            out.append(("reference", f"not valid Python (line {exc.lineno}: {exc.msg})"))
    for i, c in enumerate(raw.get("constraints") or []):
        try:
            ast.parse(str(c), mode="eval")
        except SyntaxError:
            out.append((f"constraints.{i}", f"{c!r} is not a Python expression"))
    return [(f, p) for f, p in out if f not in skip]


def _workload_problems(path: Path, name: str, var_axes: list[str]) -> tuple[list[dict[str, int]], list[str],
                                                                           list[str]]:
    """Axis values per workload line, the problems, and what the lines say that a case cannot."""
    cases: list[dict[str, int]] = []
    problems: list[str] = []
    uuids: list[str] = []
    by_value = 0
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        return [], [f"{path}: cannot read: {exc.strerror}"], []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            t = Trace.model_validate_json(line)
        except ValidationError as exc:
            problems += [f"{path}:{i}: {e}" for e in error_lines(exc)]
            continue
        if t.definition != name:
            problems.append(f"{path}:{i}: field 'definition': {t.definition!r}, not this definition's {name!r}")
            continue
        missing = [a for a in var_axes if a not in t.workload.axes]
        unknown = [a for a in t.workload.axes if a not in var_axes]
        if missing:
            problems.append(f"{path}:{i}: field 'workload.axes': no value for var axes {missing}")
        if unknown:
            problems.append(f"{path}:{i}: field 'workload.axes': {unknown} are not var axes of the definition")
        if missing or unknown:
            continue
        by_value += sum(1 for s in t.workload.inputs.values() if s.type != "random")
        cases.append({a: t.workload.axes[a] for a in var_axes})
        uuids.append(t.workload.uuid)
    lost = [f"workload inputs given by value ({by_value} safetensors or scalar inputs): aka's cases carry shapes, "
            "its inputs module draws the data"] if by_value else []
    return [dict(c, _uuid=u) for c, u in zip(cases, uuids)], problems, lost


# -- the draft -------------------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    pass


class _Flow(dict):
    """A mapping written on one line, as the hand-written contracts write tensors and cases."""


class _FlowList(list):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
    if "\n" not in s:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s)
    # a literal block, which YAML allows only without trailing blanks (they would force a quoted string)
    text = "\n".join(line.rstrip() for line in s.expandtabs(4).rstrip().splitlines()) + "\n"
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")


_Dumper.add_representer(str, _str)
_Dumper.add_representer(_Flow, lambda d, m: d.represent_mapping("tag:yaml.org,2002:map", m, flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=200)


def _shape_text(shape: list[str], consts: dict[str, int]) -> str:
    return "[" + ", ".join(str(consts[a]) if a in consts else a for a in shape) + "]"


def build(raw: dict[str, Any], name: str, workloads: list[dict[str, int]], source: Path) -> tuple[str, list[str]]:
    """The contract's YAML text and the fields it drafted."""
    d = Definition.model_validate(raw)
    consts = {a: ax.value for a, ax in d.axes.items() if ax.type == "const"}
    var_axes = [a for a, ax in d.axes.items() if ax.type == "var"]
    desc = (d.description or "").strip()
    formula = "\n".join(filter(None, [
        desc or f"FlashInfer-Bench definition {d.name}",
        "Constant axes: " + ", ".join(f"{a} = {v}" for a, v in consts.items()) if consts else "",
        "Constraints: " + "; ".join(d.constraints) if d.constraints else "",
        f"Reference (FlashInfer-Bench's run(), from {source.name}):", d.reference.rstrip()]))
    tensors = {"inputs": [], "scalars": [], "outputs": []}
    for section in ("inputs", "outputs"):
        for tname, t in getattr(d, section).items():
            if t.shape is None:
                tensors["scalars"].append(_Flow(name=tname, type=_SCALAR_TYPES.get(t.dtype, "float"), default=None,
                                                doc=t.description or ""))
                continue
            spec = _Flow(name=tname, shape=_shape_text(t.shape, consts), dtype=t.dtype)
            if t.description:
                spec["layout"] = t.description
            if t.optional:
                spec["optional"] = True
            tensors[section].append(spec)
    full = [_Flow(id=f"W{i}", **{a: c[a] for a in var_axes}, note=f"FlashInfer-Bench workload {c['_uuid']}")
            for i, c in enumerate(workloads, 1)]
    small = min(full, key=lambda c: (math.prod(max(c[a], 1) for a in var_axes), [c[a] for a in var_axes]))
    head = {"name": name, "description": (desc.splitlines() or [f"{d.name} (FlashInfer-Bench)"])[0][:200],
            "entry": name, "formula": formula, "interface": {k: v for k, v in tensors.items() if v or k != "scalars"}}
    tol = {t["name"]: _Flow(rel_l2=1.0e-2, max_abs_rel=5.0e-2) for t in tensors["outputs"]}
    mods = {k: f"kernels/{name}/{k}.py" for k in ("reference", "inputs", "model", "baseline", "promoted")}
    params = {a: _Flow(type="int", doc=d.axes[a].description or f"var axis {a} of the definition") for a in var_axes}
    what = f"DRAFT: {small['id']}, the smallest workload;"
    smoke = [_Flow({**small, "id": "S1", "note": f"{what} use an interpreter-sized case"})]
    edge = [_Flow({**small, "id": "E1", "note": f"{what} add the edge cases"})]
    shapes = _dump({"shapes": {"full": full, "smoke": smoke, "edge": edge}}).replace(
        "\n  smoke:\n", "\n  # DRAFT: FlashInfer-Bench has no small sets; the smallest workload stands in for both.\n"
        "  smoke:\n")
    text = (f"# Drafted by `aka import` from FlashInfer-Bench definition {d.name} ({source.name}).\n"
            f"# op_type: {d.op_type}; tags: {', '.join(d.tags) or 'none'}. Review every DRAFT before use.\n"
            + _dump(head)
            + "# DRAFT: FlashInfer-Bench checks elementwise (atol = rtol = 1e-2 by default); aka's tolerances are\n"
              "# rel L2 and max error over max |ref| against float64: set them from the kernel's precision.\n"
            + _dump({"tolerances": tol})
            + "# DRAFT: allocation and views only; add what the kernels' host code needs.\n"
            + _dump({"allowed_torch": _FlowList(DRAFT_TORCH), "allowed_methods": _FlowList(DRAFT_METHODS)})
            + "# DRAFT: write these files (reference: float64 reference() and plain(); the definition's run() is in\n"
              "# the formula), inputs: make_inputs(case, seed, device), model: flops(case), min_bytes(case).\n"
            + _dump({"modules": mods, "case_params": params})
            + shapes)
    drafted = ["tolerances", "allowed_torch", "allowed_methods", "modules (files to write)", "shapes.smoke",
               "shapes.edge"]
    return text, drafted


def _name_and_dest(settings: ImportSettings, raw: dict[str, Any], root: Path) -> tuple[str, Path]:
    """The op's name and the contract's path. aka's loader wants a contract named <op>.yaml, so `--out`
    is either a folder (the file is <name>.yaml in it) or a .yaml file whose stem is the op's name:
    `--out workloads/my_gdn.yaml` names the op my_gdn, as `--name my_gdn` would. The name comes from
    --name, else that file name, else the definition; --name and a file name that differ are refused."""
    out = settings.out
    if out is not None and out.suffix == ".yml":
        raise AkaError(f"--out {out}: aka reads contracts named <op>.yaml; pass --out {out.with_suffix('.yaml')} "
                       f"or a folder")
    as_file = out is not None and out.suffix == ".yaml"
    if out is not None and not as_file and out.is_file():
        raise AkaError(f"--out {out}: a file that is not a contract; pass a folder or a NAME.yaml file")
    name = settings.name or (out.stem if as_file else None) or str(raw.get("name") or "")
    if as_file and out.stem != name:
        raise AkaError(f"--out {out} would hold op {out.stem} but --name says {name}: pass --out "
                       f"{out.with_name(name + '.yaml')} or --out {out.parent} (the file is then {name}.yaml)")
    if as_file and not settings.name and not _OP_NAME.match(name):
        raise AkaError(f"--out {out}: the file name gives the op name {name!r}, not an aka op name (lowercase "
                       f"letters, digits and _); name the file e.g. {re.sub(r'[^a-z0-9_]+', '_', name.lower())}.yaml")
    if out is None:
        return name, root / "workloads" / f"{name}.yaml"
    return name, out if as_file else out / f"{name}.yaml"


def draft(settings: ImportSettings, root: Path) -> tuple[Draft, Path]:
    """Map and check; raises ImportProblems (every unmappable field) or AkaError; writes nothing."""
    src = settings.definition
    raw = _read_json(src)
    if not isinstance(raw, dict):
        raise ImportProblems(src, [f"{src}: field '(top level)': expected a JSON object (a Definition)"])
    name, out = _name_and_dest(settings, raw, root)
    schema: list[str] = []
    try:
        Definition.model_validate(raw)
    except ValidationError as exc:
        # field-level lines only: the cross-field checks are _mapping_problems' (pydantic runs them last)
        schema = [line for line in error_lines(exc) if not line.startswith("field '(top level)'")]
    failed = {line.split("'")[1] for line in schema}
    problems = [f"{src}: {line}" for line in schema]
    problems += [f"{src}: field '{f}': {p}" for f, p in _mapping_problems(raw, name, failed)]
    fib_data, why = load_fib()
    if fib_data is not None and not problems:  # their models are the authority on their own format
        problems += [f"{src}: {line}" for line in fib_check("definition", json.dumps(raw))]
    wl_path = settings.workloads or find_workloads(src, raw)
    not_carried = ["op_type and tags (a comment in the file)", "constraints (formula text; aka does not check them)"]
    workloads: list[dict[str, int]] = []
    if wl_path is None:
        problems.append(f"{src}: field 'workloads': a definition holds no shapes and none was found beside it; pass "
                        "--workloads FILE.jsonl (its TraceSet's workloads/<op_type>/<name>.jsonl)")
    elif not problems:
        var_axes = [a for a, ax in Definition.model_validate(raw).axes.items() if ax.type == "var"]
        workloads, wl_problems, lost = _workload_problems(wl_path, str(raw.get("name")), var_axes)
        problems += wl_problems
        not_carried += lost
        if not workloads and not wl_problems:
            problems.append(f"{wl_path}: no workloads: aka's full shape set needs at least one")
        distinct: dict[tuple, dict[str, Any]] = {}
        for w in workloads:  # one case per distinct shape, in file order: aka does not import the data
            distinct.setdefault(tuple(w[a] for a in var_axes), w)
        if len(distinct) < len(workloads):
            not_carried.append(f"{len(workloads) - len(distinct)} workload(s) with the axes of an earlier one "
                               "(their data differ): merged into its case")
        workloads = list(distinct.values())
    if problems:
        raise ImportProblems(src, problems)
    text, drafted = build(raw, name, workloads, src)
    # aka's own loader is the judge of the draft
    with tempfile.TemporaryDirectory(prefix=f"aka-import-{os.getpid()}-") as tmp:
        probe = Path(tmp) / f"{name}.yaml"
        probe.write_text(text)
        try:
            contract = load_contract(probe)
        except ContractError as exc:
            raise AkaError(f"the draft of {name} fails aka's contract loader (a bug in aka import): {exc}") from None
    validation = ("definition validated against flashinfer-bench's models" if fib_data is not None else
                  f"validation against flashinfer-bench's models skipped: {why}; aka's copy of its "
                  f"{FIB_VERSION} schema accepted it")
    return Draft(name=name, text=text, workloads_file=wl_path, cases=len(contract.sets["full"]), drafted=drafted,
                 not_carried=not_carried, validation=validation), out


def write(d: Draft, out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise AkaError(f"{out} exists; pass --force to overwrite it, or --out PATH to write elsewhere")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(d.text)
