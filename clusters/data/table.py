"""The CSV reader every dataset loader uses: typed columns, each cell checked, errors naming the line and the fix."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from controlplane.core.errors import BadDataFile, DataNotFound

FloatArray = npt.NDArray[np.float64]


IntArray = npt.NDArray[np.int64]


BoolArray = npt.NDArray[np.bool_]


StrArray = npt.NDArray[np.str_]


LINE = "__line__"


@dataclass(frozen=True)
class Col:
    """One column a loader reads: its type and the values it accepts.

    ``kind`` is str, int (whole numbers) or float (finite numbers; never NaN or inf). ``blank``
    lets a cell be empty (NaN for numbers); a column that is not ``required`` may be absent from
    the header and then reads as ``default``. ``missing_fix`` replaces the fix when it is absent.
    """

    name: str
    kind: str = "str"
    required: bool = True
    blank: bool = False
    default: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] | None = None
    unique: bool = False
    missing_fix: str | None = None

    def expects(self) -> str:
        """What a good cell looks like, for the fix of a message."""
        if self.choices:
            what = "one of " + ", ".join(self.choices)
        elif self.kind == "str":
            what = "a non-empty value"
        else:
            what = "a whole number" if self.kind == "int" else "a finite number"
            if self.low is not None:
                what += f" {'>' if self.low_open else '>='} {self.low:g}"
            if self.high is not None:
                what += f" and <= {self.high:g}"
        return f"write {what}" + (" (or leave it blank)" if self.blank else "") + f" in column {self.name}"

    def parse(self, cell: str) -> str | float:
        """The cell's value; raises ValueError with what is wrong with it."""
        if cell == "":
            if self.blank:
                return "" if self.kind == "str" else math.nan
            raise ValueError("empty")
        if self.kind == "str":
            if self.choices is not None and cell not in self.choices:
                raise ValueError(f"{cell!r} is not one of {', '.join(self.choices)}")
            return cell
        try:
            v = float(cell)
        except ValueError:
            raise ValueError(f"{cell!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{cell!r} is not a finite number")
        if self.kind == "int" and v != int(v):
            raise ValueError(f"{cell!r} is not a whole number")
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            raise ValueError(f"{cell} is {'<=' if self.low_open else '<'} {self.low:g}")
        if self.high is not None and v > self.high:
            raise ValueError(f"{cell} is > {self.high:g}")
        return v


def read_table(path: Path, what: str, columns: tuple[Col, ...]) -> dict[str, np.ndarray]:
    """Every column of ``columns`` as an array (plus :data:`LINE`, each row's line number).

    Refuses, naming the file, the line and the column: a missing file, an empty file, a header
    without a required column or with one twice, a row with too few or too many cells, a cell of
    the wrong type or range, a repeated id, and a file with no rows. Extra columns are ignored.
    """
    if not path.is_file():
        raise DataNotFound(what, str(path.parent))
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise BadDataFile(path, "empty file (no header line)", fix=f"a {what} starts with a header line")
            index = _header_index(path, header, columns)
            values: dict[str, list[str | float]] = {c.name: [] for c in columns}
            lines: list[int] = []
            seen: dict[str, dict[str, int]] = {c.name: {} for c in columns if c.unique}
            for cells in reader:
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise BadDataFile(path, f"{len(cells)} cells, the header has {len(header)}",
                                      line=reader.line_num, fix="every row needs one cell per header column "
                                      "(a truncated or hand-edited file?)")
                for c in columns:
                    cell = cells[index[c.name]] if c.name in index else c.default
                    try:
                        values[c.name].append(c.parse(cell))
                    except ValueError as exc:
                        raise BadDataFile(path, str(exc), line=reader.line_num, column=c.name,
                                          fix=c.expects()) from None
                    if c.unique:
                        first = seen[c.name].setdefault(cell, reader.line_num)
                        if first != reader.line_num:
                            raise BadDataFile(path, f"{cell!r} repeats line {first}", line=reader.line_num,
                                              column=c.name, fix=f"give each row its own {c.name}")
                lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise BadDataFile(path, "not UTF-8 text", fix=f"a {what} is a UTF-8 CSV file") from exc
    except csv.Error as exc:
        raise BadDataFile(path, f"not a CSV file ({exc})", fix=f"a {what} is a CSV file") from exc
    if not lines:
        raise BadDataFile(path, "no rows after the header", fix=f"a {what} needs at least one row")
    out: dict[str, np.ndarray] = {LINE: np.asarray(lines, dtype=np.int64)}
    for c in columns:
        dtype = {"str": np.str_, "int": np.int64, "float": np.float64}[c.kind]
        out[c.name] = np.asarray(values[c.name], dtype=dtype)
    return out


def _header_index(path: Path, header: list[str], columns: tuple[Col, ...]) -> dict[str, int]:
    names = [h.strip() for h in header]
    twice = sorted({h for h in names if names.count(h) > 1})
    if twice:
        raise BadDataFile(path, f"header names {', '.join(twice)} more than once", line=1,
                          fix="keep one column of each name")
    missing = sorted((c for c in columns if c.required and c.name not in names), key=lambda c: c.missing_fix is None)
    if missing:
        miss = ", ".join(c.name for c in missing)
        fix = missing[0].missing_fix or "the header needs: " + ", ".join(c.name for c in columns if c.required)
        raise BadDataFile(path, f"no {miss} column{'s' if len(missing) > 1 else ''}", fix=fix)
    return {h: i for i, h in enumerate(names)}
