"""Where an output's wrong elements are, in plain sentences.

One sentence per pattern the runner measured (runner/wrong_where.py, ``Comparison.wrong``), most
telling first: whole rows ("row 1 of 4 is entirely 0"), a tail block ("every wrong element lies at
out[..., 96:]"), one group of channels, a period ("wrong every 8th column (period 8)"), whole
columns, and values put in place of the reference's ("the wrong elements are 0 where the reference
is not").
"""

from __future__ import annotations

from ..schemas.result import WrongWhere

LISTED = 4  # row or column indices named in a sentence


def wrong_sentences(wrong: WrongWhere, output: str) -> list[str]:
    """The sentences for one output's wrong elements (none when nothing is wrong)."""
    if not wrong.count:
        return []
    out = []
    if wrong.channels is not None and len(wrong.shape) > 1:  # a channel group first: its rows follow from it
        lo, hi = wrong.channels
        which = f"channel {lo}" if hi - lo == 1 else f"channels {lo}..{hi - 1}"
        out.append(f"every wrong element lies in {which} of {wrong.shape[1]} ({output}[:, {lo}:{hi}, ...])")
    out += _rows(wrong)
    rank = len(wrong.shape)
    for d, start in enumerate(wrong.tail):
        if start is not None:
            out.append(f"every wrong element lies at {output}[{_slice(d, rank, f'{start}:')}]")
    for d, k in enumerate(wrong.period):
        if k is not None:
            along = "column" if d == rank - 1 and rank > 1 else f"index along dimension {d}"
            out.append(f"wrong every {_ordinal(k)} {along} (period {k})")
    explained = rank and (wrong.tail[-1] is not None or wrong.period[-1] is not None)
    if 0 < wrong.cols < wrong.of_cols and not explained:
        out.append(_listed(wrong.cols, wrong.of_cols, wrong.col_index, "column", "wrong in every row"))
    for count, what in ((wrong.zeros, "0"), (wrong.nan, "NaN"), (wrong.inf, "Inf")):
        if count == wrong.count:
            out.append(f"the wrong elements are {what} where the reference is not")
        elif count:
            out.append(f"{count} of the {wrong.count} wrong elements are {what} where the reference is not")
    return out


def _rows(w: WrongWhere) -> list[str]:
    """Rows entirely 0 where the reference's are not; rows entirely wrong (when not those)."""
    lead = w.shape[:-1]

    def names(index: list[int]) -> list[str]:
        return [str(i) if len(lead) <= 1 else str(_unravel(i, lead)) for i in index]

    out = []
    if w.rows_zero:
        out.append(
            "every row is entirely 0"
            if w.rows_zero == w.of_rows
            else _listed(w.rows_zero, w.of_rows, names(w.zero_row_index), "row", "entirely 0")
        )
    if 0 < w.rows < w.of_rows and w.row_index != w.zero_row_index:
        out.append(_listed(w.rows, w.of_rows, names(w.row_index), "row", "entirely wrong"))
    return out


def _listed(count: int, total: int, names: list, noun: str, said: str) -> str:
    names = [str(n) for n in names]
    if count == 1:
        return f"{noun} {names[0]} of {total} is {said}"
    if count <= LISTED:
        return f"{noun}s {', '.join(names[:count])} of {total} are {said}"
    return f"{count} of {total} {noun}s are {said} (the first: {', '.join(names[:LISTED])}, ...)"


def _slice(d: int, rank: int, text: str) -> str:
    if d == rank - 1 and rank > 1:
        return f"..., {text}"
    return ", ".join([":"] * d + [text] + (["..."] if d < rank - 1 else []))


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(index))
