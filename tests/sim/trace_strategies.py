"""Random multi-turn traces for the engine's property tests (hypothesis)."""

from __future__ import annotations

from hypothesis import strategies as st

from traces.records import Session, Turn


@st.composite
def traces(draw):
    """1 to 6 sessions of 1 to 4 turns: prompts of 0 to 300 tokens, outputs of 1 to 120."""
    sessions = []
    for i in range(draw(st.integers(1, 6))):
        turns = []
        for k in range(draw(st.integers(1, 4))):
            p, o = draw(st.integers(0, 300)), draw(st.integers(1, 120))
            turns.append(
                Turn(p, o, arrival_s=draw(st.floats(0, 5)))
                if k == 0
                else Turn(p, o, think_s=draw(st.floats(0, 3)))
            )
        sessions.append(Session(f"s{i}", tuple(turns)))
    return sessions
