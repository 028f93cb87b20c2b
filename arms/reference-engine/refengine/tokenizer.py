"""Byte-level tokenizer: ids 0..255 are UTF-8 bytes, 256 is EOS.

Token strings are unique per id (non-printable bytes become ``<0xHH>``) so that vLLM-style
``top_logprobs`` dicts, keyed by decoded string, never collapse two ids into one key.
"""

from __future__ import annotations

VOCAB_SIZE = 257
EOS_ID = 256
EOS_STR = "<|eos|>"


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Text of a sequence; EOS contributes nothing (as skip_special_tokens does)."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


def token_str(token_id: int) -> str:
    """Per-token display string used in logprobs (unique per id)."""
    if token_id == EOS_ID:
        return EOS_STR
    if 0x20 <= token_id <= 0x7E:
        return chr(token_id)
    return f"<0x{token_id:02X}>"
