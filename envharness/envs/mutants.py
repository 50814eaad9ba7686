"""Bugs made from a correct function: deterministic, single-line mutation operators over its source.

Contains :data:`OPERATORS` (the operator names), :class:`Mutant` and :func:`mutants`. Each
mutant changes one site on one line of the source and keeps the rest byte for byte, so the
fix is one line edit, ``(line, line, the original line)``. A mutant that does not parse is
dropped here; whether it is really a bug (not an equivalent mutant) is for the tests to say,
in the sandbox (:mod:`envharness.envs.humaneval` keeps only mutants that fail them).

Operators, as in mutation testing and HumanEvalFix's hand-made bugs:

- ``comparison``: ``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not`` swapped
- ``arithmetic``: ``+`` and ``-``, ``*`` to ``+``, ``/`` to ``//`` and back, ``%`` to ``//``, ``**`` to ``*`` (also in ``+=`` and friends)
- ``boolean``: ``and`` and ``or`` swapped; ``True`` and ``False`` swapped
- ``drop_not``: ``not x`` becomes ``x``
- ``off_by_one``: an integer constant one more or one less; a slice bound or a ``range`` bound plus one
- ``swap_arguments``: the first two positional arguments of a call swapped
- ``wrong_variable``: a local variable read where another one of the function's was meant
- ``loop_exit``: ``break`` and ``continue`` swapped
- ``negate_condition``: the test of an ``if``, ``elif``, ``while`` or conditional expression negated
- ``dropped_call``: a call of one argument replaced by its argument (``len(set(s))`` becomes ``len(s)``)
- ``wrong_function``: ``min`` and ``max``, ``any`` and ``all``, and sibling string methods
  (``lower`` and ``upper``, ``startswith`` and ``endswith``...) swapped
- ``wrong_literal``: ``''`` and ``' '`` swapped (a join or a split on the wrong separator)
- ``early_return``: the function's last ``return x`` moved up: the loop before it returns on its first pass
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

OPERATORS = (
    "comparison",
    "arithmetic",
    "boolean",
    "drop_not",
    "off_by_one",
    "swap_arguments",
    "wrong_variable",
    "loop_exit",
    "early_return",
    "negate_condition",
    "dropped_call",
    "wrong_function",
    "wrong_literal",
)

_COMPARISON = {
    "<": "<=",
    "<=": "<",
    ">": ">=",
    ">=": ">",
    "==": "!=",
    "!=": "==",
    "in": "not in",
    "not in": "in",
    "is": "is not",
    "is not": "is",
}
_FUNCTIONS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_METHODS = {
    "lower": "upper",
    "upper": "lower",
    "swapcase": "lower",
    "startswith": "endswith",
    "endswith": "startswith",
    "isupper": "islower",
    "islower": "isupper",
    "isdigit": "isalpha",
    "isalpha": "isdigit",
    "strip": "lstrip",
    "lstrip": "rstrip",
    "rstrip": "lstrip",
    "index": "count",
    "find": "rfind",
    "rfind": "find",
    "append": "remove",
}
_ARITHMETIC = {"+": "-", "-": "+", "*": "+", "/": "//", "//": "/", "%": "//", "**": "*"}


@dataclass(frozen=True)
class Mutant:
    """One bug: which operator made it, on which line, and the line as it now reads.

    Example:
        >>> source = "def inc(x):\\n    return x + 1\\n"
        >>> [(m.operator, m.line, m.text) for m in mutants(source, first_line=2)][:2]
        [('arithmetic', 2, '    return x - 1'), ('off_by_one', 2, '    return x + 0')]
    """

    operator: str
    line: int
    column: int
    text: str
    variant: int = 1  # the second and later mutants one operator makes at one site (a constant plus one, then minus one)

    @property
    def name(self) -> str:
        """The mutant's name within its source: operator, line and column (and which variant, after the first)."""
        return f"{self.operator}@{self.line}:{self.column}" + (f".{self.variant}" if self.variant > 1 else "")

    def fix(self, source: str) -> tuple[int, int, str]:
        """The line edit ``(start, end, text)`` that undoes this mutant in its mutated source."""
        return (self.line, self.line + self.text.count("\n"), source.splitlines()[self.line - 1])

    def apply(self, source: str) -> str:
        lines = source.splitlines()
        lines[self.line - 1] = self.text
        return "\n".join(lines) + "\n"


def _splice(line: bytes, start: int, end: int, new: str) -> str:
    return (line[:start] + new.encode() + line[end:]).decode()


def _gap_token(line: bytes, start: int, end: int, old: str, new: str) -> str | None:
    """``line`` with the operator ``old`` between byte offsets ``start`` and ``end`` replaced by ``new``, or None."""
    gap = line[start:end].decode()
    stripped = gap.strip().strip("()").strip()
    if " ".join(stripped.split()) != old:
        return None
    at = gap.index(stripped.split()[0])
    return _splice(line, start + at, start + at + len(stripped.encode()), new)


class _Sites(ast.NodeVisitor):
    def __init__(self, lines: list[bytes], first_line: int, locals_: list[str]) -> None:
        self.lines, self.first_line, self.locals = lines, first_line, locals_
        self.found: list[Mutant] = []

    def add(self, operator: str, node: ast.AST, text: str | None) -> None:
        line = getattr(node, "lineno", 0)
        if text is not None and line >= self.first_line and text != self.lines[line - 1].decode():
            self.found.append(Mutant(operator, line, getattr(node, "col_offset", 0), text))

    def one_line(self, *nodes: ast.AST) -> bool:
        return all(getattr(n, "lineno", -1) == getattr(n, "end_lineno", -2) == getattr(nodes[0], "lineno", -3) for n in nodes)

    def segment(self, node: ast.AST, new: str) -> str | None:
        if not self.one_line(node):
            return None
        return _splice(self.lines[node.lineno - 1], node.col_offset, node.end_col_offset, new)  # type: ignore[attr-defined]

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            left, right = sides[index], sides[index + 1]
            old = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in"}.get(type(op))
            old = old or {ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}.get(type(op))
            if old is not None and self.one_line(left, right):
                line = self.lines[left.lineno - 1]
                self.add("comparison", left, _gap_token(line, left.end_col_offset, right.col_offset, old, _COMPARISON[old]))  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        old = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}.get(type(node.op))
        if old is not None and self.one_line(node.left, node.right):
            line = self.lines[node.left.lineno - 1]
            self.add("arithmetic", node, _gap_token(line, node.left.end_col_offset, node.right.col_offset, old, _ARITHMETIC[old]))  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        old = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}.get(type(node.op))
        if old is not None and self.one_line(node.target, node.value):
            line = self.lines[node.target.lineno - 1]
            text = _gap_token(line, node.target.end_col_offset, node.value.col_offset, old + "=", _ARITHMETIC[old] + "=")  # type: ignore[arg-type]
            self.add("arithmetic", node, text)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        left, right = node.values[0], node.values[1]
        if self.one_line(left, right):
            self.add("boolean", node, _gap_token(self.lines[left.lineno - 1], left.end_col_offset, right.col_offset, old, new))  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not) and self.one_line(node, node.operand):
            line = self.lines[node.lineno - 1]
            operand = line[node.operand.col_offset : node.operand.end_col_offset].decode()  # type: ignore[attr-defined]
            self.add("drop_not", node, self.segment(node, operand))
        self.generic_visit(node)

    def negate(self, test: ast.expr) -> None:
        if self.one_line(test):
            source = self.lines[test.lineno - 1][test.col_offset : test.end_col_offset].decode()  # type: ignore[attr-defined]
            self.add("negate_condition", test, self.segment(test, f"not ({source})"))

    def visit_If(self, node: ast.If) -> None:
        self.negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self.negate(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.negate(node.test)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in ("", " ") and self.one_line(node):
            quote = self.lines[node.lineno - 1][node.col_offset : node.col_offset + 1].decode()
            if quote in "'\"":
                self.add("wrong_literal", node, self.segment(node, quote + (" " if node.value == "" else "") + quote))
        if isinstance(node.value, bool):
            self.add("boolean", node, self.segment(node, str(not node.value)))
        elif isinstance(node.value, int) and self.lines[node.lineno - 1][node.col_offset : node.end_col_offset].isdigit():
            self.add("off_by_one", node, self.segment(node, str(node.value + 1)))
            if node.value > 0:
                self.add("off_by_one", node, self.segment(node, str(node.value - 1)))

    def visit_Slice(self, node: ast.Slice) -> None:
        for bound in (node.lower, node.upper):
            if bound is not None and not isinstance(bound, ast.Constant) and self.one_line(bound):
                source = self.lines[bound.lineno - 1][bound.col_offset : bound.end_col_offset].decode()  # type: ignore[attr-defined]
                self.add("off_by_one", bound, self.segment(bound, f"{source} + 1"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args
        function = node.func
        if isinstance(function, ast.Name) and function.id in _FUNCTIONS:
            self.add("wrong_function", function, self.segment(function, _FUNCTIONS[function.id]))
        if isinstance(function, ast.Attribute) and function.attr in _METHODS and self.one_line(function):
            line = self.lines[function.lineno - 1]
            end = int(function.end_col_offset or 0)
            start = end - len(function.attr)
            if line[start:end].decode() == function.attr:
                self.add("wrong_function", function, _splice(line, start, end, _METHODS[function.attr]))
        if isinstance(function, ast.Name) and len(args) == 1 and not node.keywords and not isinstance(args[0], ast.Starred):
            if self.one_line(node, args[0]):
                inner = self.lines[node.lineno - 1][args[0].col_offset : args[0].end_col_offset].decode()  # type: ignore[attr-defined]
                self.add("dropped_call", node, self.segment(node, inner))
        if isinstance(node.func, ast.Name) and node.func.id == "range" and args and not isinstance(args[-1], ast.Constant):
            bound = args[0] if len(args) == 1 else args[1]
            if self.one_line(bound):
                source = self.lines[bound.lineno - 1][bound.col_offset : bound.end_col_offset].decode()  # type: ignore[attr-defined]
                self.add("off_by_one", bound, self.segment(bound, f"{source} + 1"))
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]) and self.one_line(args[0], args[1]):
            line = self.lines[args[0].lineno - 1]
            first = line[args[0].col_offset : args[0].end_col_offset]  # type: ignore[attr-defined]
            second = line[args[1].col_offset : args[1].end_col_offset]  # type: ignore[attr-defined]
            if first != second:
                swapped = (
                    line[: args[0].col_offset]
                    + second
                    + line[args[0].end_col_offset : args[1].col_offset]
                    + first
                    + line[args[1].end_col_offset :]
                )  # type: ignore[attr-defined]
                self.add("swap_arguments", node, swapped.decode())
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in self.locals and len(self.locals) > 1:
            others = [name for name in self.locals if name != node.id]
            self.add("wrong_variable", node, self.segment(node, others[(self.locals.index(node.id)) % len(others)]))

    def visit_Break(self, node: ast.Break) -> None:
        self.add("loop_exit", node, self.segment(node, "continue"))

    def visit_Continue(self, node: ast.Continue) -> None:
        self.add("loop_exit", node, self.segment(node, "break"))


def _locals(function: ast.FunctionDef) -> list[str]:
    """The function's own variables: its arguments and the names it assigns, in order of appearance."""
    names = [a.arg for a in function.args.args]
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
            names.append(node.id)
    return names


def _early_returns(function: ast.FunctionDef, lines: list[bytes], first_line: int) -> list[Mutant]:
    """The loop right before the function's last ``return x`` gets that return as its own last line."""
    body = function.body
    if len(body) < 2 or not isinstance(body[-1], ast.Return) or not isinstance(body[-2], (ast.For, ast.While)):
        return []
    loop, ret = body[-2], body[-1]
    last = loop.body[-1]
    if ret.lineno != ret.end_lineno or last.lineno < first_line or last.end_lineno is None:
        return []
    statement = lines[ret.lineno - 1].decode().strip()
    indent = " " * last.col_offset
    end_line = lines[last.end_lineno - 1].decode()
    return [Mutant("early_return", last.end_lineno, last.col_offset, f"{end_line}\n{indent}{statement}")]


def mutants(source: str, first_line: int = 1) -> list[Mutant]:
    """Every single-site mutant of the functions in ``source`` on lines from ``first_line`` on, in source order.

    Example:
        >>> source = "def positive(xs):\\n    return [x for x in xs if x > 0]\\n"
        >>> sorted({m.operator for m in mutants(source)})
        ['comparison', 'off_by_one', 'wrong_variable']
    """
    tree = ast.parse(source)
    lines = [line.encode() for line in source.splitlines()]
    found: list[Mutant] = []
    for function in [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]:
        sites = _Sites(lines, first_line, _locals(function))
        for statement in function.body:
            sites.visit(statement)
        found += sites.found + _early_returns(function, lines, first_line)
    seen, kept = {source}, []
    variants: dict[tuple[str, int, int], int] = {}
    for mutant in sorted(found, key=lambda m: (m.line, m.column, m.operator, m.text)):
        changed = mutant.apply(source)
        if changed in seen:
            continue
        try:
            ast.parse(changed)
        except SyntaxError:
            continue
        seen.add(changed)
        site = (mutant.operator, mutant.line, mutant.column)
        variants[site] = variants.get(site, 0) + 1
        kept.append(dataclasses.replace(mutant, variant=variants[site]))
    return kept


__all__ = ["OPERATORS", "Mutant", "mutants"]
