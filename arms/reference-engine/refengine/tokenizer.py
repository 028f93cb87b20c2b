"""Byte-level tokenizer: ids 0..255 are UTF-8 bytes, 256 is EOS.

Token strings are unique per id (non-printable bytes become ``<0xHH>``) so that vLLM-style
``top_logprobs`` dicts, keyed by decoded string, never collapse two ids into one key.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Protocol

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


class Tokenizer(Protocol):
    """What the server's protocol needs of a tokenizer: this byte-level one, or a model's own (another engine
    built on this server, arms/transformers-hooked)."""

    vocab_size: int
    eos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_str(self, token_id: int) -> str: ...

    def text_stream(self) -> Callable[[int, bool], str]:
        """A streamed answer's decoder: (next token id, whether it is the last) -> the text it completes."""
        ...


class ByteTokenizer:
    vocab_size = VOCAB_SIZE
    eos_id: int | None = EOS_ID

    def encode(self, text: str) -> list[int]:
        return encode(text)

    def decode(self, ids: list[int]) -> str:
        return decode(ids)

    def token_str(self, token_id: int) -> str:
        return token_str(token_id)

    def text_stream(self) -> Callable[[int, bool], str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span tokens
        return lambda tok, last: decoder.decode(bytes([tok]) if tok < 256 else b"", final=last)


BYTES = ByteTokenizer()
