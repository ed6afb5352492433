"""Static policy for candidate kernels: an AST check that runs before any candidate code does.

A candidate may import only torch, triton (jit, autotune, heuristics, Config, the language and
its extras, tensor descriptors) and a few pure standard modules, and from those only a listed set
of names (``typing.get_type_hints`` evaluates strings, ``dataclasses.sys`` is a module). It may call
only the torch functions and tensor methods its contract lists as glue (allocation, views, index
bookkeeping); everything that computes lives in its Triton kernels. Refused besides: files,
network, subprocesses, the environment and argv, the reference, the gate, aka but aka.launch, dynamic code
(exec, eval, compile, __import__, getattr/setattr/vars/globals), dunder access and dunder
methods beyond a few, frame/code/traceback attributes (``gen.gi_frame.f_back``), a module reached
or used as a value (``T = torch``, ``typing.sys.modules``), attribute assignment outside ``self``,
streams, the @ operator.

The check resolves aliases (``import torch as t``, ``from torch import matmul``) so a call cannot
be laundered through another name. What it cannot see: arithmetic with plain operators on tensors
(``(q * k).sum(-1)``); aka.evaluate.host.launches sees that at run time, and the gate runs the candidate in a
process of its own (aka.evaluate.host.main), so nothing it does there reaches a verdict.
"""

from __future__ import annotations

import ast
import functools
import importlib
import types
from dataclasses import dataclass, field

from aka.evaluate.static.policy_names import (
    AKA_LAUNCH,
    ALLOWED_MODULES,
    ALLOWED_PREFIXES,
    ATTRS_REFUSED,
    BUILTINS_REFUSED,
    CPP_EXT,
    DUNDER_DEFS_OK,
    DUNDER_NAMES_OK,
    FREE_MODULES,
    OPERATOR_REFUSED,
    STDLIB_NAMES,
    TORCH_CUDA,
    TRITON_EXPERIMENTAL,
    TRITON_TOOLS,
    TRITON_TOP,
)

# what a refused import's message offers instead (the rest of the module's API is refused name by name)
MAY_IMPORT = ("a candidate may import " + ", ".join(sorted(m for m in ALLOWED_MODULES if m != "__future__"))
              + " and " + ", ".join(f"{p}*" for p in ALLOWED_PREFIXES))


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class PolicyReport:
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def message(self) -> str:
        """All violations on one line ('' when clean)."""
        return "; ".join(map(str, self.violations))


def rules_text(spec, allow_cuda_extension: bool = False) -> str:
    """What this policy allows, as the codegen prompt states it (built from the same constants)."""
    mods = ["torch", "triton", "triton.language (and triton.language.extra.*)", "triton.tools.tensor_descriptor",
            "triton.experimental.gluon (Gluon kernels: gluon.language, gluon.language.nvidia.hopper's tma, mbarrier "
            "and warpgroup_mma, gluon.nvidia.hopper.TensorDescriptor)",
            "operator (not matmul, attrgetter, methodcaller)",
            "aka.launch (Launcher, launch_key: launch a compiled kernel again without Triton's Python runner, ~3x "
            "cheaper a launch; see its docstring)"]
    for m in ("math", "itertools", "functools", "typing", "dataclasses"):
        names = STDLIB_NAMES[m]
        mods.append(m if names == "*" else f"{m} ({', '.join(sorted(names))})")
    if allow_cuda_extension:
        mods.append("torch.utils.cpp_extension (load_inline only)")
    return "\n".join([
        f"- imports allowed: {'; '.join(mods)}. Nothing else: no os, sys, subprocess, numpy, time, threading, "
        "inspect, importlib, the reference, kernels.* or the rest of aka.",
        "- from triton: " + ", ".join(sorted(TRITON_TOP - {"tools", "language", "experimental"}))
        + ", the language and triton.experimental.gluon.",
        f"- torch calls allowed outside kernels: torch.{', torch.'.join(spec.allowed_torch)}; from torch.cuda only "
        f"{', '.join(sorted(TORCH_CUDA))}.",
        f"- tensor methods allowed outside kernels: {', '.join(spec.allowed_methods)}.",
        "- refused: the @ operator; " + ", ".join(sorted(BUILTINS_REFUSED - {"sys", "os", "importlib"})) +
        "; dunder names and attributes; defining dunder methods other than " + ", ".join(sorted(DUNDER_DEFS_OK)) +
        "; attributes " + ", ".join(sorted(ATTRS_REFUSED)) + "; a module used as a value; assigning to an "
        "attribute other than self.<name>; streams, graphs and events.",
        "- at run time torch may only allocate, view, copy, cast, fill and do integer index bookkeeping around "
        "your Triton or Gluon kernels; any other torch operator on floating-point data, or a cuBLAS/cuDNN/attention "
        "library kernel, fails the gate.",
    ])


@functools.lru_cache(maxsize=1)
def _tensor_methods() -> frozenset[str]:
    """Callable public attributes of torch.Tensor (the methods a candidate might compute with)."""
    import torch

    names = {n for n in dir(torch.Tensor) if not n.startswith("_") and callable(getattr(torch.Tensor, n, None))}
    # Names that also belong to Python containers/str (list.sort, dict.values, str.split, ...): a
    # receiver's type is unknown statically, and none of them computes an operator. `type` is a
    # cast as a method and a field of torch.device (`q.device.type`).
    return frozenset(names - {"add", "index", "sort", "split", "values", "type"})


@functools.lru_cache(maxsize=1)
def _triton_tensor_methods() -> frozenset[str]:
    import triton.language as tl

    return frozenset(n for n in dir(tl.tensor) if not n.startswith("_"))


def _resolve(parts: tuple[str, ...]):
    """The object a dotted chain names, or None when it cannot be resolved here."""
    try:
        obj = importlib.import_module(parts[0])
        for i, p in enumerate(parts[1:], 2):
            sub = getattr(obj, p, None)
            # a submodule its package does not import itself (aka.launch) is still a module
            obj = sub if sub is not None else importlib.import_module(".".join(parts[:i]))
        return obj
    except Exception:
        return None


def check_source(source: str, spec, *, allow_cuda_extension: bool = False) -> PolicyReport:
    """Check candidate source against the contract's allowed torch calls and methods. Pure."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return PolicyReport([Violation(exc.lineno or 0, "syntax", f"syntax error: {exc.msg}")])
    _mark_safe_positions(tree)
    checker = _Checker(set(spec.allowed_torch), set(spec.allowed_methods), allow_cuda_extension)
    checker.visit(tree)
    return PolicyReport(sorted(set(checker.violations), key=lambda v: (v.line, v.message)))


def _mark_safe_positions(tree: ast.AST) -> None:
    """Mark attribute reads that cannot call or hand on a method: comparison operands
    (`dev.type == "cuda"`), receivers of a further attribute (`x.m.y`) and f-string fields."""
    for node in ast.walk(tree):
        kids: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            kids = [node.left, *node.comparators]
        elif isinstance(node, ast.Attribute):
            kids = [node.value]
        elif isinstance(node, ast.FormattedValue):
            kids = [node.value]
        for kid in kids:
            kid._aka_safe = True  # type: ignore[attr-defined]


class _Checker(ast.NodeVisitor):
    def __init__(self, allowed_torch: set[str], allowed_methods: set[str], cuda_ext: bool):
        self.allowed_torch = allowed_torch
        self.allowed_methods = allowed_methods
        self.cuda_ext = cuda_ext
        self.aliases: dict[str, tuple[str, ...]] = {}  # local name -> dotted module path it is bound to
        self.violations: list[Violation] = []
        self.in_jit = 0

    def refuse(self, node: ast.AST, rule: str, message: str) -> None:
        self.violations.append(Violation(getattr(node, "lineno", 0), rule, message))

    # imports ----------------------------------------------------------------------------------
    def _module_ok(self, name: str) -> bool:
        if self.cuda_ext and name == "torch.utils.cpp_extension":
            return True
        return name in ALLOWED_MODULES or name.startswith(ALLOWED_PREFIXES)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if not self._module_ok(a.name):
                self.refuse(node, "import", f"import of '{a.name}' is not allowed; {MAY_IMPORT}")
                continue
            if a.asname:
                self.aliases[a.asname] = tuple(a.name.split("."))
            else:
                root = a.name.split(".")[0]
                self.aliases[root] = (root,)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level or not self._module_ok(mod):
            self.refuse(node, "import", f"import from '{'.' * node.level}{mod}' is not allowed; {MAY_IMPORT}")
            return
        for a in node.names:
            if a.name == "*":
                self.refuse(node, "import", f"'from {mod} import *' is not allowed (name what you use)")
                continue
            parts = (*mod.split("."), a.name)
            if self._chain(node, parts):
                self.aliases[a.asname or a.name] = parts

    # names, attributes, calls -----------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BUILTINS_REFUSED:
            self.refuse(node, "builtin", f"'{node.id}' is not allowed (no dynamic code, files or introspection)")
        elif node.id.startswith("__") and node.id not in DUNDER_NAMES_OK:
            self.refuse(node, "dunder", f"'{node.id}' is not allowed")
        elif node.id in self.aliases and isinstance(node.ctx, ast.Load):
            self._value_use(node, self.aliases[node.id])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts = self._dotted(node)
        if parts is not None:  # a chain rooted at an imported module
            if self._chain(node, parts):
                self._value_use(node, parts)
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self.refuse(node, "monkeypatch", f"assigning to '{'.'.join(parts)}' is not allowed")
            return
        self._attr_name(node, node.attr)
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            self.refuse(node, "monkeypatch", f"assigning to attribute '.{node.attr}' is not allowed "
                                             "(only self.<name> in a class of the module)")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult):
            self.refuse(node, "matmul", "the @ operator is not allowed (do products in a Triton kernel)")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult):
            self.refuse(node, "matmul", "the @= operator is not allowed (do products in a Triton kernel)")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") and node.name not in DUNDER_DEFS_OK:
            self.refuse(node, "dunder", f"defining '{node.name}' is not allowed (it changes how Python or torch "
                                        "treat a value)")
        jit = any(self._is_jit(d) for d in node.decorator_list)
        self.in_jit += jit
        self.generic_visit(node)
        self.in_jit -= jit

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    # helpers ----------------------------------------------------------------------------------
    def _is_jit(self, dec: ast.expr) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        parts = self._dotted(target) if isinstance(target, ast.Attribute) else None
        if isinstance(target, ast.Name) and target.id in self.aliases:
            parts = self.aliases[target.id]
        return parts is not None and parts[0] == "triton" and parts[-1] in ("jit", "autotune", "heuristics")

    def _dotted(self, node: ast.Attribute) -> tuple[str, ...] | None:
        names: list[str] = []
        cur: ast.expr = node
        while isinstance(cur, ast.Attribute):
            names.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in self.aliases:
            return (*self.aliases[cur.id], *reversed(names))
        return None

    def _attr_name(self, node: ast.AST, name: str) -> None:
        """An attribute of something that is not a module: a method or field of a value."""
        if name.startswith("__"):
            self.refuse(node, "dunder", f"attribute '{name}' is not allowed")
            return
        if name in ATTRS_REFUSED:
            self.refuse(node, "introspection", f"attribute '.{name}' is not allowed (frames, code, globals, "
                                               "modules and the environment are out of reach)")
            return
        if getattr(node, "_aka_safe", False):
            return  # compared or dereferenced further: never a call of the method
        if name in self.allowed_methods or name not in _tensor_methods():
            return
        if self.in_jit and name in _triton_tensor_methods():
            return  # inside @triton.jit the receiver is a Triton tensor
        self.refuse(node, "method", f"tensor method '.{name}()' is not allowed (glue only: see allowed_methods)")

    def _value_use(self, node: ast.AST, parts: tuple[str, ...]) -> None:
        """A chain used as a value (not as the receiver of an attribute): must not be a module."""
        if parts[0] in FREE_MODULES or getattr(node, "_aka_parent_attr", False):
            return
        if isinstance(_resolve(parts), types.ModuleType):
            dotted = ".".join(parts)
            self.refuse(node, "module-value", f"module '{dotted}' used as a value (call its functions directly)")

    def _chain(self, node: ast.AST, parts: tuple[str, ...]) -> bool:
        """Check a dotted chain rooted at a module; refuse and return False when not allowed."""
        dotted = ".".join(parts)
        if any(p.startswith("__") for p in parts[1:]):
            self.refuse(node, "dunder", f"'{dotted}' is not allowed")
            return False
        why = self._chain_problem(parts)
        if why:
            self.refuse(node, "torch" if parts[0] == "torch" else "module", f"'{dotted}' is not allowed ({why})")
            return False
        return True

    def _chain_problem(self, parts: tuple[str, ...]) -> str:
        root, rest = parts[0], parts[1:]
        if not rest:
            return ""
        if root in FREE_MODULES:
            names = STDLIB_NAMES[root]
            if names == "*":
                ok = not rest[0].startswith("_") and not isinstance(_resolve(parts[:2]), types.ModuleType)
            else:
                ok = rest[0] in names
            return "" if ok else f"not among the names allowed from {root}"
        if root == "operator":
            return "computes a product or looks a name up" if rest[0] in OPERATOR_REFUSED else ""
        if root == "torch":
            return self._torch_problem(rest)
        if root == "triton":
            return self._triton_problem(parts)
        if root == "aka":
            ok = rest[0] == "launch" and (len(rest) == 1 or rest[1] in AKA_LAUNCH)
            return "" if ok else "from aka only aka.launch's " + " and ".join(sorted(AKA_LAUNCH))
        return "not an allowed module"

    def _torch_problem(self, rest: tuple[str, ...]) -> str:
        if self.cuda_ext and rest == CPP_EXT[: len(rest)]:
            return ""
        if rest[0] not in self.allowed_torch:
            return "the contract allows only glue torch calls: see allowed_torch"
        if rest[0] == "cuda" and len(rest) > 1 and rest[1] not in TORCH_CUDA:
            return "no streams, graphs or events: keep all work on the caller's stream"
        if rest[0] == "Tensor" and len(rest) > 1 and rest[1] not in self.allowed_methods:
            return "the method is not in allowed_methods"
        return ""

    def _triton_problem(self, parts: tuple[str, ...]) -> str:
        if parts[1] not in TRITON_TOP:
            return "only triton.jit, autotune, heuristics, Config, cdiv, next_power_of_2 and triton.language"
        if parts[1] == "tools" and (len(parts) < 3 or parts[2] not in TRITON_TOOLS):
            return "only triton.tools.tensor_descriptor"
        if parts[1] == "experimental" and len(parts) > 2 and parts[2] not in TRITON_EXPERIMENTAL:
            return "only triton.experimental.gluon"
        # Walk the chain: it must not step out of triton into another module (tl.core.os, ...).
        for i in range(2, len(parts) + 1):
            obj = _resolve(parts[:i])
            if isinstance(obj, types.ModuleType) and not obj.__name__.startswith("triton"):
                return f"reaches module '{obj.__name__}'"
        return ""

    def generic_visit(self, node: ast.AST) -> None:
        # Mark attribute receivers so a module used only as `mod.attr` is not taken for a value use.
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.Attribute) and child is node.value:
                child._aka_parent_attr = True  # type: ignore[attr-defined]
        super().generic_visit(node)
