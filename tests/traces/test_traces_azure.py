"""Azure 2023: single-turn sessions, open-loop arrivals; real row counts and published statistics."""

from __future__ import annotations

import numpy as np
import pytest

from traces import TraceError, load_azure

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_hand_built_csv(write_text):
    path = write_text(
        "az.csv",
        HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,0\n"
        "2023-11-16 18:15:50.9951690,10,3\n",
    )
    load = load_azure(path)
    assert [s.session_id for s in load.sessions] == ["az-0", "az-1", "az-2"]
    assert [len(s.turns) for s in load.sessions] == [1, 1, 1]
    t = [s.turns[0] for s in load.sessions]
    assert [x.arrival_s for x in t] == pytest.approx([0.0, 4.314579, 4.314579])
    assert [(x.prompt_tokens, x.output_tokens) for x in t] == [(374, 44), (396, 1), (10, 3)]
    assert load.info["clamped_outputs"] == 1 and load.skipped == 0
    assert load_azure(path, max_rows=2).n_turns == 2


@pytest.mark.parametrize(
    "row, words",
    [
        ("yesterday,10,3", "TIMESTAMP 'yesterday'"),
        ("2023-11-16 18:15:47.0000000,-5,3", "ContextTokens must be an integer >= 0"),
        ("2023-11-16 18:15:47.0000000,5,2.5", "GeneratedTokens must be an integer >= 0"),
        ("2023-11-16 18:15:47.0000000,5,", "GeneratedTokens must be an integer >= 0"),
    ],
)
def test_bad_rows_name_the_line(write_text, row, words):
    path = write_text(
        "az.csv",
        HEADER
        + "2023-11-16 18:15:46.6805900,374,44\n"
        + row
        + "\n"
        + "2023-11-16 18:15:48.0000000,1,1\n",
    )
    with pytest.raises(TraceError) as exc:
        load_azure(path)
    assert str(exc.value).startswith("az.csv:3: ") and words in str(exc.value), str(exc.value)
    load = load_azure(path, on_error="skip")
    assert load.skipped == 1 and [s.session_id for s in load.sessions] == ["az-0", "az-2"]


def test_missing_column(write_text):
    with pytest.raises(TraceError, match=r"az\.csv:1: missing column\(s\) \['GeneratedTokens'\]"):
        load_azure(write_text("az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,3\n"))


@pytest.mark.data
@pytest.mark.parametrize(
    "name, rows, span_s, ctx_p50, gen_p50",
    [
        # PROVENANCE 1.3: rows, time span, context and generated p50
        ("conv", 19_366, 3501.7, 1020, 129),
        ("code", 8_819, 3435.9, 1469, 13),
    ],
)
def test_real_files(data_file, name, rows, span_s, ctx_p50, gen_p50):
    load = load_azure(data_file(f"azure_llm_inference_2023/AzureLLMInferenceTrace_{name}.csv"))
    assert len(load.sessions) == load.n_turns == rows and load.skipped == 0
    arrivals = np.array([s.start_s for s in load.sessions])
    assert arrivals[0] == 0.0 and arrivals.max() == pytest.approx(span_s, abs=0.1)
    assert np.all(np.diff(arrivals) >= 0)
    assert np.median([s.turns[0].prompt_tokens for s in load.sessions]) == ctx_p50
    assert np.median([s.turns[0].output_tokens for s in load.sessions]) == gen_p50
