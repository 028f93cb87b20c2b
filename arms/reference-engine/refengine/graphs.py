"""Simulated CUDA-graph capture of the decode step, and the seed's stale-step defect under it (off by default).

A captured graph reads its inputs from a static buffer, one per captured batch size (padded up to a power of
two, as vLLM captures sizes 1, 2, 4, 8, ...), shared by every batch that replays it. Each decode step copies the
step's tokens into that buffer, then replays. The seed's defect: "CUDA-graph capture left the offload semaphore a
step ahead, causing each forward to consume the previous step's output". Here the replay runs before the copy
lands, so it reads what the buffer held: the last replay's tokens of that size. Within one sequence that is the
token before the one it should read; on a batch's first decode step it is whatever the previous batch of that
size left, another request's tokens, or the capture's zeros after start. So it shows as nondeterminism: a
request's answer depends on which batches ran before it, which concurrency and timing decide (the first request
after start differs from its repeats; concurrent batches of different sizes and orders differ), and as a
difference from the graph-off run. With the fix (`sync`: the replay waits for the copy) each forward reads its own
step's tokens and the answer is the graph-off one, bit for bit.
"""

from __future__ import annotations

PAD_ID = 0  # what a captured buffer holds before any replay, and in rows past a batch's own


def captured_size(batch: int) -> int:
    """The captured graph a batch of this many rows replays: the next power of two."""
    return 1 << max(0, batch - 1).bit_length()


class CapturedDecode:
    """The static input buffers of the captured decode graphs; only the scheduler's thread replays them."""

    def __init__(self, sync: bool) -> None:
        self.sync = sync  # the fix: the copy lands before the replay reads
        self.buffers: dict[int, list[int]] = {}
        self.stale_reads = 0  # replays that read a row other than their own step's token

    def replay_inputs(self, tokens: list[int]) -> list[int]:
        """The tokens the replayed forward consumes for this step's `tokens` (one per running sequence)."""
        size = captured_size(len(tokens))
        buffer = self.buffers.setdefault(size, [PAD_ID] * size)
        fresh = tokens + [PAD_ID] * (size - len(tokens))
        read = fresh[:len(tokens)] if self.sync else buffer[:len(tokens)]
        buffer[:] = fresh  # the copy lands (after the replay read, without the fix)
        self.stale_reads += read != tokens
        return read
