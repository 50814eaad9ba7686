"""Untrusted templates rendered bounded and read-only: jinja2's immutable sandbox, with a budget per render.

Contains :func:`render` and :func:`compile_template`, used for agent-harness templates
(harness files are data, written by anyone) and the LLM proposer's prompt. jinja2's
sandbox keeps a template away from Python internals; on its own it bounds neither work
nor memory (``{{ 'x' * 10**10 }}``, two nested ``range(100000)`` loops, a macro that calls
itself twice) and lets a template edit the lists it is given (``commands.reverse()``).
Here:

- **read-only**: the immutable sandbox refuses every method that changes a list, dict or
  set, and each render gets its own copies of the values, so nothing a template does can
  reach the caller's data (a chat agent's command list, say);
- **bounded**: every loop iteration, call, filter and operator is a *step* of the render's
  budget (:data:`LIMITS`): at most so many steps and so much CPU time per render; no value
  a template makes may exceed ``value_chars`` characters (or items, counted with what they
  hold), all it makes together ``made_chars``, and what it writes ``output_chars``. An
  operator or filter whose result would be too large is refused before it runs (a string
  product, a power, padding, ``indent``, ``replace``, ``join``, a ``%`` width), and the
  filters and methods that could not be bounded that way are not offered (``expandtabs``,
  ``to_bytes``, ``urlize``, ``xmlattr``, ``lipsum``, recursive loops).

A render that goes over is one line (:class:`TemplateLimitError`, a jinja2
``SecurityError``), which :func:`render` turns into a :class:`~envharness.errors.SpecError`
naming the limit; so does every other failure of a render.
"""

from __future__ import annotations

import contextvars
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache, update_wrapper
from typing import Any

from jinja2 import StrictUndefined, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from envharness.errors import SpecError


@dataclass(frozen=True)
class Limits:
    """What one render may spend."""

    steps: int = 200_000  # loop iterations, calls, filters and operators
    cpu_s: float = 1.0  # CPU time of the rendering thread
    value_chars: int = 1_000_000  # the largest value a template makes: characters, or items with what they hold
    made_chars: int = 20_000_000  # all the values it makes, together
    output_chars: int = 1_000_000  # what it writes, its buffers (``{% set %}`` blocks, macros) included
    int_bits: int = 4096  # the largest whole number it makes


LIMITS = Limits()


class TemplateLimitError(SecurityError):
    """A template went over its render's budget, or asked for what a template may not do."""


class _Budget:
    __slots__ = ("steps", "made", "output", "started")

    def __init__(self) -> None:
        self.steps, self.made, self.output, self.started = 0, 0, 0, time.thread_time()

    def step(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > LIMITS.steps:
            raise TemplateLimitError(f"the template takes more than {LIMITS.steps} steps (loop iterations, calls, filters, operators)")
        if self.steps & 15 == 0 and time.thread_time() - self.started > LIMITS.cpu_s:
            raise TemplateLimitError(f"the template takes more than {LIMITS.cpu_s:g} s of CPU time")

    def make(self, size: int) -> None:
        if size > LIMITS.value_chars:
            raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")
        self.made += size
        if self.made > LIMITS.made_chars:
            raise TemplateLimitError(f"the template makes more than {LIMITS.made_chars} characters or items in all")

    def write(self, size: int) -> None:
        self.output += size
        if self.output > LIMITS.output_chars:
            raise TemplateLimitError(f"the template writes more than {LIMITS.output_chars} characters")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("template_budget", default=None)


def _budget() -> _Budget:
    """The running render's budget; outside a render (constant folding while compiling) a fresh one."""
    return _BUDGET.get() or _Budget()


def _size(value: Any, limit: int | None = None) -> int:
    """Characters of a string, items of a collection with what they hold, 1 for anything else; counting stops past ``limit``."""
    limit = LIMITS.value_chars if limit is None else limit
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item) + 1
            if total <= limit:
                stack.extend(item)
        elif isinstance(item, dict):
            total += len(item) + 1
            if total <= limit:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, range):
            total += len(item) + 1
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() * 3 // 10 + 1  # its digits
        else:
            total += 1
        if total > limit:
            return total
    return total


def _made(value: Any) -> Any:
    """``value`` after charging what it holds to the budget (refused if too large)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > LIMITS.int_bits:
        raise TemplateLimitError(f"the template makes a number of more than {LIMITS.int_bits} bits")
    if isinstance(value, (str, list, tuple, set, frozenset, dict)):
        _budget().make(_size(value))
    return value


_LAZY = (str, list, tuple, set, frozenset, dict, range, Undefined)


def _materialized(value: Any) -> Any:
    """A lazy iterable (a generator from ``map``, a dict view) as a list, read one step at a time, bounded."""
    if isinstance(value, _LAZY) or not isinstance(value, Iterable):
        return value
    budget, items, size = _budget(), [], 0
    for item in value:
        budget.step()
        size += _size(item) + 1
        if size > LIMITS.value_chars:
            raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")
        items.append(item)
    return items


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_argument(value: Any) -> None:
    if _whole(value) and abs(value) > LIMITS.value_chars:
        raise TemplateLimitError(f"a template's arguments are at most {LIMITS.value_chars}; got {value}")


_PRINTF_WIDTH = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_printf(fmt: Any) -> None:
    """A ``%`` format whose widths and precisions are small: ``%2000000000d`` would make a 2 GB string."""
    for match in _PRINTF_WIDTH.finditer(str(fmt)):
        for part in match.groups():
            if part == "*" or (part is not None and int(part) > 1000):
                raise TemplateLimitError("a %-format's width or precision is at most 1000 in a template")


def _check_format(fmt: Any) -> None:
    """A ``str.format`` string whose fields' widths are small and not computed (``{:{width}}``)."""
    for _, _, spec, _ in string.Formatter().parse(str(fmt)):
        if spec and ("{" in spec or any(int(n) > 1000 for n in re.findall(r"\d+", spec))):
            raise TemplateLimitError("a format field's width or precision is at most 1000 in a template")


def _estimate_join(items: list[Any], separator: Any) -> None:
    size = sum(_size(item) for item in items) + max(len(items) - 1, 0) * _size(separator)
    if size > LIMITS.value_chars:
        raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")


def _estimate_replace(text: Any, old: Any, new: Any, count: Any = None) -> None:
    text, old, new = str(text), str(old), str(new)
    hits = text.count(old) if old else len(text) + 1
    if _whole(count) and count >= 0:
        hits = min(hits, count)
    if len(text) + hits * max(len(new) - len(old), 0) > LIMITS.value_chars:
        raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")


def _estimate_lines(text: Any, per_line: int) -> None:
    text = str(text)
    if len(text) + (text.count("\n") + 1) * per_line > LIMITS.value_chars:
        raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")


def _pre_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> None:
    _estimate_lines(value, len(width) if isinstance(width, str) else int(width) if _whole(width) else 0)


def _pre_wordwrap(value: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None, *args: Any, **kwargs: Any) -> None:
    wrapstring = kwargs.get("wrapstring", wrapstring)
    width = kwargs.get("width", width)
    text = str(value)
    lines = len(text) // max(int(width) if _whole(width) else 1, 1) + text.count("\n") + 1
    if len(text) + lines * len(str(wrapstring or "\n")) > LIMITS.value_chars:
        raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")


def _pre_sum(iterable: Any, attribute: Any = None, start: Any = 0, **kwargs: Any) -> None:
    start = kwargs.get("start", start)
    if not isinstance(start, (int, float)):
        raise TemplateLimitError("sum adds numbers in a template: its start must be a number")


def _pre_tojson(value: Any, indent: Any = None, **kwargs: Any) -> None:
    indent = kwargs.get("indent", indent)
    if indent is not None and (len(indent) if isinstance(indent, str) else indent if _whole(indent) else 0) > 16:
        raise TemplateLimitError("tojson's indent is at most 16 in a template")


# Filters a template may use, with what is checked before each runs (after its arguments and any lazy input).
_PRECHECKS: dict[str, Callable[..., None] | None] = {
    **dict.fromkeys(
        "abs attr batch capitalize center count d default dictsort e escape filesizeformat first float forceescape groupby int "
        "items last length list lower map max min pprint random reject rejectattr reverse round safe select selectattr slice "
        "sort string striptags title trim truncate unique upper urlencode wordcount".split()
    ),
    "format": lambda value, *args, **kwargs: _check_printf(value),
    "indent": _pre_indent,
    "join": lambda value, d="", *args, **kwargs: (
        _estimate_join(list(value), kwargs.get("d", d)) if isinstance(value, (list, tuple, range)) else None
    ),
    "replace": lambda s, old, new, count=None, **kwargs: _estimate_replace(s, old, new, count),
    "sum": _pre_sum,
    "tojson": _pre_tojson,
    "wordwrap": _pre_wordwrap,
}

# Methods of builtin values a template may call (methods that change a value are refused by the immutable sandbox).
_METHODS: dict[type, frozenset[str]] = {
    str: frozenset(
        "capitalize casefold center count endswith find format format_map index isalnum isalpha isascii isdecimal isdigit "
        "isidentifier islower isnumeric isprintable isspace istitle isupper join ljust lower lstrip partition removeprefix "
        "removesuffix replace rfind rindex rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title "
        "upper zfill".split()
    ),
    list: frozenset({"count", "index", "copy"}),
    tuple: frozenset({"count", "index"}),
    dict: frozenset({"get", "keys", "values", "items", "copy"}),
    set: frozenset({"copy", "isdisjoint", "issubset", "issuperset", "union", "intersection", "difference", "symmetric_difference"}),
    frozenset: frozenset({"copy", "isdisjoint", "issubset", "issuperset", "union", "intersection", "difference", "symmetric_difference"}),
    int: frozenset({"bit_length", "bit_count"}),
    float: frozenset({"is_integer"}),
    range: frozenset({"count", "index"}),
}


def _check_method(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Refuse a builtin value's method a template may not call; check the ones that can grow a string."""
    inner = getattr(function, "__wrapped__", function)  # str.format comes wrapped by the sandbox
    owner, name = getattr(inner, "__self__", None), getattr(inner, "__name__", "")
    kind = next((t for t in _METHODS if isinstance(owner, t) and not isinstance(owner, bool)), None)
    if kind is None:
        return args
    if name not in _METHODS[kind]:
        raise TemplateLimitError(f"a template may not call {kind.__name__}.{name}")
    if name in ("format", "format_map"):
        _check_format(owner)
    elif name == "join" and args:
        args = (_materialized(args[0]), *args[1:])
        if isinstance(args[0], (list, tuple, range)):
            _estimate_join(list(args[0]), owner)
    elif name == "replace" and len(args) >= 2:
        _estimate_replace(owner, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count"))
    return args


def _guarded(name: str, function: Callable[..., Any], precheck: Callable[..., None] | None) -> Callable[..., Any]:
    passes = getattr(function, "jinja_pass_arg", None)  # the context, eval context or environment comes first

    def guarded(*args: Any, **kwargs: Any) -> Any:
        _budget().step()
        head = 1 if passes is not None else 0
        values = list(args)
        if len(values) > head:
            values[head] = _materialized(values[head])
        for argument in (*values[head + 1 :], *kwargs.values()):
            _check_argument(argument)
        if precheck is not None and len(values) > head:
            precheck(*values[head:], **kwargs)
        return _made(function(*values, **kwargs))

    update_wrapper(guarded, function)
    if passes is not None:
        guarded.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return guarded


def _literal_text(node: nodes.Node) -> int:
    """Characters of literal text in ``node`` and below (template data and constants)."""
    return sum(
        len(n.data) if isinstance(n, nodes.TemplateData) else len(str(n.value))
        for n in (node, *node.find_all((nodes.TemplateData, nodes.Const)))
        if isinstance(n, (nodes.TemplateData, nodes.Const))
    )


class _BoundedCodeGenerator(CodeGenerator):
    """jinja2's code generator, with every loop counted and every ``~`` concatenation bounded."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        if node.recursive:
            self.fail("recursive loops are not allowed in a harness template; use a macro", node.lineno)
        if not getattr(node, "bounded", False):
            # Each iteration may write the loop's literal text once: charged to the output as it runs.
            text = sum(len(n.data) for n in node.find_all(nodes.TemplateData)) + sum(len(str(n.value)) for n in node.find_all(nodes.Const))
            node.iter = nodes.Call(
                nodes.EnvironmentAttribute("bounded_iter"), [node.iter, nodes.Const(text)], [], None, None, lineno=node.lineno
            )
            node.bounded = True  # type: ignore[attr-defined]
        super().visit_For(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox with a budget per render (see the module's docstring)."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"-", "+"})

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=self._written)
        self.filters = {name: _guarded(name, f, _PRECHECKS[name]) for name, f in self.filters.items() if name in _PRECHECKS}
        self.globals.pop("lipsum", None)

    # -- what the generated code calls ------------------------------------------------------------------------------
    def bounded_iter(self, iterable: Any, text: int) -> Iterator[Any]:
        budget = _budget()
        for item in iterable:
            budget.step()
            budget.write(text)
            yield item

    def bounded_concat(self, parts: tuple[Any, ...]) -> str:
        budget = _budget()
        budget.step()
        pieces = []
        size = 0
        for part in parts:
            size += _size(part)
            if size > LIMITS.value_chars:
                raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")
            pieces.append(part if isinstance(part, str) else str(part))
        return str(_made("".join(pieces)))

    @staticmethod
    def _written(value: Any) -> Any:
        _budget().write(_size(value))
        return value

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _budget().step()
        if operator == "*":
            for count, other in ((left, right), (right, left)):
                if _whole(count) and isinstance(other, (str, list, tuple)) and max(count, 0) * _size(other) > LIMITS.value_chars:
                    raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")
            if _whole(left) and _whole(right) and left.bit_length() + right.bit_length() > LIMITS.int_bits:
                raise TemplateLimitError(f"the template makes a number of more than {LIMITS.int_bits} bits")
        elif operator == "**" and _whole(left) and _whole(right) and abs(left) > 1 and right > 0:
            if left.bit_length() * right > LIMITS.int_bits:
                raise TemplateLimitError(f"the template makes a number of more than {LIMITS.int_bits} bits")
        elif operator == "%" and isinstance(left, str):
            _check_printf(left)
        elif operator == "+" and isinstance(left, (str, list, tuple)) and _size(left) + _size(right) > LIMITS.value_chars:
            raise TemplateLimitError(f"the template makes a value of more than {LIMITS.value_chars} characters or items")
        return _made(self.binop_table[operator](left, right))

    def call_unop(self, context: Any, operator: str, arg: Any) -> Any:
        _budget().step()
        return self.unop_table[operator](arg)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja2's own signature)
        _budget().step()
        args = _check_method(__obj, args, kwargs)
        for argument in (*args, *kwargs.values()):
            _check_argument(argument)
        return _made(super().call(__context, __obj, *args, **kwargs))

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().step()
        value = super().getitem(obj, argument)
        return _made(value) if isinstance(argument, slice) else value


_SANDBOX = BoundedSandbox()


@lru_cache(maxsize=256)
def compile_template(text: str) -> Any:
    """The compiled template; a one-line ValueError if ``text`` is not a template a harness may hold."""
    try:
        return _SANDBOX.from_string(text)
    except TemplateError as error:
        raise ValueError(f"not a valid template ({_first_line(error)})") from None
    except (RecursionError, MemoryError):
        raise ValueError("not a valid template (nested too deeply to read)") from None
    except Exception as error:  # Python's own compiler refusing what jinja2 generated (too many nested parentheses)
        raise ValueError(f"not a valid template ({type(error).__name__}: {_first_line(error)})") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def _copy(value: Any) -> Any:
    """A copy a template may have: lists, tuples and dicts copied all the way down."""
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def render(text: str, **values: Any) -> str:
    """Render an untrusted template, bounded and read-only; any failure is a one-line :class:`~envharness.errors.SpecError`.

    Example:
        >>> render("Room: {{ observation }} ({{ commands|length }} commands)", observation="a kitchen", commands=["look", "go east"])
        'Room: a kitchen (2 commands)'
        >>> try:
        ...     render("{{ 'x' * 10**10 }}")
        ... except SpecError as error:
        ...     print(error)
        agent harness: a template failed to render (TemplateLimitError: the template makes a value of more than 1000000 characters or items); fix the template
    """
    try:
        template = compile_template(text)
    except ValueError as error:
        raise SpecError(f"agent harness: a template failed to render ({error}); fix the template") from None
    token = _BUDGET.set(_Budget())
    try:
        budget, pieces = _budget(), []
        for piece in template.generate(**{name: _copy(value) for name, value in values.items()}):
            budget.write(len(piece))
            pieces.append(piece)
        return "".join(pieces)
    except RecursionError:
        raise SpecError("agent harness: a template failed to render (it recurses too deeply); fix the template") from None
    except MemoryError:
        raise SpecError("agent harness: a template failed to render (it ran out of memory); fix the template") from None
    except Exception as error:
        raise SpecError(
            f"agent harness: a template failed to render ({type(error).__name__}: {_first_line(error)}); fix the template"
        ) from None
    finally:
        _BUDGET.reset(token)


__all__ = ["LIMITS", "BoundedSandbox", "Limits", "TemplateLimitError", "compile_template", "render"]
