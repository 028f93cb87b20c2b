"""The model's own tokenizer, as the reference engine's server asks for one (refengine.tokenizer.Tokenizer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HFTokenizer:
    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.vocab_size: int = len(tok)
        self.eos_id: int | None = tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=True).input_ids)  # as vLLM's completions encode

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=True))

    def token_str(self, token_id: int) -> str:
        piece = self.tok.convert_ids_to_tokens(token_id)  # unique per id: top-k dicts keep every entry
        return f"<id:{token_id}>" if piece is None else str(piece)

    def text_stream(self) -> Callable[[int, bool], str]:
        """Each token's text as the difference of the decoded prefixes; held back while the text ends in a
        partial character (U+FFFD), which a later token completes."""
        ids: list[int] = []
        sent = [""]

        def step(token_id: int, last: bool) -> str:
            ids.append(token_id)
            text = self.decode(ids)
            if text.endswith("\ufffd") and not last:
                return ""
            delta = text[len(sent[0]):] if text.startswith(sent[0]) else text
            sent[0] = text
            return delta

        return step
