"""From ShareGPT-style message lists to turns: ONE rule, shared by the loader and the fit, so the
synthetic generator's targets describe exactly what ``load_sharegpt`` produces.

Session rebuild. ShareGPT's ``_split`` variant cuts a long conversation into pieces ``abc_0``,
``abc_9``, ... The suffix is the piece's offset in the original message list (not a piece number),
and a piece that starts with an assistant reply repeats the previous piece's last message
(ShareGPT V3 derived CSV: 6,340 of 6,340 pieces that start with a reply do). Pieces are ordered by
the numeric suffix, and the first message of a piece is dropped when it equals the last message kept.
Comparing content (not offsets) also handles files whose suffixes are plain piece numbers.

Turn pairing (roles are normalised: human/user -> prompt; gpt/chatgpt/bing/bard/assistant/model ->
reply; system -> prompt text):
- a turn is the prompt text since the last reply followed by one reply;
- system text counts as prompt tokens of the turn it precedes (so a leading system message is
  prepended to the first prompt);
- consecutive prompt messages are merged (their tokens added); consecutive replies too;
- a reply with no prompt before it at the start of a session is dropped (nothing asked for it);
- a trailing prompt without a reply is dropped (its output length is unknown);
- an empty reply gets output_tokens = 1 (the format requires >= 1: at least an end-of-sequence token).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Hashable, Iterable, NamedTuple, Sequence

PROMPT_ROLES = frozenset({"human", "user"})
REPLY_ROLES = frozenset({"gpt", "chatgpt", "bing", "bard", "assistant", "model"})
SYSTEM_ROLES = frozenset({"system"})
KNOWN_ROLES = PROMPT_ROLES | REPLY_ROLES | SYSTEM_ROLES


def role_kind(role: str) -> str | None:
    """'prompt', 'system' or 'reply'; None for a role we do not know (the caller reports it)."""
    if role in PROMPT_ROLES:
        return "prompt"
    if role in REPLY_ROLES:
        return "reply"
    if role in SYSTEM_ROLES:
        return "system"
    return None


def split_record_id(record_id: str) -> tuple[str, int | None]:
    """'abc_12' -> ('abc', 12); an id without a numeric suffix is its own session: ('abc', None)."""
    base, sep, suffix = record_id.rpartition("_")
    if sep and base and suffix.isdigit():
        return base, int(suffix)
    return record_id, None


class Message(NamedTuple):
    kind: str  # 'prompt' | 'system' | 'reply'
    tokens: int
    key: Hashable  # content identity for de-duplicating repeated boundary messages


class TurnTokens(NamedTuple):
    prompt: int
    output: int


@dataclass(slots=True)
class PairStats:
    """Counts of every rule that fired, so loaders and the fit can report them."""

    boundary_duplicates: int = 0
    merged_prompts: int = 0
    merged_replies: int = 0
    system_messages: int = 0
    leading_replies_dropped: int = 0
    trailing_prompts_dropped: int = 0
    clamped_outputs: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def join_pieces(pieces: Iterable[Sequence[Message]], stats: PairStats) -> list[Message]:
    """Concatenate a session's pieces (already in suffix order), dropping repeated boundary messages."""
    out: list[Message] = []
    for piece in pieces:
        start = 0
        if piece and out and piece[0].key == out[-1].key:
            start = 1
            stats.boundary_duplicates += 1
        out.extend(piece[start:])
    return out


def pair_turns(messages: Sequence[Message], stats: PairStats) -> list[TurnTokens]:
    """Apply the pairing rules of the module docstring."""
    turns: list[TurnTokens] = []
    pending = 0  # prompt tokens since the last reply
    has_prompt = False  # any prompt or system text since the last reply
    human_msgs = 0  # prompt (not system) messages since the last reply
    last_was_reply = False
    for m in messages:
        if m.kind == "reply":
            if has_prompt:
                turns.append(TurnTokens(pending, m.tokens))
                pending, has_prompt, human_msgs = 0, False, 0
            elif last_was_reply:
                stats.merged_replies += 1
                turns[-1] = TurnTokens(turns[-1].prompt, turns[-1].output + m.tokens)
            else:
                stats.leading_replies_dropped += 1
                continue
            last_was_reply = True
        else:
            if m.kind == "system":
                stats.system_messages += 1
            else:
                stats.merged_prompts += human_msgs > 0
                human_msgs += 1
            pending += m.tokens
            has_prompt = True
            last_was_reply = False
    if has_prompt:
        stats.trailing_prompts_dropped += 1
    clamped = []
    for t in turns:
        if t.output < 1:
            stats.clamped_outputs += 1
            t = TurnTokens(t.prompt, 1)
        clamped.append(t)
    return clamped
