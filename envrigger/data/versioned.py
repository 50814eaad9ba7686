"""Versioned records: a stored result carries its ``schema_version``; old files load, newer ones are refused in one line.

Contains :class:`Readable` (a model that code written for dict results can still read)
and :class:`Versioned` (a :class:`Readable` with a ``schema_version``; each subclass states
the version it writes in ``CURRENT``). The loop's results
(:mod:`envrigger.loop.results`), a diagnosis and a ledger comparison are built on them.

Example:
    >>> class Score(Versioned):
    ...     CURRENT = 2
    ...     value: float
    >>> old = Score.model_validate({"value": 0.5})   # written before versions were recorded
    >>> old.schema_version, old["value"], "value" in old, old.dump()
    (0, 0.5, True, {'schema_version': 2, 'value': 0.5})
    >>> Score.model_validate({"value": 0.5, "schema_version": 3})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for Score
      Value error, schema_version 3 is newer than this envrigger reads (2); upgrade envrigger to read it [type=value_error, ...]
    ...
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, model_validator


class Readable(BaseModel):
    """A result model that code written for the dict results can still read: ``r["key"]``, ``r.get``, ``"key" in r``, ``r.items()``.

    A key is *in* the record when the file (or the code that made it) gave it; attributes are
    the typed way to read. A record equals the dict it was read from.
    """

    def _given(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.model_fields_set}, **(self.__pydantic_extra__ or {})}

    def __getitem__(self, key: str) -> Any:
        given = self._given()
        if key not in given:
            raise KeyError(key)
        return given[key]

    def __contains__(self, key: object) -> bool:
        return key in self._given()

    def get(self, key: str, default: Any = None) -> Any:
        return self._given().get(key, default)

    def keys(self) -> Any:
        return self._given().keys()

    def items(self) -> Any:
        return self._given().items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):  # compared with the dict it was read from (or written as)
            return bool(self.model_dump(mode="json", exclude_unset=True) == other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable records: not hashable, as BaseModel


class Versioned(Readable):
    """A record with a ``schema_version``: absent means 0 (written before versions); newer than ``CURRENT`` is refused.

    Code that makes a fresh record passes ``schema_version=cls.CURRENT`` or writes it with
    :meth:`dump`, which always writes ``CURRENT``.
    """

    CURRENT: ClassVar[int] = 1
    schema_version: int = 0

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        version = data.get("schema_version", 0) if isinstance(data, dict) else 0
        if isinstance(version, int) and version > cls.CURRENT:
            raise ValueError(f"schema_version {version} is newer than this envrigger reads ({cls.CURRENT}); upgrade envrigger to read it")
        return data

    def dump(self) -> dict[str, Any]:
        """The JSON-ready dict, as written: the fields given, at the current schema version."""
        return {"schema_version": self.CURRENT, **self.model_dump(mode="json", exclude_unset=True, exclude={"schema_version"})}
