"""One line of help for each value of a closed choice in the experiment YAML, by YAML key.

The values themselves are defined where they are accepted (``sim.config`` and
``experiments.schema``); ``experiments.choices`` lists what those accept and takes the help from
here. Choices whose values carry docstrings (policies, trace kinds, sparse scorers) need no entry.
"""

from __future__ import annotations

VALUE_HELP: dict[str, dict[str, str]] = {
    "memory.evict_unit": {
        "session": "all of a session's pages, all layers: one unit per session",
        "block": "one page of all layers",
        "layer_block": "one page of one layer (the checkerboard)",
    },
    "engine.kind": {
        "kvsim": "kvsim's engine: a session's KV is kept between its turns",
        "vllm-v1": "vLLM 0.33.0's V1 scheduler and prefix cache",
    },
    "engine.replay": {
        "closed-loop": "turn k+1 arrives think_s after turn k completes",
        "open-loop": "turns arrive at the trace's arrival_s, never before their predecessor ends",
    },
    "engine.prefetch": {
        "off": "a turn's CPU pages are copied in when it is admitted",
        "queue": "copy a turn's CPU pages in from its arrival, while it waits",
        "think": "as queue, and from its previous turn's end, to be in before it arrives (oracle)",
    },
    "engine.swap_copies": {
        "per_page": "one copy call per page of one layer (vLLM's swap_blocks)",
        "per_layer": "one copy call per layer for all its pages (a gather kernel, as LMCache)",
    },
    "engine.offload_eviction_policy": {
        "lru": "vLLM's CPU offloading manager evicts least recently used",
        "arc": "vLLM's CPU offloading manager evicts by ARC",
    },
    "budgets.kind": {
        "full": "every token of every layer is kept",
        "streamingllm": "StreamingLLM: sink first tokens and a window of the latest, per layer",
        "smartkv": "sink + window + the budget best-scored tokens; the scorer's cost is charged",
    },
    "budgets.scorer": {
        "random": "a scorer that knows nothing: the floor a learned one must beat",
        "recency": "score = position: the budget becomes a longer window",
        "lifespan": "score = expiry (position + lifespan): a perfect predictor, an upper bound",
    },
    "sparse.kind": {
        "off": "decode reads the KV in GPU memory (no offload)",
        "quest": "decode reads the top k pages per layer from CPU memory (Quest)",
        "full": "decode reads every page from CPU memory through the GPU ring",
    },
    "sparse.phases": {
        "prefill": "the selector also picks the pages a prefill reads (kind full only)",
        "decode": "the selector picks the pages each decode step reads",
    },
    "executor.kind": {
        "local": "this machine: in this process (workers: 1) or local worker processes",
        "ray": "a Ray cluster (pip install ray); executor.address says which",
    },
}
