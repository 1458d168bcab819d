"""Tokenizers: the offline estimate, the spec parser, the optional HF tokenizer, and the fitted ratio."""

from __future__ import annotations

import sys

import pytest

from traces import CharEstimate, HFTokenizer, TraceError, make_tokenizer
from traces.tokenize import DEFAULT_CHARS_PER_TOKEN, Tokenizer


def test_char_estimate_counts():
    est = CharEstimate(4.0)
    assert est.count("") == 0
    assert est.count("a") == 1  # non-empty text is at least one token
    assert est.count("abcdef") == 2  # 1.5 rounds half up
    assert est.count("x" * 401) == 100
    with pytest.raises(TraceError, match="chars_per_token"):
        CharEstimate(0)


def test_make_tokenizer_specs(tmp_path):
    assert make_tokenizer(None) == CharEstimate() == make_tokenizer("chars")
    assert make_tokenizer("chars:3.5") == CharEstimate(3.5)
    custom = CharEstimate(2.0)
    assert make_tokenizer(custom) is custom
    assert isinstance(custom, Tokenizer)
    for bad in ("chars:x", "tiktoken", "hf"):
        with pytest.raises(TraceError, match="tokenizer spec|tokenizer file"):
            make_tokenizer(bad)
    with pytest.raises(TraceError, match="not found"):
        make_tokenizer(f"hf:{tmp_path / 'missing.json'}")


def test_hf_tokenizer_missing_library_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes `import tokenizers` fail
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(TraceError, match="optional 'tokenizers' package"):
        HFTokenizer(tmp_path / "tokenizer.json")


def test_hf_tokenizer_counts_with_a_tiny_word_level_model(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="optional 'tokenizers' not installed")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    hf = make_tokenizer(str(path))
    assert isinstance(hf, HFTokenizer)
    assert hf.count("hello world hello") == 3
    assert hf.count("hello, unknown!") == 4  # "hello" "," "unknown" "!"
    assert hf.count("") == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(TraceError, match="not a valid tokenizer.json"):
        HFTokenizer(bad)


@pytest.mark.data
def test_default_ratio_is_the_fit_of_the_shared_data(data_file):
    """The constant in tokenize.py must be what the fit gives on the shared ShareGPT messages."""
    from traces.fit_sharegpt import fit_tokenizer

    fit = fit_tokenizer(data_file("sharegpt/sharegpt_v3_messages_derived.csv"))
    assert fit.chars_per_token == pytest.approx(DEFAULT_CHARS_PER_TOKEN, abs=0.005)
    assert fit.mape < 0.2  # the documented per-message error (14.5 %) stays in range
