"""A step's captured rows digested in bulk: the rows of every module call of a step, stacked by shape on the
device, come to the host in one transfer, and each block's rows are reduced together (one op a block, not one a
call). The values are those of one call's rows digested alone (digests.py's `digest`): the same bytes hashed
(blake2b-128), the same float64 reductions, each row of a block reduced serially in the order a 1-D reduction of
that row runs (rows longer than ATen's grain, whose 1-D reduction is split across threads, are reduced alone)."""

from __future__ import annotations

import hashlib

import torch

# (blake2b-128 hex, sum, abs-max, norm, first values): tuples of numbers and strings only, which the garbage collector
# stops tracking (a store of lists would be traversed by every full collection: docs/benchmarks.md)
Digest = tuple[str, float, float, float, tuple[float, ...]]
SERIAL_MAX = 32768  # ATen's GRAIN_SIZE: a 1-D reduction up to this many elements runs in one thread, in order
_ALIGN = 16  # bytes: each block's place in the step's buffer, so that it can be viewed in its own dtype


def digest(rows: torch.Tensor, head: int) -> Digest:
    """One tensor's digest, alone: the reference the blocks' digests equal."""
    host = rows.detach().contiguous().cpu()
    raw = host.reshape(-1).view(torch.uint8).numpy().tobytes()
    wide = host.double().reshape(-1)
    if wide.numel() == 0:
        return hashlib.blake2b(raw, digest_size=16).hexdigest(), 0.0, 0.0, 0.0, ()
    return (hashlib.blake2b(raw, digest_size=16).hexdigest(), float(wide.sum()), float(wide.abs().max()),
            float(wide.norm()), tuple(wide[:head].tolist()))


def to_host(blocks: list[torch.Tensor], packed: bool | None = None) -> list[torch.Tensor]:
    """Blocks ([k, m], any dtypes) on one device -> the same on the host: on an accelerator (or `packed`), their
    bytes in one buffer and one transfer."""
    if not blocks or not (blocks[0].device.type != "cpu" if packed is None else packed):
        return [b.contiguous() for b in blocks]
    parts: list[torch.Tensor] = []
    places: list[tuple[int, int]] = []
    offset = 0
    for b in blocks:
        raw = b.contiguous().reshape(-1).view(torch.uint8)
        pad = -raw.numel() % _ALIGN
        parts.extend((raw, raw.new_zeros(pad)) if pad else (raw,))
        places.append((offset, raw.numel()))
        offset += raw.numel() + pad
    host = torch.cat(parts).cpu()
    return [host[o:o + n].view(b.dtype).reshape(b.shape) for (o, n), b in zip(places, blocks, strict=True)]


def block_digests(block: torch.Tensor, head: int) -> list[Digest]:
    """Each row's digest of a host block [k, m], as `digest` gives it for the row alone."""
    k, m = block.shape
    if m > SERIAL_MAX:
        return [digest(block[i], head) for i in range(k)]
    if m == 0 or k == 0:
        return [(hashlib.blake2b(b"", digest_size=16).hexdigest(), 0.0, 0.0, 0.0, ())] * k
    raw = block.view(torch.uint8).numpy().data.cast("B")  # the rows' bytes, sliced without a copy
    n, blake = len(raw) // k, hashlib.blake2b
    hexes = [blake(raw[i * n:(i + 1) * n], digest_size=16).hexdigest() for i in range(k)]
    wide = block.double()
    heads = [tuple(h) for h in wide[:, :head].tolist()] if head else [()] * k
    norms = torch.linalg.vector_norm(wide, dim=1)  # Tensor.norm's own op, without its Python wrapper
    return list(zip(hexes, wide.sum(1).tolist(), wide.abs().amax(1).tolist(), norms.tolist(), heads, strict=True))

