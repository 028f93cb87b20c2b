"""Position-resolved metrics of one cell, vectorised with numpy over pyarrow's flattened lists.

Every request of a cell is compared with the cell's reference request (the first one carrying the
most common signature): at each prompt position the spread (max - min) of the forced token's
logprob, top-1 agreement and top-k overlap; over generated positions the first divergent token and
the top1-top2 gap there, so a near-tie flip is told apart from a real defect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_KEY_SHIFT = np.int64(1) << np.int64(32)


def as_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):  # one chunk (the usual cell): no copy
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _flatten(lists: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Values and per-row lengths (null lists have length 0)."""
    if not lists.null_count:  # the offsets say it all: two numpy calls instead of three kernels
        offsets = lists.offsets.to_numpy()
        lengths: np.ndarray = (offsets[1:] - offsets[:-1]).astype(np.int64)  # np.diff's checks cost more here
        return lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])), lengths
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return pc.list_flatten(lists), lengths


def _index(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For flattened values: the owning row and the index within that row."""
    rows = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.cumsum(lengths) - lengths
    return rows, np.arange(int(lengths.sum())) - np.repeat(starts, lengths)


def padded_matrix(column: pa.ChunkedArray | pa.Array, fill: float, dtype: type[np.generic] = np.float64
                  ) -> np.ndarray:
    """list<number> -> [rows, longest] matrix padded with `fill` (null values too, for floats)."""
    values, lengths = _flatten(as_array(column))
    width = int(lengths.max()) if len(lengths) else 0
    if values.null_count:
        values = pc.fill_null(values.cast(pa.float64()), np.nan)
    flat: np.ndarray = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    if len(lengths) and len(flat) == width * len(lengths):  # none shorter than the longest: a reshape, no scatter
        return flat.reshape(len(lengths), width)
    out: np.ndarray = np.full((len(lengths), width), fill, dtype=dtype)
    rows, cols = _index(lengths)
    if len(rows):
        out[rows, cols] = flat
    return out


@dataclass
class PromptPositions:
    spread: np.ndarray  # [P] max - min of the forced token's logprob across requests
    top1_agreement: np.ndarray  # [P] share of requests whose top-1 equals the reference's
    topk_overlap: np.ndarray  # [P] worst share of the reference's top-k found in a request's top-k
    forced_reference: np.ndarray  # [P] the reference request's forced-token logprobs


def prompt_positions(column: pa.ChunkedArray | pa.Array, reference: int) -> PromptPositions | None:
    """From vLLM-style prompt_logprobs (per position: the prompt token first, then ranks 1..k)."""
    outer = as_array(column)
    if outer.null_count == len(outer):
        return None
    positions, per_row = _flatten(outer)
    entries, per_position = _flatten(positions)
    n, width = len(per_row), int(per_row.max())
    pos_row, pos_col = _index(per_row)
    entry_pos, entry_in_pos = _index(per_position)
    token = pc.fill_null(entries.field("token_id"), -1).to_numpy(zero_copy_only=False)
    logprob = pc.fill_null(entries.field("logprob"), np.nan).to_numpy(zero_copy_only=False)
    rank = pc.fill_null(entries.field("rank"), -1).to_numpy(zero_copy_only=False)
    row_of, col_of = pos_row[entry_pos], pos_col[entry_pos]

    forced = np.full((n, width), np.nan)
    first = entry_in_pos == 0
    forced[row_of[first], col_of[first]] = logprob[first]
    top1 = np.full((n, width), -1, dtype=np.int64)
    is_top1 = rank == 1
    top1[row_of[is_top1], col_of[is_top1]] = token[is_top1]

    in_topk = rank >= 1
    keys = col_of * _KEY_SHIFT + token
    ref_mask = in_topk & (row_of == reference)
    ref_k = np.bincount(col_of[ref_mask], minlength=width).astype(np.float64)
    found = in_topk & np.isin(keys, keys[ref_mask])
    hits = np.zeros((n, width))
    np.add.at(hits, (row_of[found], col_of[found]), 1.0)
    present = np.zeros((n, width), dtype=bool)
    present[pos_row[per_position > 0], pos_col[per_position > 0]] = True
    with np.errstate(invalid="ignore", divide="ignore"):
        overlap = np.where(present & (ref_k > 0), hits / ref_k, np.nan)
        agree = np.where(present & (top1[reference] >= 0), top1 == top1[reference], np.nan)
        return PromptPositions(
            spread=_spread(forced),
            top1_agreement=_nan_reduce(np.nanmean, agree),
            topk_overlap=_nan_reduce(np.nanmin, overlap),
            forced_reference=forced[reference].copy())  # a copy: a view would pin the matrix


def _spread(matrix: np.ndarray) -> np.ndarray:
    """max - min per column over the values present; NaN where a column has none."""
    spread: np.ndarray
    if not np.isnan(matrix).any():  # the usual case: plain max/min, without nanmax's masked copies
        spread = matrix.max(axis=0) - matrix.min(axis=0)
    else:
        spread = _nan_reduce(np.nanmax, matrix) - _nan_reduce(np.nanmin, matrix)
    return spread


def _other_rows(matrix: np.ndarray, reference: int) -> np.ndarray:
    """The reference row and the rows that differ from it: the spread of these is the spread of all, the others
    being copies of it (a NaN differs from itself, so a row with one is kept), at a fraction of the cost."""
    keep = _rows_differ(matrix, matrix[reference])
    keep[reference] = True
    rows: np.ndarray = matrix[keep]
    return rows


def _rows_differ(matrix: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Per row of the matrix: whether any value differs from `row`'s (a NaN differs from itself). Each row is
    compared with `row` as one run of bytes (arrow's fixed-size binary equality: a memcmp a row, no matrix of
    bools). For floats, bits apart are values apart but for 0.0 and -0.0, so where `row` holds a zero the rows
    apart are compared again by value; where it holds a NaN, a row the same bit for bit still differs, so those
    go the plain way."""
    if not matrix.size or not matrix.flags.c_contiguous or (matrix.dtype.kind == "f" and np.isnan(row).any()):
        plain: np.ndarray = (matrix != row).any(axis=1)
        return plain
    kind = pa.binary(row.nbytes)
    rows = pa.Array.from_buffers(kind, len(matrix), [None, pa.py_buffer(matrix)])
    differ: np.ndarray = pc.not_equal(rows, pa.scalar(row.tobytes(), kind)).to_numpy(zero_copy_only=False,
                                                                                    writable=True)
    if matrix.dtype.kind == "f" and (row == 0).any():
        apart = np.flatnonzero(differ)
        differ[apart] = (matrix[apart] != row).any(axis=1)
    return differ


def _nan_reduce(func: object, matrix: np.ndarray) -> np.ndarray:
    out = np.full(matrix.shape[1], np.nan)
    valid = ~np.all(np.isnan(matrix), axis=0)
    if valid.any():
        out[valid] = func(matrix[:, valid], axis=0)  # type: ignore[operator]
    return out


@dataclass
class GeneratedPositions:
    spread: np.ndarray  # [T] max - min of the generated token's logprob across requests
    divergent_rows: int  # requests whose token sequence differs from the reference's
    first_divergent: int | None  # earliest generated position where any request differs
    reference_tokens: np.ndarray  # [T] the reference's token codes (for parity across arms)
    flips: np.ndarray  # [T] requests whose token differs from the reference's there, where both have one


def token_codes(token_ids: pa.ChunkedArray | pa.Array, tokens: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """[rows, T] integer codes of the generated tokens, -1 padded: token ids where the server returned
    them, else the token strings encoded consistently within this call."""
    ids = as_array(token_ids)
    if ids.null_count < len(ids):
        return padded_matrix(ids, -1, np.int64)
    strings = as_array(tokens)
    values, lengths = _flatten(strings)
    codes = _first_seen_codes(values)
    out = np.full((len(lengths), int(lengths.max()) if len(lengths) else 0), -1, dtype=np.int64)
    rows, cols = _index(lengths)
    out[rows, cols] = codes
    return out


def _first_seen_codes(values: pa.Array) -> np.ndarray:
    """Codes numbered by first appearance, as dictionary_encode numbers plain strings. Values read
    dictionary-encoded are renumbered from their indices, so no string is built."""
    if not pa.types.is_dictionary(values.type) or values.null_count:
        plain = values.cast(values.type.value_type) if pa.types.is_dictionary(values.type) else values
        codes: np.ndarray = pc.dictionary_encode(plain).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        return codes
    # Equal strings may sit at several dictionary indices (dictionaries of several files): one id per string.
    canonical = pc.dictionary_encode(values.dictionary).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    ids = canonical[values.indices.to_numpy(zero_copy_only=False)]
    seen, first = np.unique(ids, return_index=True)
    rank = np.empty(len(seen), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(seen))
    codes = rank[np.searchsorted(seen, ids)]
    return codes


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """First index where two -1 padded code rows differ (a length difference counts)."""
    common = min(len(a), len(b))
    differ = np.nonzero(a[:common] != b[:common])[0]
    if len(differ):
        return int(differ[0])
    longer = a if len(a) > len(b) else b
    padding = np.nonzero(longer[common:] != -1)[0]  # past the shorter one: its -1 padding
    return common + int(padding[0]) if len(padding) else None


def generated_positions(codes: np.ndarray, token_logprobs: pa.ChunkedArray | pa.Array,
                        reference: int) -> GeneratedPositions:
    ref = codes[reference]
    rows_differ = _rows_differ(codes, ref)
    differ = codes[rows_differ]  # the few rows that differ: the rest of the work is on them alone
    parted = differ != ref
    first = int(np.argmax(parted.any(axis=0))) if len(differ) else None
    flips = (parted & (differ >= 0) & (ref >= 0)).sum(axis=0)  # -1: no token there (a shorter answer)
    logprobs = padded_matrix(token_logprobs, np.nan)
    spread = _spread(_other_rows(logprobs, reference)) if logprobs.size else np.zeros(0)
    return GeneratedPositions(spread=spread, divergent_rows=len(differ), first_divergent=first,
                              reference_tokens=ref.copy(), flips=flips)
