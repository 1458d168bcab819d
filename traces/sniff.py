"""Which trace kind a file's first bytes look like, to name the likely kind when a file is read as
another (a ShareGPT JSON given ``kind: mooncake``, ...). A guess from the content alone: None when
the start of the file does not clearly say."""

from __future__ import annotations

import json
import os

_HEAD_BYTES = 1 << 16


def sniff_kind(path: str | os.PathLike) -> str | None:
    """``sharegpt`` (a JSON list), ``mooncake`` or ``jsonl`` (JSON Lines, told apart by the first
    line's keys), ``burstgpt`` or ``azure`` (CSV, by the header); None if unreadable or unclear."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return None
    text = head.lstrip()
    if text.startswith("["):
        return "sharegpt"
    first = text.partition("\n")[0].strip()
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        if "hash_ids" in obj or {"timestamp", "input_length"} <= obj.keys():
            return "mooncake"
        if {"session_id", "prompt_tokens"} <= obj.keys():
            return "jsonl"
        return None
    columns = [c.strip() for c in first.split(",")]
    if columns[:2] == ["Timestamp", "Model"]:
        return "burstgpt"
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= set(columns):
        return "azure"
    return None
