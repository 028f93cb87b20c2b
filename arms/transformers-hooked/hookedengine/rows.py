"""Where a flagged request's rows are in a forward's tensors: the batch's layout (rows of positions, or all
requests packed in one row), and how to take a target's rows of a tensor or of a stack of like tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Target:
    """A flagged request in the current step: its row of the batch and its positions there, [start, stop) (a
    padded batch: from its left padding to the end; a packed one, all requests in one row: its span)."""

    row: int
    start: int
    stop: int
    context_tokens: int
    step: int | None = None  # its own step where a forward's requests are at different steps (continuous batching)


@dataclass
class StepLayout:
    """How a forward laid the batch out: `batch` rows of `seq_len` positions each."""

    step: int  # a target's step unless the target gives its own
    batch: int
    seq_len: int
    window_ids: list[str]  # the requests the scheduler took together (run as one batch, or each alone)
    targets: dict[str, Target]


Select = tuple[int, ...]  # how a target's rows are taken from a tensor: (row, start, stop) of [B, L, ...],
# (start, stop) of [B*L, ...], () the whole tensor


def place(shape: torch.Size, layout: StepLayout, tgt: Target) -> tuple[Select, int | None, int | None, int]:
    """(how to take the target's rows, start, stop, total) in a tensor's leading dimension, flattened over the dims
    that hold tokens: [B, L, ...] and [B*L, ...] hold per-request rows. Anything else is digested whole: the
    target's own where the forward holds only its tokens, else rows of the whole batch mixed (MoE experts' inputs,
    grouped by expert): start and stop None, as no request's own rows can be compared with another batch's."""
    b, n = layout.batch, layout.seq_len
    start, stop = tgt.row * n + tgt.start, tgt.row * n + tgt.stop
    if len(shape) >= 2 and shape[0] == b and shape[1] == n:
        return (tgt.row, tgt.start, tgt.stop), start, stop, b * n
    if len(shape) >= 1 and shape[0] == b * n:
        return (start, stop), start, stop, b * n
    total = int(shape[0]) if len(shape) else 1
    alone = b == 1 and tgt.start == 0 and tgt.stop == n
    return (), 0 if alone else None, total if alone else None, total


def take(t: torch.Tensor, select: Select, stacked: bool = False) -> torch.Tensor:
    """The rows `select` names, of a tensor or (`stacked`: one more leading dim) of a stack of them."""
    lead = (slice(None),) if stacked else ()
    if len(select) == 3:
        return t[(*lead, select[0], slice(select[1], select[2]))]
    return t[(*lead, slice(select[0], select[1]))] if select else t


def rows(t: torch.Tensor, layout: StepLayout, tgt: Target) -> tuple[torch.Tensor, int | None, int | None, int]:
    """(the target's rows, start, stop, total): `place`'s rows taken."""
    select, start, stop, total = place(t.shape, layout, tgt)
    return take(t, select), start, stop, total


def step_of(layout: StepLayout, tgt: Target) -> int:
    return layout.step if tgt.step is None else tgt.step
