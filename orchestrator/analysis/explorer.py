"""Where a temperature-0 request stops being repeatable, from the record alone: for every cell with more than one
signature, its modal completion and up to K other branches (how many requests took each, which ones, in which
batches and with how many co-residents), aligned on the modal one around the first position where each parts
from it (another token, or the same token with other logprobs), with the top-k of both there, and around the
token it later first takes instead where it parted on logprobs alone; and, for every A/B pair that differs, the
two arms' modal completions in the same form.

Two passes. The comparison's streaming pass hands each cell to `Explorer.observe`, which keeps the branches'
counts, request ids and batches (small: no token lists). `Explorer.finish` then reads the tokens and top-k lists
of the few representative requests only (a filtered read of the responses), so the comparison does not decode
every row's top-k lists. A cell signed on text (the server returned no tokens) is aligned on its characters
instead (analysis/text_split.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from orchestrator.analysis import text_split
from orchestrator.analysis.alignment import Detail, align, read_details
from orchestrator.analysis.batches import seen_running
from orchestrator.analysis.positions import as_array
from orchestrator.analysis.results import Completion, Explored, PairCheck
from orchestrator.errors import noun
from orchestrator.record.recorded import Recorded

MAX_BRANCHES = 4  # branches shown per cell besides the modal one (study.explorer_branches); the rest counted
MAX_IDS = 16  # request ids listed per branch; the rest counted
MAX_EXPLORED = 100  # cells plus pairs explored in one report; the rest counted (report.html stays under 2 MB)
COLUMNS = ["repeat", "server_first_step", "server_last_step"]  # what the streaming pass reads for the explorer
MAX_SLOTS = 12  # slots listed in a note; the rest counted


@dataclass
class Signatures:
    """A cell's warm signatures (one column of SIGNATURE_BASES), hashed once for the comparison and the explorer."""

    column: str
    names: list[str | None]  # the distinct ones, in order of first appearance (a null is one too)
    codes: np.ndarray  # per row: its index in `names`
    counts: np.ndarray  # per name: how many rows carry it
    modal: int  # the index of the most common one (the first seen of a tie)

    @classmethod
    def of(cls, column: str, values: pa.ChunkedArray) -> Signatures:
        encoded = pc.dictionary_encode(as_array(values), null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = encoded.dictionary.to_pylist()
        counts = np.bincount(codes, minlength=len(names))
        return cls(column, names, codes, counts, int(np.argmax(counts)) if len(counts) else 0)


@dataclass
class _Group:
    """One branch of a cell as the streaming pass sees it: no token lists yet."""

    signature: str | None  # None: the rows carry none (a record's nulls, as the comparison counts them)
    representative: str  # the request id whose tokens stand for the branch
    requests: int
    request_ids: list[str]
    batches: tuple[np.ndarray, np.ndarray]  # the batch ids (ascending) and their sizes
    co_residents: set[int] = field(default_factory=set)
    together: set[int] = field(default_factory=set)
    slots: dict[int, set[int]] = field(default_factory=dict)  # concurrent: batch id -> its places in that batch


@dataclass
class _Pending:
    key: tuple[str, str, str]
    n: int
    phase_kind: str
    groups: list[_Group]  # the modal first
    more_branches: int
    more_requests: int
    all_batches: np.ndarray  # the cell's batch ids, ascending (a list only for the cells shown)


class Explorer:
    """Collects during the comparison's pass; `finish` makes the typed results."""

    def __init__(self, branches: int = MAX_BRANCHES, near_tie_gap: float = 1e-2) -> None:
        self.branches = branches
        self.near_tie_gap = near_tie_gap
        self.pending: list[_Pending] = []
        self.modal: dict[tuple[str, str, str], tuple[_Group, str, int]] = {}  # key -> modal, phase kind, n
        self.sizes: dict[tuple[str, str], dict[str | None, set[int]]] = {}  # (arm, prompt) -> signature -> batch sizes
        self.seen: dict[tuple[str, str], dict[str | None, dict[str, int]]] = {}  # (arm, prompt) -> sig -> phase -> n
        self.on_text: set[tuple[str, str, str]] = set()  # cells signed on text: no tokens to align on

    def observe(self, key: tuple[str, str, str], warm: pa.Table, sent: pa.Table, signed: Signatures) -> None:
        """A cell's warm rows (their signatures `signed`) and every row sent (for the batch sizes). Grouped with
        numpy: Python touches only the distinct signatures and the branches shown."""
        arm, prompt_id, phase = key
        if signed.column == "sig_text":
            self.on_text.add(key)
        kind = str(warm.column("phase_kind")[0].as_py() or "")
        column = sent.column("batch_id")
        sent_ids = None if column.null_count else as_array(column).to_numpy(zero_copy_only=False)
        batch_ids, batch_sizes = _batch_sizes(kind, column, sent_ids)
        per_sig_sizes = self.sizes.setdefault((arm, prompt_id), {})
        per_sig_seen = self.seen.setdefault((arm, prompt_id), {})
        names, codes, counts, modal = signed.names, signed.codes, signed.counts, signed.modal
        if sum(name is not None for name in names) == 1:  # the usual case: one signature, nulls aside
            per_sig_sizes.setdefault(names[modal], set()).update(batch_sizes.tolist())
            per_sig_seen.setdefault(names[modal], {})[phase] = warm.num_rows
            head = warm.slice(0, MAX_IDS)
            ids = _ids(key, head.column("batch_id").to_pylist(), head.column("repeat").to_pylist())
            group = _Group(names[modal], ids[0], warm.num_rows, ids, (batch_ids, batch_sizes))
            if kind == "concurrent":
                group.together = _together(warm)
            self.modal[key] = (group, kind, warm.num_rows)
            return
        rows_batch = sent_ids if warm is sent and sent_ids is not None else \
            as_array(warm.column("batch_id")).to_numpy(zero_copy_only=False)
        # as written: a subset needs no sort (nor a count) either; known already where every row sent is warm
        ascending, unique = (True, True) if batch_ids is rows_batch else _order(rows_batch)
        if kind == "concurrent":
            row_sizes = batch_sizes[np.searchsorted(batch_ids, rows_batch)]
            span = int(row_sizes.max()) + 1
            for pair in _distinct(codes * span + row_sizes)[0].tolist():  # each (signature, batch size) seen
                per_sig_sizes.setdefault(names[pair // span], set()).add(pair % span)
        else:  # every request a batch of one
            for name in names:
                per_sig_sizes.setdefault(name, set()).add(1)
        tally = counts.tolist()
        for name, count in zip(names, tally, strict=True):
            per_sig_seen.setdefault(name, {})[phase] = count
        # the modal first, then by count, ties in order of first appearance (as Counter.most_common)
        order = [modal, *(c for c in sorted(range(len(tally)), key=lambda c: -tally[c]) if c != modal)]
        shown, hidden = order[:1 + self.branches], order[1 + self.branches:]
        members = [np.flatnonzero(codes == code) for code in shown]
        heads = np.concatenate([rows[:MAX_IDS] for rows in members])
        repeats = warm.column("repeat")
        listed = _ids(key, rows_batch[heads].tolist(), repeats.to_numpy()[heads].tolist()
                      if not repeats.null_count else repeats.take(heads).to_pylist())
        co = _co_residents(rows_batch, warm.column("server_first_step"), warm.column("server_last_step")) \
            if kind == "concurrent" else None
        groups, at = [], 0
        for code, rows in zip(shown, members, strict=True):
            own = rows_batch[rows] if unique else _distinct(rows_batch[rows], ascending)[0]
            listing = min(len(rows), MAX_IDS)
            ids, at = listed[at:at + listing], at + listing
            sizes = batch_sizes[np.searchsorted(batch_ids, own)] if kind == "concurrent" else \
                np.ones(len(own), np.int64)
            group = _Group(names[code], ids[0], len(rows), ids, (own, sizes))
            if kind == "concurrent":
                mine = warm.take(rows)
                group.slots = _slots_by_batch(rows_batch[rows], mine.column("repeat"))
                group.together = _together(mine)
            if co is not None:
                group.co_residents = set(co[rows][co[rows] >= 0].tolist())
            groups.append(group)
        self.modal[key] = (groups[0], kind, len(codes))
        self.pending.append(_Pending(key, len(codes), kind, groups, len(hidden), sum(tally[c] for c in hidden),
                                     batch_ids))

    def finish(self, recorded: Recorded, pairs: list[PairCheck]) -> tuple[list[Explored], list[Explored], int]:
        """The explored cells, the explored pairs (those that differ), and how many were left out."""
        differ = [p for p in pairs if p.verdict == "differ" and (p.arm_a, p.prompt_id, p.phase) in self.modal
                  and (p.arm_b, p.prompt_id, p.phase) in self.modal]
        cells = self.pending[:MAX_EXPLORED - min(len(differ), MAX_EXPLORED // 4)]  # a quarter kept for pairs
        shown_pairs = differ[:max(0, MAX_EXPLORED - len(cells))]
        left_out = len(self.pending) - len(cells) + len(differ) - len(shown_pairs)
        wanted = {g.representative for p in cells for g in p.groups}
        wanted |= {self.modal[(arm, p.prompt_id, p.phase)][0].representative
                   for p in shown_pairs for arm in (p.arm_a, p.arm_b)}
        details = read_details(recorded, wanted)
        explored = [self._cell(p, details) for p in cells]
        explored_pairs = [self._pair(p, details) for p in shown_pairs]
        return ([e for e in explored if e is not None], [e for e in explored_pairs if e is not None], left_out)

    def _cell(self, pending: _Pending, details: dict[str, Detail]) -> Explored | None:
        arm, prompt_id, phase = pending.key
        found = [details.get(g.representative) for g in pending.groups]
        if any(d is None for d in found):
            return None  # a record without request ids (schema 1): nothing to show tokens from
        names = ["modal", *(f"branch {i}" for i in range(1, len(pending.groups)))]
        completions = [self._completion(name, group, pending.phase_kind, (arm, prompt_id)) for name, group
                       in zip(names, pending.groups, strict=True)]
        explored = Explored("cell", f"{arm}/{prompt_id}/{phase}", arm, prompt_id, phase, pending.n, 0,
                            completions, pending.more_branches, pending.more_requests)
        self._align(explored, [d for d in found if d is not None], pending.key in self.on_text)
        all_batches = pending.all_batches.tolist()
        explored.notes = _notes(completions, all_batches, pending.phase_kind)
        if pending.phase_kind == "concurrent":
            explored.notes += _same_slots(names, pending.groups, all_batches)
        return explored

    def _pair(self, pair: PairCheck, details: dict[str, Detail]) -> Explored | None:
        sides = [self.modal[(arm, pair.prompt_id, pair.phase)] for arm in (pair.arm_a, pair.arm_b)]
        found = [details.get(group.representative) for group, _, _ in sides]
        if any(d is None for d in found):
            return None
        completions = [self._completion(arm, group, kind, (arm, pair.prompt_id))
                       for arm, (group, kind, _) in zip((pair.arm_a, pair.arm_b), sides, strict=True)]
        explored = Explored("pair", f"{pair.arm_b} vs {pair.arm_a}/{pair.prompt_id}/{pair.phase}", pair.arm_b,
                            pair.prompt_id, pair.phase, sides[1][2], 0, completions)
        on_text = any((arm, pair.prompt_id, pair.phase) in self.on_text for arm in (pair.arm_a, pair.arm_b))
        self._align(explored, [d for d in found if d is not None], on_text)
        return explored

    def _align(self, explored: Explored, details: list[Detail], on_text: bool) -> None:
        """On tokens and their top-k; on characters when signed on text (the server returned no tokens)."""
        if on_text:
            explored.basis = "text"
            explored.window_start, explored.prefix = text_split.align(explored.completions,
                                                                      [d.text for d in details])
        else:
            explored.window_positions = align(explored.completions, details, self.near_tie_gap)
            explored.window_start = explored.window_positions[0] if explored.window_positions else 0

    def _completion(self, name: str, group: _Group, kind: str, arm_prompt: tuple[str, str]) -> Completion:
        return Completion(
            name=name, signature=group.signature, requests=group.requests, request_ids=group.request_ids,
            tokens=[], logprobs=[], length=0, phase_kind=kind,
            batches=list(zip(*(ids.tolist() for ids in group.batches), strict=True)),
            co_residents=sorted(group.co_residents), together=sorted(group.together),
            batch_sizes=sorted(self.sizes.get(arm_prompt, {}).get(group.signature, set())),
            seen_in=dict(self.seen.get(arm_prompt, {}).get(group.signature, {})))


def _ids(key: tuple[str, str, str], batch_ids: list[int], repeats: list[int]) -> list[str]:
    """The request ids of measured rows (record/tables.py: ARM/PROMPT/PHASE/BATCH/REPEAT)."""
    return [f"{key[0]}/{key[1]}/{key[2]}/{b}/{r}" for b, r in zip(batch_ids, repeats, strict=True)]


def _batch_sizes(kind: str, batch_ids: pa.ChunkedArray, values: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The batch ids sent (ascending; a null id reads as 0) and the requests sent in each; a sequential request is
    a batch of one. `values`: the ids as numpy where none is null; returned as they are where they ascend, each
    once."""
    if values is None:
        values = as_array(pc.fill_null(batch_ids, 0)).to_numpy(zero_copy_only=False)
    ascending, unique = _order(values)
    if unique:  # a batch of one each, as sequential requests are sent
        return values, np.ones(len(values), np.int64)
    ids, counts = _distinct(values, ascending)
    return ids, counts if kind == "concurrent" else np.ones(len(ids), np.int64)


def _order(values: np.ndarray) -> tuple[bool, bool]:
    """Whether the values are ascending, and strictly so (each one once)."""
    step = values[1:] - values[:-1]  # np.diff's, without its checks (a cell's thousand ids: most of its cost)
    if (step > 0).all():  # the usual case (requests as sent): one test, not two
        return True, True
    return bool((step >= 0).all()), False


def _distinct(values: np.ndarray, ascending: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, ascending, and how often each comes: np.unique's answer at a fraction of its cost
    per call on a cell's thousand rows (the stable sort, timsort, is the fast one on ids mostly in order);
    `ascending`: the values are in order already."""
    ordered = values if ascending else np.sort(values, kind="stable")
    edges = np.ones(len(ordered) + 1, dtype=bool)  # where a run of one value starts, and the end
    np.not_equal(ordered[1:], ordered[:-1], out=edges[1:-1])
    at = np.flatnonzero(edges)
    return ordered[at[:-1]], np.diff(at)


def _together(rows: pa.Table) -> set[int]:
    """How many requests the server ran together, as its trace (else /metrics) saw them, over these rows."""
    ran = pc.unique(pc.coalesce(rows.column("batch_server_together"), rows.column("batch_running_max")))
    return {seen for v in ran.to_pylist() if v is not None and (seen := seen_running(int(v))) is not None}


def _slots_by_batch(batch_ids: np.ndarray, repeats: pa.ChunkedArray) -> dict[int, set[int]]:
    """Batch id -> the places in it (repeats) these requests took; a request without one is left out."""
    known = pc.is_valid(repeats).to_numpy(zero_copy_only=False)
    batch_ids, places = batch_ids[known], pc.drop_null(repeats).to_numpy()
    out: dict[int, set[int]] = {}
    for batch in _distinct(batch_ids)[0].tolist():
        out[batch] = set(places[batch_ids == batch].tolist())
    return out


def _co_residents(batch_ids: np.ndarray, first: pa.ChunkedArray, last: pa.ChunkedArray) -> np.ndarray:
    """Per request, how many requests of its batch ran in at least one engine step with it (the server's trace);
    -1 where the server gave no trace."""
    known = pc.and_(pc.is_valid(first), pc.is_valid(last)).to_numpy(zero_copy_only=False)
    start = pc.fill_null(first, 0).to_numpy(zero_copy_only=False)
    stop = pc.fill_null(last, 0).to_numpy(zero_copy_only=False)
    out = np.full(len(batch_ids), -1, dtype=np.int64)
    for batch in _distinct(batch_ids[known])[0].tolist():
        at = np.nonzero(known & (batch_ids == batch))[0]
        a, b = start[at], stop[at]
        overlap = (a[None, :] <= b[:, None]) & (a[:, None] <= b[None, :])
        np.fill_diagonal(overlap, False)
        out[at] = overlap.sum(axis=1)
    return out


def _numbers(values: list[int]) -> str:
    return ", ".join(str(v) for v in values) if len(values) < 4 else f"{values[0]}-{values[-1]}"


def _notes(completions: list[Completion], all_batches: list[int], kind: str) -> list[str]:
    """What sets a branch apart from the modal completion: batch sizes, batches, co-residents."""
    modal, notes = completions[0], []
    for branch in completions[1:]:
        sizes, modal_sizes = set(branch.batch_sizes), set(modal.batch_sizes)
        if len(sizes) == 1 and sizes != modal_sizes:
            phases = ", ".join(branch.seen_in)
            notes.append(f"{branch.name} appears only in batches of {next(iter(sizes))} ({phases}); the modal "
                         f"completion in batches of {_numbers(sorted(modal_sizes))}")
        ids = [b for b, _ in branch.batches]
        if kind == "concurrent" and len(all_batches) > 1 and len(ids) < len(all_batches):
            notes.append(f"{branch.name} appears only in {noun(len(ids), 'batch', 'batches')} {_numbers(ids)} of "
                         f"{len(all_batches)}")
        if branch.co_residents and modal.co_residents and not set(branch.co_residents) & set(modal.co_residents):
            notes.append(f"{branch.name}'s requests ran alongside {_numbers(branch.co_residents)} other requests, "
                         f"the modal completion's alongside {_numbers(modal.co_residents)}")
    return notes


def _slots(values: list[int]) -> str:
    shown = ", ".join(map(str, values[:MAX_SLOTS])) + (f" and {len(values) - MAX_SLOTS} more" if len(values) >
                                                         MAX_SLOTS else "")
    return f"slot{'s' if len(values) > 1 else ''} {shown}"


def _same_slots(names: list[str], groups: list[_Group], all_batches: list[int]) -> list[str]:
    """A concurrent cell's branches that took the same places in every one of its (two or more) batches: the
    output then follows the request's position in the batch, not chance (request ids end in that place)."""
    if len(all_batches) < 2:
        return []
    found: list[tuple[str, list[int]]] = []
    for name, group in zip(names, groups, strict=True):
        places = {frozenset(group.slots.get(b, ())) for b in all_batches}
        if len(places) == 1 and (only := next(iter(places))):
            found.append((name if name != "modal" else "the modal completion", sorted(only)))
    branches = [f for f in found if f[0] != "the modal completion"]
    if not branches:
        return []
    (name, slots), others = branches[0], [*branches[1:], *(f for f in found if f not in branches)]
    also = ", ".join(f"{n} ({_slots(s)})" for n, s in others[:-1])
    also = f"; so did {also + ' and ' if also else ''}{others[-1][0]} ({_slots(others[-1][1])})" if others else ""
    return [f"{name} took the same slots in every batch ({_slots(slots)}){also}: the output follows the request's "
            "position in the batch, repeatably - batch-shape dependence, not run-to-run noise"]
