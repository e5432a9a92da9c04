"""What the API's input may hold: strict scalars, printable names and commands, finite trees.

Each rule is refused by a validator and stated in the JSON Schema (the OpenAPI) as a pattern.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import unicodedata
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    Strict,
)

# Input limits of a job's free-form parts (the API's body-size cap bounds the rest).
MAX_ENV_VARS = 64
MAX_ENV_VALUE = 4096
MAX_PARAMS_DEPTH = 8
MAX_DEADLINE_S = 1e12  # absolute deadlines: ~31,700 years of control-plane seconds



def _whole(value: Any) -> Any:
    """A float with no fraction (``8.0``) as the int it is: JSON has one number type, and JSON
    Schema's ``integer`` takes it; any other value as it came."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Strict scalars: a JSON string is not an int, a boolean is not a number.
StrictInt = Annotated[int, BeforeValidator(_whole), Strict()]
StrictFloat = Annotated[float, Strict()]
StrictBool = Annotated[bool, Strict()]

# Unicode categories never allowed in a name or key: controls (NUL, CR, LF...), format characters
# (bidi overrides such as U+202E, zero-width joiners), line/paragraph separators, unassigned.
_UNPRINTABLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def unprintable(text: str, *, allow: str = "") -> str | None:
    """The first character of ``text`` that may not appear in a name (as ``U+XXXX``), else None."""
    for ch in text:
        if ch not in allow and unicodedata.category(ch) in _UNPRINTABLE:
            return f"U+{ord(ch):04X}"
    return None


def printable(text: str) -> str:
    bad = unprintable(text)
    if bad is not None:
        raise ValueError(f"contains the control or format character {bad}; "
                         "use printable characters only")
    return text


def printable_command(text: str) -> str:
    bad = unprintable(text, allow="\t\n")
    if bad is not None:
        raise ValueError(f"contains the control or format character {bad}; "
                         "use printable characters (tabs and newlines allowed)")
    return text


def check_finite_tree(value: Any, path: str, depth: int = 0) -> None:
    """Refuse non-finite numbers, unprintable keys and deep nesting anywhere in a JSON value."""
    if depth > MAX_PARAMS_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_PARAMS_DEPTH} levels; flatten it")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: {value} is not a finite number; send a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            bad = unprintable(str(k))
            if bad is not None:
                raise ValueError(f"{path}: key {str(k)!r} contains the control or format "
                                 f"character {bad}; use printable characters only")
            check_finite_tree(v, f"{path}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_finite_tree(v, f"{path}[{i}]", depth + 1)


@functools.cache
def printable_pattern(allow: str = "") -> str:
    """A JSON Schema ``pattern`` refusing what :func:`unprintable` refuses (but ``allow``) among
    the assigned characters, as this Python's Unicode data has them: 26 ranges. Unassigned code
    points (hundreds of ranges, a pattern no generator draws from quickly) and surrogates (no
    regex engine of a validator takes them; no UTF-8 text holds one) are left to the schema's
    description."""
    ranges: list[str] = []
    start = None
    for cp in range(sys.maxunicode + 2):
        refused = (cp <= sys.maxunicode and chr(cp) not in allow
                   and unicodedata.category(chr(cp)) in _UNPRINTABLE - {"Cn", "Cs"})
        if refused and start is None:
            start = cp
        elif not refused and start is not None:
            ranges.append(_char(start) if start == cp - 1 else f"{_char(start)}-{_char(cp - 1)}")
            start = None
    return f"^[^{''.join(ranges)}]*$"


def _char(cp: int) -> str:
    """One code point inside a regex character class: escaped when special there, else the
    character itself."""
    return re.escape(chr(cp)) if chr(cp) in "\\]^-[" else chr(cp)


def _printable_schema(schema: dict[str, Any]) -> None:
    schema["pattern"] = printable_pattern()
    schema.setdefault("description", PRINTABLE_TEXT)


def _command_schema(schema: dict[str, Any]) -> None:
    schema["pattern"] = printable_pattern(allow="\t\n")
    schema.setdefault("description", PRINTABLE_TEXT + " (tabs and newlines allowed)")


def env_schema(schema: dict[str, Any]) -> None:
    """Every key of an env mapping matches ENV_KEY (pydantic states it for the values only)."""
    schema.setdefault("propertyNames", {})["pattern"] = ENV_KEY


def params_schema(schema: dict[str, Any]) -> None:
    schema["propertyNames"] = {"pattern": printable_pattern(), "description": PRINTABLE_TEXT}


# Printable text: refused by the validator, stated as a pattern in the JSON Schema
PRINTABLE_TEXT = ("printable: no control, format, private-use, surrogate, separator or "
                  "unassigned characters")
Printable = Field(json_schema_extra=_printable_schema)
PrintableCommand = Field(json_schema_extra=_command_schema)
Name = Annotated[str, AfterValidator(printable), Printable]
Command = Annotated[str, AfterValidator(printable_command), PrintableCommand]
ENV_KEY = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvKey = Annotated[str, Field(min_length=1, max_length=256, pattern=ENV_KEY)]
EnvValue = Annotated[str, Field(max_length=MAX_ENV_VALUE), AfterValidator(printable_command),
                     PrintableCommand]
