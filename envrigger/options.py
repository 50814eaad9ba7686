"""Command-line options made from a pydantic model's fields: bounds, default and help written once, next to the field.

Contains :class:`Flag` (how one field appears on the command line) and
:func:`model_options` (the ``typer`` parameters for a model's fields). ``envrigger run``
takes its loop settings this way from :class:`~envrigger.loop.config.LoopConfig`, so an
option's default, bounds and ``--help`` text are those of the field the run stores in
``loop.json``.

Example:
    >>> from pydantic import BaseModel, Field
    >>> class Settings(BaseModel):
    ...     rounds: int = Field(3, ge=1, le=1000, description="rounds to train")
    >>> [option] = model_options(Settings, {"rounds": Flag()})
    >>> option.name, option.default.default, option.default.param_decls, option.default.min, option.default.max
    ('rounds', 3, ('--rounds',), 1, 1000)
    >>> option.default.help
    'Rounds to train.'
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Flag:
    """How one field appears on the command line.

    Args:
        names: the option's names (default ``--field-name``).
        kind: the type the command line reads when it differs from the field's (a
            comma-separated ``str`` for a list, say); the command converts it.
        metavar: the placeholder ``--help`` shows.
        help: the ``--help`` text, when the field's description does not suit a command line.
    """

    names: tuple[str, ...] = field(default_factory=tuple)
    kind: Any = None
    metavar: str | None = None
    help: str | None = None


def _command_line_type(annotation: Any) -> Any:
    """The type typer reads for a field: ``X | None`` and ``Literal[...]`` of strings become what typer knows."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return str
    if args and len(args) < len(get_args(annotation)):  # Optional[X]
        return _command_line_type(args[0]) if len(args) == 1 else str
    return annotation


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else ""


def _bounds(info: FieldInfo) -> dict[str, Any]:
    """``min``/``max`` for typer from the field's closed bounds (open bounds are left to the model, which names the option)."""
    found: dict[str, Any] = {}
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            found["min"] = item.ge
        elif isinstance(item, annotated_types.Le):
            found["max"] = item.le
    return found


def model_options(model: type[BaseModel], flags: dict[str, Flag]) -> list[inspect.Parameter]:
    """One ``typer.Option`` parameter per field named in ``flags``, in that order.

    Default, closed bounds (``ge``/``le``) and help come from the field; a boolean field
    becomes a switch named by its flag alone (``--step-in``), and one on by default a pair
    (``--step-in/--no-step-in``). Raises ``KeyError`` for a name the model lacks.
    """
    parameters = []
    for name, flag in flags.items():
        info = model.model_fields[name]
        names = flag.names or (f"--{name.replace('_', '-')}",)
        if info.annotation in (bool, "bool") and info.default is True and "/" not in names[0]:
            names = (f"{names[0]}/--no-{names[0][2:]}", *names[1:])  # a switch that is on by default can be turned off
        kind = flag.kind or _command_line_type(info.annotation)
        default = info.get_default(call_default_factory=True)
        if kind is str and isinstance(default, list):  # a list read as one comma-separated word
            default = ",".join(map(str, default))
        option = typer.Option(
            default,
            *names,
            help=flag.help or _sentence(info.description or ""),
            metavar=flag.metavar,
            show_default=default is not None and default != "",
            **_bounds(info),
        )
        parameters.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind))
    return parameters
