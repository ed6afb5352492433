"""Operator contracts: pydantic models for workloads/<op>.yaml.

A contract is data: the formula, the interface (tensors, scalars, outputs), the tolerances per
output, the glue torch calls a candidate may make, where the op's trusted modules live, and three
shape sets. Each op declares the parameters of its shape cases (``case_params``) so that aka can
validate any op's shapes without knowing the op: adding an op needs no change here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from aka.contract.shapes import ALL_SETS
from aka.errors import AkaError, ContractError

SHAPE_SETS = tuple(s.value for s in ALL_SETS)  # what every contract must define, exactly
DTYPES = ("bfloat16", "float16", "float32", "float64", "int32", "int64")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorSpec(_Strict):
    name: str = Field(description="keyword argument name of the tensor")
    shape: str = Field(description="shape expression, e.g. '[T_total, HK, 128]'")
    dtype: Literal[DTYPES]  # type: ignore[valid-type]
    layout: str = Field("", description="layout notes: packing, strides, meaning of the axes")
    optional: bool = Field(False, description="may be passed as None")


class ScalarSpec(_Strict):
    name: str = Field(description="keyword argument name")
    type: Literal["float", "int", "bool"]
    default: float | int | bool | None = Field(None, description="value used when the caller omits it")
    draw: tuple[float, float] | None = Field(
        None, description="[low, high]: from its second round on, the gate passes a value drawn log-uniformly "
        "in this range (round 0 passes none, so the default is exercised too)")
    doc: str = ""

    @field_validator("draw")
    @classmethod
    def _range(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0 < v[0] <= v[1]:
            raise ValueError("expected 0 < low <= high")
        return v


class Interface(_Strict):
    inputs: list[TensorSpec] = Field(min_length=1, description="tensor arguments, in call order")
    scalars: list[ScalarSpec] = Field(default_factory=list, description="scalar keyword arguments")
    outputs: list[TensorSpec] = Field(min_length=1, description="returned tensors, in order")


class Tolerance(_Strict):
    rel_l2: float = Field(gt=0, description="max ||out - ref|| / ||ref|| against float64")
    max_abs_rel: float = Field(gt=0, description="max |out - ref| / max |ref|: no element beyond this")
    plain_ratio: float = Field(
        10.0, gt=1, description="candidate error may exceed the plain same-precision error by this factor"
    )
    plain_floor: float = Field(1e-4, ge=0, description="rel-L2 errors below this never count as a drop")


class Modules(_Strict):
    reference: str = Field(description="float64 reference module: reference(**inputs), plain(**inputs)")
    inputs: str = Field(description="input generator module: make_inputs(case, seed, device)")
    model: str = Field(description="cost model module: flops(case), min_bytes(case)")
    baseline: str = Field(description="the op's baseline kernel module (rendered there from `stages` when given)")
    stages: list[str] = Field(default_factory=list, description=(
        "stage files the baseline is written as, in the order they are rendered into `baseline` "
        "(aka.contract.stages); empty: `baseline` is itself the source"))
    promoted: str = Field(description="where the promoted kernel lives (may not exist yet)")


class ParamSpec(_Strict):
    type: Literal["int", "float", "bool", "str", "lengths", "ints"]
    default: Any = None
    doc: str = ""


_PY_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str, "ints": list[int]}
_LEN_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*$")


def expand_lengths(value: Any) -> list[int]:
    """Expand ``[1024, "4x2048"]`` to ``[1024, 2048, 2048, 2048, 2048]``; a bare "4x2048" works too."""
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"expected a length, got {item!r}")
        if isinstance(item, int):
            out.append(item)
            continue
        m = _LEN_RE.match(str(item))
        if not m:
            raise ValueError(f"expected an int or 'COUNTxLENGTH', got {item!r}")
        out.extend([int(m.group(2))] * int(m.group(1)))
    if not out:
        raise ValueError("expected at least one length")
    if any(n < 0 for n in out):
        raise ValueError("lengths must be >= 0")
    return out


class ShapeCaseBase(BaseModel):
    """Common fields of a shape case; each op adds its declared ``case_params``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    note: str = ""
    knobs: dict[str, Any] = Field(
        default_factory=dict, description="the contract's knobs (OpSpec.knobs) the gate passes to the entry point "
        "for this case, as keyword arguments, to take a code path on a small shape (e.g. context parallelism)")

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k not in ("id", "note", "knobs")}

    def describe(self) -> str:
        """Compact text of the parameters that differ from their declared defaults."""
        fields = type(self).model_fields
        shown = {k: v for k, v in self.params().items() if fields[k].is_required() or v != fields[k].default}
        text = " ".join(f"{k}={_short(v)}" for k, v in shown.items())
        return text + "".join(f" {k}={v}" for k, v in self.knobs.items())


def _short(v: Any) -> str:
    if isinstance(v, list) and len(v) > 6:
        return f"[{len(v)} values, sum {sum(v)}]"
    return str(v)


class OpSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = Field(min_length=1, description="one line shown by `aka ops`")
    entry: str = Field(description="entry function name every kernel module defines")
    formula: str = Field(min_length=1)
    interface: Interface
    tolerances: dict[str, Tolerance]
    allowed_torch: list[str] = Field(description="torch.X glue calls a candidate may make (allocation, views)")
    allowed_methods: list[str] = Field(description="tensor methods a candidate may call (views, copies)")
    modules: Modules
    case_params: dict[str, ParamSpec] = Field(min_length=1)
    input_variants: list[str] = Field(
        default_factory=list, description="input regimes make_inputs(case, seed, device, variant=...) knows; the "
        "gate cycles through them by round and shape (round r of the i-th shape uses variants[(r + 3 i) % n]); "
        "empty: one regime")
    head_layouts: list[dict[str, int]] = Field(
        default_factory=list, description="head layouts the op supports, as the case parameters that set them "
        "(e.g. {hk: 16, hv: 48}); one divides the other. Every full-set layout is listed, and the smoke and "
        "edge sets hold a case of every listed group size (the larger over the smaller), powers of two and not, 1 "
        "included (tests/contract/test_contracts.py); empty: the op has no head groups")
    competitors: dict[str, str] = Field(
        default_factory=dict,
        description="external implementations to time: name -> 'path/to/module.py:function'",
    )
    rank_timing: Literal["eager", "graph"] = Field(
        "eager", description="the GPU timing `aka optimize` ranks and promotes on (screen and ABBA): eager calls, "
        "whose interval holds the call's host time, or CUDA-graph replay, for ops a server always runs inside a "
        "captured graph (decode); a candidate that cannot be captured then fails its bench")
    host_target_us: float | None = Field(
        None, gt=0, description="the host's cost per call the op aims at, in µs: eager median minus CUDA-graph "
        "replay median, reported per shape beside the ranked times (bench, run summary, promoted.json) and "
        "never part of the ranking")
    knobs: dict[str, str] = Field(
        default_factory=dict, description="keyword arguments of the entry point that steer how a kernel computes, "
        "never what: name -> what it asks. Every candidate's entry takes them (None: its own choice); edge cases "
        "set them (a case's `knobs`) to reach a code path on a small shape; references and competitors never see them")
    shapes: dict[str, list[dict[str, Any]]]

    @field_validator("shapes")
    @classmethod
    def _three_sets(cls, v: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        missing = [s for s in SHAPE_SETS if s not in v]
        extra = [s for s in v if s not in SHAPE_SETS]
        if missing or extra:
            raise ValueError(f"expected exactly the sets {list(SHAPE_SETS)}; missing {missing}, unknown {extra}")
        return v

    def output_names(self) -> list[str]:
        return [t.name for t in self.interface.outputs]


class Contract:
    """A validated OpSpec plus its typed shape cases, loaded from one YAML file."""

    def __init__(self, spec: OpSpec, cases: dict[str, list[ShapeCaseBase]], path: Path):
        self.spec = spec
        self.sets = cases
        self.path = path

    @property
    def name(self) -> str:
        return self.spec.name

    def cases(self, which: str) -> list[ShapeCaseBase]:
        """A shape set by name, or a comma-separated list of ids from any set."""
        from aka.errors import ShapeSetError

        if which in self.sets:
            return list(self.sets[which])
        by_id = {c.id: c for cases in self.sets.values() for c in cases}
        ids = [s.strip() for s in which.split(",") if s.strip()]
        unknown = [i for i in ids if i not in by_id]
        if not ids or unknown:
            raise ShapeSetError(
                f"{self.name}: unknown shape set or id {unknown or which!r}; use one of {list(SHAPE_SETS)}"
                f" or ids such as {', '.join(list(by_id)[:4])}"
            )
        return [by_id[i] for i in ids]


def _case_model(op: str, params: dict[str, ParamSpec]) -> type[ShapeCaseBase]:
    fields: dict[str, Any] = {}
    for name, p in params.items():
        if p.type == "lengths":
            ann: Any = list[int]
        else:
            ann = _PY_TYPES[p.type]
        fields[name] = (ann, ... if p.default is None else p.default)
    model = create_model(f"{op}_Case", __base__=ShapeCaseBase, **fields)
    length_fields = [n for n, p in params.items() if p.type == "lengths"]
    if length_fields:
        # pydantic cannot take validators through create_model's kwargs cleanly across versions;
        # expand lengths before validation instead (see _validate_case).
        model.__aka_length_fields__ = tuple(length_fields)  # type: ignore[attr-defined]
    return model


def _validate_case(model: type[ShapeCaseBase], raw: dict[str, Any]) -> ShapeCaseBase:
    data = dict(raw)
    for name in getattr(model, "__aka_length_fields__", ()):
        if name in data:
            data[name] = expand_lengths(data[name])
    return model.model_validate(data)


def _one_line(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{path}: field '{loc}': {first['msg']}{more}"


def yaml_mapping(text: str, path: Path, error: type[AkaError], part: str = "", first_line: int = 1,
                 field: str = "(top level)", noun: str = "contract fields") -> dict:
    """text parsed as a YAML mapping, else error(one line naming the file, the YAML line and what is
    wrong). ``part`` names the piece of the file (": front matter"), ``first_line`` its first line."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + first_line}" if mark else ""
        raise error(f"{path}:{where}{part} is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: field '{field}': expected a mapping of {noun}")
    return raw


def load_contract(path: Path) -> Contract:
    """Load and validate one contract; any problem raises ContractError with one line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ContractError(f"{path}: cannot read: {exc.strerror}") from None
    raw = yaml_mapping(text, path, ContractError)
    try:
        spec = OpSpec.model_validate(raw)
    except ValidationError as exc:
        raise ContractError(_one_line(path, exc)) from None
    if spec.name != path.stem:
        raise ContractError(f"{path}: field 'name': expected '{path.stem}' (the file name), got '{spec.name}'")
    outputs = set(spec.output_names())
    if set(spec.tolerances) != outputs:
        raise ContractError(
            f"{path}: field 'tolerances': expected one entry per output {sorted(outputs)},"
            f" got {sorted(spec.tolerances)}"
        )
    model = _case_model(spec.name, spec.case_params)
    sets: dict[str, list[ShapeCaseBase]] = {}
    seen: set[str] = set()
    for set_name in SHAPE_SETS:
        cases = []
        for i, raw_case in enumerate(spec.shapes[set_name]):
            where = f"shapes.{set_name}.{i}"
            if not isinstance(raw_case, dict):
                raise ContractError(f"{path}: field '{where}': expected a mapping with an id and case parameters")
            try:
                case = _validate_case(model, raw_case)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(x) for x in first["loc"])
                raise ContractError(f"{path}: field '{where}.{loc}': {first['msg']}") from None
            except ValueError as exc:
                raise ContractError(f"{path}: field '{where}': {exc}") from None
            if unknown := sorted(set(case.knobs) - set(spec.knobs)):
                raise ContractError(f"{path}: field '{where}.knobs': unknown knob {unknown[0]!r}; the contract's "
                                    f"knobs are {sorted(spec.knobs)} (declare it under 'knobs:')")
            if case.id in seen:
                raise ContractError(f"{path}: field '{where}.id': duplicate shape id '{case.id}'")
            seen.add(case.id)
            cases.append(case)
        if not cases:
            raise ContractError(f"{path}: field 'shapes.{set_name}': expected at least one shape case")
        sets[set_name] = cases
    return Contract(spec, sets, path)
