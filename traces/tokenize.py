"""Pluggable token counting for text traces (ShareGPT): an offline estimate or a real HF tokenizer.

The offline default, ``CharEstimate``, divides the character count by a ratio FITTED on
``shared/data/sharegpt/sharegpt_v3_messages_derived.csv`` (129,071 ShareGPT V3 messages with their
cl100k_base token counts; ``python -m traces.fit_sharegpt`` recomputes it into
``traces/data/sharegpt_fit.yaml``):

- token-weighted ratio sum(chars) / sum(tokens) = 4.537 -> DEFAULT_CHARS_PER_TOKEN = 4.54. It is the
  ratio with zero aggregate error (what KV memory is sized by);
- per message it is rough: MAPE 14.5 %, median APE 11.1 % (median per-message ratio 4.66, which has
  MAPE 14.0 % but under-counts the total by 2.6 %). Code and non-English text are the outliers.
Counts are cl100k_base; Llama-family tokenizers typically count more. Use ``HFTokenizer`` with the
served model's tokenizer.json when exact counts matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from traces.records import TraceError

DEFAULT_CHARS_PER_TOKEN = 4.54  # fitted, see the module docstring and traces/data/sharegpt_fit.yaml


@runtime_checkable
class Tokenizer(Protocol):
    """Anything that counts the tokens of a string."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class CharEstimate:
    """round(len(text) / chars_per_token), at least 1 for non-empty text, 0 for empty text."""

    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN

    def __post_init__(self) -> None:
        if not self.chars_per_token > 0:
            raise TraceError(f"chars_per_token must be > 0, got {self.chars_per_token}")

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, int(len(text) / self.chars_per_token + 0.5))


class HFTokenizer:
    """Exact counts from a Hugging Face ``tokenizer.json`` (needs the optional ``tokenizers`` package).

    Special tokens are not added: a chat template's framing tokens are the serving engine's business.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():  # a wrong path is the user's first error, library or not
            raise TraceError(f"{self.path}: tokenizer file not found")
        try:
            from tokenizers import Tokenizer as _HF  # lazy: optional dependency
        except ImportError as e:
            raise TraceError(
                "HFTokenizer needs the optional 'tokenizers' package "
                "(pip install tokenizers, or pip install -e '.[tokenizers]')"
            ) from e
        try:
            self._tok = _HF.from_file(str(self.path))
        except Exception as e:  # the library raises its own exception type for a bad file
            raise TraceError(f"{self.path}: not a valid tokenizer.json: {e}") from e

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r})"


def make_tokenizer(spec: str | Tokenizer | None) -> Tokenizer:
    """None or "chars" -> CharEstimate(); "chars:4.2" -> CharEstimate(4.2);
    "hf:PATH" or a PATH ending in .json -> HFTokenizer(PATH). A Tokenizer passes through."""
    if spec is None or spec == "chars":
        return CharEstimate()
    if isinstance(spec, Tokenizer) and not isinstance(spec, str):
        return spec
    if not isinstance(spec, str):
        raise TraceError(f"tokenizer spec must be a string, got {type(spec).__name__}")
    if spec.startswith("chars:"):
        try:
            return CharEstimate(float(spec.split(":", 1)[1]))
        except ValueError:
            raise TraceError(f"tokenizer spec {spec!r}: expected chars:<chars per token>") from None
    if spec.startswith("hf:"):
        return HFTokenizer(spec[3:])
    if spec.endswith(".json"):
        return HFTokenizer(spec)
    raise TraceError(
        f"unknown tokenizer spec {spec!r}: use 'chars', 'chars:<ratio>', "
        f"'hf:<tokenizer.json>' or a path ending in .json"
    )
