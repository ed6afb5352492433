"""A contract's shape expressions as FlashInfer-Bench axes.

aka writes shapes as free expressions ('[T_total, HK, 128]', '[N+1]', '[B * q_len, Hq, 256]');
FlashInfer-Bench names every dimension by an axis, constant or variable, and has no expression axes.
So a name becomes a var axis, a literal a const axis (``const_128``), and an expression a var axis of
its own (``N_plus_1``) whose relation to the others is written as a constraint. Concrete values come
from the tensors the op's own input generator makes for a case, never from guessing at case parameters.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

_OPS = {"+": "_plus_", "-": "_minus_", "*": "_times_", "/": "_div_", "(": "_", ")": "_", "%": "_mod_"}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod)


@dataclass(frozen=True)
class Dim:
    """One dimension of a shape expression."""

    text: str
    kind: Literal["name", "const", "expr"]
    axis: str  # the FlashInfer-Bench axis name
    value: int | None = None  # for const
    expr: str = ""  # normalised expression text, for expr


def parse_shape(shape: str) -> list[Dim]:
    """'[T_total, HK, 128]' -> three Dims; ValueError names what is not understood."""
    text = shape.strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"shape {shape!r}: expected '[dim, dim, ...]'")
    inner = text[1:-1].strip()
    return [_dim(part.strip(), shape) for part in inner.split(",")] if inner else []


def _dim(part: str, shape: str) -> Dim:
    if not part:
        raise ValueError(f"shape {shape!r}: empty dimension")
    if part.isdigit():
        return Dim(part, "const", f"const_{int(part)}", value=int(part))
    if part.isidentifier():
        return Dim(part, "name", part)
    try:
        tree = ast.parse(part, mode="eval").body
    except SyntaxError:
        raise ValueError(f"shape {shape!r}: dimension {part!r} is no name, integer or expression") from None
    _check_expr(tree, part, shape)
    name = re.sub(r"_+", "_", "".join(_OPS.get(ch, ch) for ch in part.replace(" ", ""))).strip("_")
    return Dim(part, "expr", name, expr=ast.unparse(tree))


def _check_expr(node: ast.AST, part: str, shape: str) -> None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
        _check_expr(node.left, part, shape)
        _check_expr(node.right, part, shape)
    elif not (isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and type(node.value) is int)):
        raise ValueError(f"shape {shape!r}: dimension {part!r} uses more than names, integers and + - * / %")


def names_in(expr: str) -> list[str]:
    return sorted({n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)})


def evaluate(expr: str, env: dict[str, int]) -> float:
    """Value of a checked arithmetic expression (parse_shape only lets those through)."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        left, right = ev(node.left), ev(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return left // right
        if isinstance(op, ast.Mod):
            return left % right
        return left / right

    return ev(ast.parse(expr, mode="eval").body)


def bind(dims: dict[str, list[Dim]], shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Var axis values from the actual tensor shapes of one case (`shapes`: tensor name -> shape; an
    optional tensor the case leaves out is simply absent). Names that only an expression pins (N in
    '[N+1]' when the one tensor shaped [N, ...] is absent) are solved from it when it is linear in them.
    Raises ValueError when the generator's tensors disagree with the contract's shape expressions."""
    values: dict[str, int] = {}
    exprs: dict[str, str] = {}
    for tensor, ds in dims.items():
        for d in ds:
            if d.kind == "expr":
                exprs[d.axis] = d.expr
        if tensor not in shapes:
            continue
        actual = tuple(shapes[tensor])
        if len(actual) != len(ds):
            raise ValueError(f"{tensor}: the inputs have {len(actual)} dims {list(actual)}, the contract "
                             f"{len(ds)} ({', '.join(d.text for d in ds)})")
        for d, n in zip(ds, actual):
            if d.kind == "const":
                if n != d.value:
                    raise ValueError(f"{tensor}: dimension {d.text} is {n} in the inputs")
            elif values.setdefault(d.axis, n) != n:
                raise ValueError(f"{tensor}: axis {d.axis} is {n} here and {values[d.axis]} in another tensor")
    wanted = {d.axis for ds in dims.values() for d in ds if d.kind == "name"}
    _solve(exprs, values, wanted)
    for axis, expr in exprs.items():  # every expression the inputs pin must hold
        if axis in values and all(n in values for n in names_in(expr)) and evaluate(expr, values) != values[axis]:
            raise ValueError(f"axis {axis}: {expr} = {evaluate(expr, values):g} but the inputs say {values[axis]}")
    return values


def _solve(exprs: dict[str, str], values: dict[str, int], wanted: set[str]) -> None:
    progress = True
    while progress:
        progress = False
        for axis, expr in exprs.items():
            unknown = [n for n in names_in(expr) if n not in values]
            if axis not in values or len(unknown) != 1 or unknown[0] not in wanted:
                continue
            x = unknown[0]
            b = evaluate(expr, {**values, x: 0})
            a = evaluate(expr, {**values, x: 1}) - b
            if a and evaluate(expr, {**values, x: 2}) - b == 2 * a:  # linear in x
                sol = (values[axis] - b) / a
                if sol == int(sol) and sol >= 0:
                    values[x] = int(sol)
                    progress = True
