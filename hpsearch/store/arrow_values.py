"""Report values -> Arrow arrays, typed as pandas types a column of them.

The history's appends (:class:`hpsearch.store.parts.HistoryWriter`) convert only the new
rows, without pandas; these conversions give each column the type a whole write through
pandas would give it, or raise :class:`Unfit` where the rows do not fit the column (a
string among numbers), and the history is then written whole again.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

__all__ = ["Unfit", "all_numbers", "infer_array", "is_missing", "pandas_entry", "to_arrow"]


class Unfit(Exception):
    """New rows do not fit the table's column types: write the history whole again."""


def is_missing(value: Any) -> bool:
    """``None`` or NaN: a cell pandas stores as missing."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def all_numbers(values: Iterable[Any]) -> bool:
    """Whether every value is a number (numpy's included) or missing."""
    return all(is_missing(v) or (isinstance(v, (int, float)) and not isinstance(v, bool))
               or _is_numpy_number(v) for v in values)


def _is_numpy_number(value: Any) -> bool:
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind in ("i", "u", "f")


def to_arrow(values: list[Any], type_):
    """``values`` as an array of ``type_``, converted as pandas converts a column of
    them; :class:`Unfit` when they do not fit (a string among numbers)."""
    import pyarrow as pa

    try:
        if pa.types.is_integer(type_):
            out = []
            for v in values:
                if is_missing(v):
                    out.append(None)
                elif isinstance(v, bool) or not (isinstance(v, int) or _is_numpy_number(v)):
                    raise Unfit(v)
                elif float(v) != int(v):
                    raise Unfit(v)
                else:
                    out.append(int(v))
            return pa.array(out, type=type_)
        if pa.types.is_floating(type_):
            if any(isinstance(v, bool) or not (is_missing(v) or isinstance(v, (int, float))
                                              or _is_numpy_number(v)) for v in values):
                raise Unfit(values)
            return pa.array(values, type=type_, from_pandas=True)
        if pa.types.is_string(type_) or pa.types.is_large_string(type_):
            if any(not (is_missing(v) or isinstance(v, str)) for v in values):
                raise Unfit(values)
            return pa.array([None if is_missing(v) else v for v in values], type=type_)
        if pa.types.is_boolean(type_):
            if any(not (is_missing(v) or isinstance(v, bool)) for v in values):
                raise Unfit(values)
            return pa.array([None if is_missing(v) else bool(v) for v in values], type=type_)
        return pa.array(values, type=type_, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise Unfit(exc) from None


def infer_array(values: list[Any]):
    """A new column's array, typed as pandas would type it: numbers with gaps are
    float64, one kind of value keeps its type, mixed kinds do not fit."""
    import pyarrow as pa

    present = [v for v in values if not is_missing(v)]
    if not present:
        return pa.nulls(len(values))
    kinds = {bool if isinstance(v, bool) else float if isinstance(v, (int, float)) or
             _is_numpy_number(v) else type(v) for v in present}
    if len(kinds) > 1:
        raise Unfit(kinds)
    kind = kinds.pop()
    if kind is float:
        ints = all(isinstance(v, int) or getattr(getattr(v, "dtype", None), "kind", "") in "iu"
                   for v in present)
        if ints and len(present) == len(values):
            return to_arrow(values, pa.int64())
        return to_arrow(values, pa.float64())
    if kind is bool and len(present) == len(values):
        return to_arrow(values, pa.bool_())
    if kind is str:
        return to_arrow(values, pa.string())
    raise Unfit(kind)  # bools with gaps, other objects: as pandas would (object column)


def pandas_entry(name: str, type_) -> dict:
    """pandas' metadata for one column of Arrow type ``type_`` (how it reads back)."""
    import pyarrow as pa

    table = pa.table({name: pa.array([], type=type_)})
    back = pa.Table.from_pandas(table.to_pandas(), preserve_index=False)
    entries = json.loads(back.schema.metadata[b"pandas"])["columns"]
    return next(e for e in entries if e.get("name") == name)
