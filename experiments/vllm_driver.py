"""The real vLLM v1 scheduler behind a line protocol: the reference side of `kvsim vllm-check`.

Runs in a Python environment of its own that has vLLM (``kvsim vllm-check --python``), not in
kvsim's: it imports only vLLM and the standard library. It builds vLLM's ``Scheduler`` as vLLM's
own unit tests do (fake KV-cache config, no model, no GPU) and answers one JSON line per command
on stdout; kvsim plays the client and the model: it adds requests with their token ids, asks for a
schedule, prices the step, and reports the sampled tokens.

Commands (one JSON object per line on stdin), and replies:

``{"op": "init", "block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens",
"long_prefill_token_threshold", "scheduler_reserve_full_isl", "enable_prefix_caching",
"async_scheduling", "max_model_len"}`` -> ``{"ok": true}`` (``AsyncScheduler`` with async)

``{"op": "add", "id", "tokens", "max_tokens"}`` -> no reply (requests are added in bulk)

``{"op": "schedule"}`` -> ``{"sched": [[id, n, computed_before], ...], "new": [ids admitted or
resumed], "preempted": [...], "free_blocks", "running", "waiting"}``

``{"op": "update", "sampled": {id: token}}`` -> ``{"done": [ids finished]}``: the output of the
oldest step scheduled and not yet updated (async scheduling plans one more before it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# A model directory with only a config: the scheduler needs the model's shape, never its weights.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 131072,
    "max_position_embeddings": 1 << 20,
    "torch_dtype": "bfloat16",
}


def build(cfg: dict):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    model_dir = Path(tempfile.mkdtemp(prefix="kvsim-vllm-model-"))
    (model_dir / "config.json").write_text(json.dumps(MODEL_CONFIG))
    model = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        max_model_len=cfg["max_model_len"],
        dtype="bfloat16",
        seed=0,
    )
    sched_cfg = SchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        scheduler_reserve_full_isl=cfg["scheduler_reserve_full_isl"],
        async_scheduling=cfg["async_scheduling"],
    )
    cache = CacheConfig(
        block_size=cfg["block_size"],
        enable_prefix_caching=cfg["enable_prefix_caching"],
    )
    vllm_config = VllmConfig(scheduler_config=sched_cfg, model_config=model, cache_config=cache)
    cache.num_gpu_blocks = cfg["num_blocks"]
    kv = KVCacheConfig(
        num_blocks=cfg["num_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=cfg["block_size"], num_kv_heads=1, head_size=64, dtype=torch.float32
                ),
            )
        ],
    )
    scheduler = (AsyncScheduler if cfg["async_scheduling"] else Scheduler)(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=cfg["block_size"],
        log_stats=False,
    )
    init_none_hash(sha256)
    hasher = get_request_block_hasher(cfg["block_size"], sha256)
    return scheduler, hasher


def main() -> None:
    from vllm import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    scheduler = hasher = None
    in_flight: deque = deque()  # scheduler outputs not yet updated, oldest first
    out = sys.stdout
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "init":
            scheduler, hasher = build(cmd)
            reply = {"ok": True}
        elif op == "add":
            params = SamplingParams(max_tokens=cmd["max_tokens"], ignore_eos=True)
            scheduler.add_request(
                Request(cmd["id"], cmd["tokens"], params, None, block_hasher=hasher)
            )
            continue
        elif op == "schedule":
            last = scheduler.schedule()
            in_flight.append(last)
            reqs = scheduler.requests
            sched = [
                [rid, n, reqs[rid].num_computed_tokens - n]
                for rid, n in last.num_scheduled_tokens.items()
            ]
            reply = {
                "sched": sched,
                "new": [r.req_id for r in last.scheduled_new_reqs]
                + [
                    rid
                    for rid in last.scheduled_cached_reqs.req_ids
                    if rid in last.scheduled_cached_reqs.resumed_req_ids
                ],
                "preempted": sorted(last.preempted_req_ids or ()),
                "free_blocks": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
                "running": len(scheduler.running),
                "waiting": len(scheduler.waiting),
            }
        elif op == "update":
            sampled = cmd["sampled"]
            last = in_flight.popleft()
            ids = list(last.num_scheduled_tokens)
            output = ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={rid: i for i, rid in enumerate(ids)},
                sampled_token_ids=[[sampled[rid]] if rid in sampled else [] for rid in ids],
                logprobs=None,
                prompt_logprobs_dict={},
                pooler_output=[],
            )
            results = scheduler.update_from_output(last, output)
            done = sorted(
                o.request_id for eco in results.values() for o in eco.outputs if o.finished
            )
            reply = {"done": done}
        else:
            raise ValueError(f"unknown op {op!r}")
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
