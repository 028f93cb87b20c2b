"""`length_tokens: N` on a prompt (docs/onset.md): the text is repeated until it surely holds N tokens under
any tokenizer; each arm then sends exactly its first N tokens as ids (run/send/prompt_length.py)."""

from __future__ import annotations

# A token covers at most this many characters in the tokenizers met so far (byte-level: 1; BPE: about 4)
CHARS_PER_TOKEN_MAX = 8


def source_text(text: str, length_tokens: int) -> str:
    """`text` repeated to CHARS_PER_TOKEN_MAX characters a token (at least as long as given)."""
    chars = max(len(text), CHARS_PER_TOKEN_MAX * length_tokens)
    return (text * (chars // len(text) + 1))[:chars]
