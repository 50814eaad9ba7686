"""Models valid on every path: :class:`ValidatedModel`, the base of every pydantic model the project copies or constructs.

pydantic validates what ``__init__``, ``model_validate`` and ``model_validate_json`` are
given, but stores what ``model_copy(update=...)``, ``model_construct`` and an attribute
assignment are given as it is. An object made on those paths could escape the bounds the
same object read from JSON obeys, and be refused when its JSON was read back. A
:class:`ValidatedModel` validates on every one of them, so whatever exists passed its
validators: a copy with changes is validated as a whole (keeping its private attributes
and which fields were given), a construction is a validation, and an assignment is
validated (``validate_assignment``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict


class ValidatedModel(BaseModel):
    """A pydantic model whose every instance passed its validators, however it was made.

    Example:
        >>> from pydantic import Field
        >>> class Budget(ValidatedModel):
        ...     steps: int = Field(10, ge=1, le=100)
        >>> Budget().model_copy(update={"steps": 20}).steps
        20
        >>> Budget().model_copy(update={"steps": 10**9})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for Budget
        steps
          Input should be less than or equal to 100 [type=less_than_equal, input_value=1000000000, input_type=int]
        ...
        >>> Budget.model_construct(steps=0)
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for Budget
        ...
    """

    model_config = ConfigDict(validate_assignment=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, validated as a whole, as the same data read from JSON would be (a bound broken raises)."""
        copied = super().model_copy(update=update, deep=deep)
        if not update:
            return copied  # an exact copy of a valid instance is valid
        # Every field (and any key the update added) through the constructor: its validators, bounds and extra="forbid".
        made = type(self)(**dict(copied))
        object.__setattr__(made, "__pydantic_fields_set__", set(copied.__pydantic_fields_set__) & set(type(self).model_fields))
        if copied.__pydantic_private__ is not None:
            object.__setattr__(made, "__pydantic_private__", {**(made.__pydantic_private__ or {}), **copied.__pydantic_private__})
        return made

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Self:  # type: ignore[override]  # the pydantic plugin types it per model
        """A validated instance: what pydantic builds unvalidated here is built through the constructor instead."""
        made = cls(**values)
        if _fields_set is not None:
            object.__setattr__(made, "__pydantic_fields_set__", set(_fields_set))
        return made


__all__ = ["ValidatedModel"]
