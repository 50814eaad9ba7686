"""Reading the files a command is given: whatever is wrong with one is one line naming it.

Contains :func:`read_text`, :func:`read_json` (a file's JSON, of the top-level shape the
caller expects), :func:`parse_json` (the same for text already read), :func:`read_model`
(a file's JSON validated by a pydantic model, the first bad field named) and
:func:`json_kind`. The one place where envharness and envrigger read a JSON file a user or
an earlier run left: every problem of the file itself (missing, a directory, unreadable,
not UTF-8, empty, not JSON, nested too deeply, an integer too long to read, an array where an
object belongs) is raised as one line, ``PATH: what is wrong; how to fix it``, of the
error class the caller names (:class:`~envharness.errors.UnreadableFileError` by default),
so a command prints it and exits with code 2, and code that reads the result may rely on
its shape.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "loop.json"
    >>> _ = path.write_text('[1, 2]')
    >>> try:
    ...     read_json(path, fix="restore it from a copy")
    ... except ValueError as error:
    ...     print(str(error).replace(str(path.parent), "DIR"))
    DIR/loop.json: holds an array, not an object; restore it from a copy
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from envharness.errors import UnreadableFileError

Model = TypeVar("Model", bound=BaseModel)
FIX = "restore it from a copy, or write it again"
LONGEST_DIGITS = 4000  # Python refuses to read an integer of more than 4300 digits from text; no file of ours holds one


class _TooLong(Exception):
    def __init__(self, digits: int) -> None:
        self.digits = digits


def _whole_number(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > LONGEST_DIGITS:
        raise _TooLong(digits)
    return int(text)


def json_kind(value: Any) -> str:
    """A JSON value's kind in words, for a message: ``an object``, ``an array``, ``a string``, ``a number``, ``true or false``, ``null``.

    Example:
        >>> json_kind([]), json_kind(None), json_kind(2.5), json_kind(dict)
        ('an array', 'null', 'a number', 'an object')
    """
    kind = value if isinstance(value, type) else type(value)
    if issubclass(kind, bool):
        return "true or false"
    for python, words in ((dict, "an object"), (list, "an array"), (str, "a string"), ((int, float), "a number")):
        if issubclass(kind, python):
            return words
    return "null" if value is None or kind is type(None) else f"a {kind.__name__}"


def read_text(path: str | Path, fix: str = FIX, error: type[Exception] = UnreadableFileError) -> str:
    """The UTF-8 text of the file at ``path``; ``error`` (one line naming the file, then ``fix``) if it is not a readable text file."""
    path = Path(path)
    if not path.exists():
        raise error(f"{path}: does not exist; {fix}")
    if path.is_dir():
        raise error(f"{path}: a directory, not a file; {fix}")
    try:
        data = path.read_bytes()
    except OSError as problem:
        raise error(f"{path}: cannot be read ({problem.strerror or type(problem).__name__}); check the file and its permissions") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as problem:
        raise error(f"{path}: not UTF-8 text (byte {problem.start} is {data[problem.start]:#04x}: binary data?); {fix}") from None


def parse_json(
    text: str, where: str | Path, shape: type | None = dict, fix: str = FIX, error: type[Exception] = UnreadableFileError
) -> Any:
    """The JSON value of ``text`` (what ``where`` holds), of type ``shape`` (None: any); ``error`` naming ``where`` otherwise.

    Example:
        >>> parse_json('{"seeds": 2}', "seeds.json")
        {'seeds': 2}
        >>> parse_json('{"seeds": 2', "seeds.json")
        Traceback (most recent call last):
        ...
        envharness.errors.UnreadableFileError: seeds.json: not valid JSON (Expecting ',' delimiter: line 1, column 12); restore it from a copy, or write it again
    """
    if not text.strip():
        raise error(f"{where}: empty; {fix}")
    try:
        data = json.loads(text, parse_int=_whole_number)
    except json.JSONDecodeError as problem:
        raise error(f"{where}: not valid JSON ({problem.msg}: line {problem.lineno}, column {problem.colno}); {fix}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to read; {fix}") from None
    except _TooLong as problem:
        raise error(f"{where}: holds an integer of {problem.digits} digits, too long to read; {fix}") from None
    if shape is not None and not isinstance(data, shape):
        raise error(f"{where}: holds {json_kind(data)}, not {json_kind(shape)}; {fix}")
    return data


def read_json(path: str | Path, shape: type | None = dict, fix: str = FIX, error: type[Exception] = UnreadableFileError) -> Any:
    """The JSON value of the file at ``path``, of type ``shape`` (``dict`` by default; None: any); ``error`` naming the file otherwise."""
    return parse_json(read_text(path, fix, error), path, shape, fix, error)


def problem_of(invalid: ValidationError) -> str:
    """``field: what is wrong`` for the first error of a pydantic validation, in one line.

    Example:
        >>> from pydantic import BaseModel
        >>> class Seeds(BaseModel):
        ...     seeds: int
        >>> try:
        ...     Seeds.model_validate({"seeds": []})
        ... except ValidationError as error:
        ...     problem_of(error)
        'seeds: input should be a valid integer'
    """
    first = invalid.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = str(first["msg"]).removeprefix("Value error, ").splitlines()[0]
    return f"{field}: {message[:1].lower()}{message[1:]}"


def read_model(model: type[Model], path: str | Path, fix: str = FIX, error: type[Exception] = UnreadableFileError) -> Model:
    """The file at ``path`` as ``model``; ``error`` naming the file (and its first bad field) otherwise."""
    data = read_json(path, dict, fix, error)
    try:
        return model.model_validate(data)
    except ValidationError as invalid:
        raise error(f"{path}: {problem_of(invalid)}; {fix}") from None


__all__ = ["json_kind", "parse_json", "problem_of", "read_json", "read_model", "read_text"]
