"""Tiny, safe arithmetic over case parameters, for shapes and work sizes in lab.yaml."""

from __future__ import annotations

import ast
import operator
from typing import Mapping

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


class ExprError(ValueError):
    pass


def names(expr: str) -> set[str]:
    """The parameter names an expression uses (raises ExprError if it is not arithmetic)."""
    tree = _parse(expr)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def evaluate(expr: str | int | float, params: Mapping[str, object]) -> int | float:
    if isinstance(expr, (int, float)):
        return expr
    return _eval(_parse(expr).body, params, expr)


def _parse(expr: str) -> ast.Expression:
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an arithmetic expression: {expr!r}") from exc
    for node in ast.walk(tree):
        if not isinstance(
            node,
            (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Name, ast.Load, ast.Constant)
            + tuple(_BINOPS),
        ):
            raise ExprError(f"only + - * / // % ** and parameter names are allowed: {expr!r}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError(f"only numbers are allowed as constants: {expr!r}")
    return tree


def _eval(node: ast.AST, params: Mapping[str, object], expr: str) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"not a number: {node.value!r} in {expr!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in params:
            raise ExprError(f"unknown parameter {node.id!r} in {expr!r} (known: {', '.join(sorted(params))})")
        value = params[node.id]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExprError(f"parameter {node.id!r} is text ({value!r}), not a number, in {expr!r}")
        return value
    if isinstance(node, ast.UnaryOp):
        val = _eval(node.operand, params, expr)
        return -val if isinstance(node.op, ast.USub) else val
    if isinstance(node, ast.BinOp):
        result: int | float = _BINOPS[type(node.op)](_eval(node.left, params, expr), _eval(node.right, params, expr))
        return result
    raise ExprError(f"unsupported expression: {expr!r}")
