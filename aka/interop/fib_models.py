"""FlashInfer-Bench's data schema (flashinfer_bench.data, version 0.1.2) as aka's own typed models.

They mirror the fields and checks of Definition, Workload, Solution and Trace so that aka writes and
reads the same JSON without flashinfer-bench installed (it pulls torch, flashinfer and CUDA packages).
Where it is installed, :func:`fib_check` runs its own models over the same JSON: ours are a copy, and
theirs are the authority. One addition: a tensor's ``optional`` flag, which the public definitions carry
(e.g. gdn_prefill's initial state) although 0.1.2's TensorSpec ignores it.
"""

from __future__ import annotations

import ast
import math
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

FIB_VERSION = "0.1.2"  # the schema these models follow
Name = Annotated[str, Field(min_length=1)]
FIB_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
              "int64", "int32", "int16", "int8", "bool")


class _Model(BaseModel):
    # extra keys are ignored, as flashinfer-bench's models ignore them
    model_config = ConfigDict(extra="ignore")


class AxisConst(_Model):
    type: Literal["const"] = "const"
    value: Annotated[int, Field(ge=0)]
    description: str | None = None


class AxisVar(_Model):
    type: Literal["var"] = "var"
    description: str | None = None


def _axis_kind(v: Any) -> str:
    # flashinfer-bench's plain union accepts an untyped axis as const when it has a value, else as var;
    # a tagged union does the same and reports the errors of that one kind only
    t = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return t if t is not None else ("const" if isinstance(v, dict) and "value" in v else "var")


Axis = Annotated[Annotated[AxisConst, Tag("const")] | Annotated[AxisVar, Tag("var")], Discriminator(_axis_kind)]


class TensorSpec(_Model):
    shape: list[Name] | None  # None: a scalar
    dtype: Literal[FIB_DTYPES]  # type: ignore[valid-type]
    description: str | None = None
    optional: bool | None = None  # not in 0.1.2's model; the public definitions use it


class Definition(_Model):
    name: Name
    op_type: Name
    axes: dict[Name, Axis]
    inputs: dict[Name, TensorSpec]
    outputs: dict[Name, TensorSpec]
    reference: Name
    tags: list[Name] = Field(default_factory=list)
    description: str | None = None
    constraints: list[Name] = Field(default_factory=list)

    @model_validator(mode="after")
    def _checks(self) -> Definition:
        try:
            tree = ast.parse(self.reference)
        except SyntaxError as exc:
            raise ValueError(f"reference must be valid Python code: {exc}") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise ValueError("reference must define a top-level function named 'run'")
        if set(self.inputs) & set(self.outputs):
            raise ValueError("input and output names must not overlap")
        for c in self.constraints:
            try:
                ast.parse(c, mode="eval")
            except SyntaxError:
                raise ValueError(f"constraint {c!r} is not a Python expression") from None
        for name, spec in {**self.inputs, **self.outputs}.items():
            for axis in spec.shape or []:
                if axis not in self.axes:
                    raise ValueError(f'tensor "{name}" references undefined axis "{axis}"')
        return self


class RandomInput(_Model):
    type: Literal["random"] = "random"


class ScalarInput(_Model):
    type: Literal["scalar"] = "scalar"
    value: int | float | bool


class SafetensorsInput(_Model):
    type: Literal["safetensors"] = "safetensors"
    path: Name  # relative to the TraceSet root
    tensor_key: Name


def _input_kind(v: Any) -> str:
    t = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return t if t is not None else "random"  # as the plain union reads an untyped input


InputSpec = Annotated[Annotated[RandomInput, Tag("random")] | Annotated[SafetensorsInput, Tag("safetensors")]
                      | Annotated[ScalarInput, Tag("scalar")], Discriminator(_input_kind)]


class Workload(_Model):
    axes: dict[str, Annotated[int, Field(ge=0)]]
    inputs: dict[str, InputSpec]
    uuid: Name


class SourceFile(_Model):
    path: Name
    content: Name

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        p = PurePosixPath(v)
        if p.is_absolute() or ".." in p.parts:
            raise ValueError(f"source path must be relative, without '..': {v}")
        return v


class BuildSpec(_Model):
    language: Literal["python", "triton", "cpp", "cuda", "tilelang"]
    target_hardware: list[str] = Field(min_length=1)
    entry_point: Name  # 'file.py::function'
    dependencies: list[Name] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: Literal["tvm-ffi", "torch"] | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry(cls, v: str) -> str:
        if v.count("::") != 1:
            raise ValueError(f"entry point must be '<file_path>::<function_name>', got {v!r}")
        return v


class Solution(_Model):
    name: Name
    definition: Name
    author: Name
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _entry_file(self) -> Solution:
        paths = [s.path for s in self.sources]
        if len(set(paths)) != len(paths):
            raise ValueError("duplicate source paths")
        if self.spec.entry_point.split("::")[0] not in paths:
            raise ValueError("the entry point's file is not among the sources")
        return self


class Correctness(_Model):
    # NaN is allowed and is what aka writes for figures it does not measure (written "NaN" in JSON)
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None

    @field_validator("max_relative_error", "max_absolute_error")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if not math.isnan(v) and v < 0:
            raise ValueError("must be non-negative or NaN")
        return v


class Performance(_Model):
    latency_ms: float = Field(0.0, ge=0)
    reference_latency_ms: float = Field(0.0, ge=0)
    speedup_factor: float = Field(0.0, ge=0)


class Environment(_Model):
    hardware: Name
    libs: dict[str, str] = Field(default_factory=dict)


class Evaluation(_Model):
    status: Literal["PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE", "RUNTIME_ERROR",
                    "COMPILE_ERROR", "TIMEOUT"]
    environment: Environment
    timestamp: Name
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None

    @model_validator(mode="after")
    def _by_status(self) -> Evaluation:
        need_c = self.status in ("PASSED", "INCORRECT_NUMERICAL")
        need_p = self.status == "PASSED"
        if need_c != (self.correctness is not None) or need_p != (self.performance is not None):
            raise ValueError(f"status {self.status}: correctness {'required' if need_c else 'not allowed'}, "
                             f"performance {'required' if need_p else 'not allowed'}")
        return self


class Trace(_Model):
    definition: Name
    workload: Workload
    solution: str | None = None
    evaluation: Evaluation | None = None


_TAGS = {"const", "var", "random", "safetensors", "scalar", "AxisConst", "AxisVar", "RandomInput",
         "SafetensorsInput", "ScalarInput"}


def error_lines(err: ValidationError, prefix: str = "") -> list[str]:
    """One line per field pydantic rejected: "field 'inputs.q.dtype': Input should be ..."."""
    out = []
    for e in err.errors():
        # drop pydantic's union tags and class names from the path: 'axes.h.const.value' -> 'axes.h.value'
        loc = ".".join(str(x) for x in e["loc"] if str(x) not in _TAGS)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid":
            msg = f"type {e['ctx']['tag']!r}: expected one of {e['ctx']['expected_tags']}"
        out.append(f"{prefix}field '{loc or '(top level)'}': {msg}")
    return list(dict.fromkeys(out))


def load_fib() -> tuple[Any, str]:
    """flashinfer_bench.data, or None and why not (import is lazy: it pulls torch and flashinfer)."""
    try:
        import flashinfer_bench.data as data  # noqa: PLC0415
    except ImportError as exc:
        return None, f"flashinfer-bench is not installed ({exc.msg if hasattr(exc, 'msg') else exc})"
    except Exception as exc:  # a broken install (e.g. a CUDA library missing) is not ours to crash on
        return None, f"flashinfer-bench failed to import: {type(exc).__name__}: {exc}"
    return data, ""


def fib_check(kind: str, json_text: str) -> list[str]:
    """flashinfer-bench's own verdict on one JSON record (its model for `kind`); [] when it accepts."""
    data, why = load_fib()
    if data is None:
        raise RuntimeError(why)
    model = {"definition": data.Definition, "workload": data.Trace, "solution": data.Solution,
             "trace": data.Trace}[kind]
    try:
        model.model_validate_json(json_text)
    except ValidationError as exc:
        return error_lines(exc, prefix="flashinfer-bench: ")
    return []
