"""The real vLLM v1 scheduler behind a line protocol: the reference side of `kvsim vllm-check`.

Runs in a Python environment of its own that has vLLM (``kvsim vllm-check --python``), not in
kvsim's: it imports only vLLM and the standard library. It builds vLLM's ``Scheduler`` as vLLM's
own unit tests do (fake KV-cache config, no model, no GPU) and answers one JSON line per command
on stdout; kvsim plays the client and the model: it adds requests with their token ids, asks for a
schedule, prices the step, and reports the sampled tokens.

Commands (one JSON object per line on stdin), and replies:

``{"op": "init", "block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens",
"long_prefill_token_threshold", "scheduler_reserve_full_isl", "enable_prefix_caching",
"async_scheduling", "max_model_len", "offload"}`` -> ``{"ok": true}`` (``AsyncScheduler`` with
async; ``offload`` is optional, see below)

``{"op": "add", "id", "tokens", "max_tokens"}`` -> no reply (requests are added in bulk)

``{"op": "schedule"}`` -> ``{"sched": [[id, n, computed_before], ...], "new": [ids admitted or
resumed], "preempted": [...], "free_blocks", "running", "waiting"}``

``{"op": "update", "sampled": {id: token}}`` -> ``{"done": [ids finished]}``: the output of the
oldest step scheduled and not yet updated (async scheduling plans one more before it).

CPU offloading (``"offload": {"cpu_chunks", "blocks_per_chunk", "eviction_policy": "lru" |
"arc"}``; null or absent: none). vLLM's ``OffloadingConnector`` runs on the scheduler side
(connector scheduler + ``CPUOffloadingManager`` holding exactly ``cpu_chunks`` chunks of
``blocks_per_chunk`` GPU blocks); this driver plays its one worker, copies nothing, and reports
a transfer job done only when the client says so. With offload on:

- ``schedule`` also answers ``"jobs": [[job_id, "load" | "store", id, num_gpu_blocks], ...]``
  (the jobs this step created, by job id; the worker starts a load in this step and a store at
  the start of the next) and ``"flush": [job ids]``: store jobs (this step's or older) whose GPU
  source blocks this step reallocates or whose request it preempts; the worker submits them at
  once and waits for their copies before this step's forward pass (their reports may come
  later: the worker reports its queue in order).
- ``update`` takes ``"finished_jobs": [job ids]`` (each job once, at this step or a later one
  than the step that created it), reported as the offloading worker does: ``completed_jobs``
  for every job, ``finished_recving`` for the request of each load. ``sampled`` may be
  omitted.
- A step with nothing scheduled (requests waiting for their loads, or stores still in flight
  after the last request finished) has ``"sched": []``; its ``update`` mirrors the model
  runner's no-forward path (``kv_connector_no_forward``): the connector output alone.

Connector defaults kept (the extra config holds the three keys above and the byte size):
``offload_prompt_only`` true (decode KV is never stored; a later turn stores the earlier outputs
as part of its prompt), ``sync_load_budget_bytes`` 0 (every load is async: the request waits in
WAITING_FOR_REMOTE_KVS, unscheduled, until its load is reported), ``store_threshold`` 0 (every
new chunk is stored), no ``max_load_tokens``/``max_offload_tokens``, no KV events, stats off.
A lookup skips a request for the step (it stays waiting) while its CPU hit reaches a chunk whose
store is not yet reported, while another request loads one of its hit chunks, or while it has
jobs of its own in flight (a preempted request). Async scheduling is set back after the CPU
platform turns it off: with a kv_both connector it makes the scheduler defer freeing a finished
request's blocks until its last in-flight step is updated (``defer_block_free``);
``defer_async_loads`` stays off (HiSparse only).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

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
    from vllm.config import (
        CacheConfig,
        KVTransferConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.utils.hashing import sha256
    from vllm.utils.math_utils import round_up
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
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
    offload = cfg.get("offload")
    kv_transfer = None
    if offload:
        # CPUOffloadingSpec: num_chunks = cpu_bytes_to_use // round_up(block bytes x
        # blocks_per_chunk, page size), block bytes summed over the groups (no kv_cache_tensors).
        block_bytes = sum(
            g.kv_cache_spec.page_size_bytes * len(g.layer_names) for g in kv.kv_cache_groups
        )
        chunk_bytes = round_up(
            block_bytes * offload["blocks_per_chunk"], CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT
        )
        kv_transfer = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",  # what --kv-offloading-size sets
            engine_id="kvsim",  # not a random uuid
            kv_connector_extra_config={
                "cpu_bytes_to_use": offload["cpu_chunks"] * chunk_bytes,
                "blocks_per_chunk": offload["blocks_per_chunk"],
                "eviction_policy": offload["eviction_policy"],
            },
        )
    vllm_config = VllmConfig(
        scheduler_config=sched_cfg,
        model_config=model,
        cache_config=cache,
        kv_transfer_config=kv_transfer,
    )
    # The CPU platform turns async scheduling off; a GPU engine keeps it, and with a connector
    # the scheduler reads it (max_concurrent_batches -> defer_block_free).
    vllm_config.scheduler_config.async_scheduling = cfg["async_scheduling"]
    cache.num_gpu_blocks = cfg["num_blocks"]
    scheduler = (AsyncScheduler if cfg["async_scheduling"] else Scheduler)(
        vllm_config=vllm_config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=cfg["block_size"],
        log_stats=False,
    )
    if offload:
        manager = scheduler.connector.scheduler.manager
        if manager._num_chunks != offload["cpu_chunks"]:
            raise RuntimeError(
                f"CPU offload holds {manager._num_chunks} chunks, not {offload['cpu_chunks']}"
            )
    init_none_hash(sha256)
    hasher = get_request_block_hasher(cfg["block_size"], sha256)
    return scheduler, hasher


def jobs_of(meta) -> list[list]:
    """The transfer jobs in a step's OffloadingConnectorMetadata: [job_id, kind, id, blocks]."""
    jobs = []
    for job_id, job in meta.load_jobs.items():
        # sync_load_budget_bytes is 0: a sync load would finish inside the step, unreported.
        assert not job.sync, job_id
        jobs.append([job_id, "load", job.req_id, len(job.dst_spec.block_ids)])
    for job_id, job in meta.store_jobs.items():
        jobs.append([job_id, "store", job.req_id, len(job.src_spec.block_ids)])
    return sorted(jobs)


class InOrder(dict):
    """A set of request ids that iterates in the order they were added. vLLM keeps the requests
    finished since the last step in a set; its connector plans their stores and commits their CPU
    recency in that set's (hash) order. In this order instead, the order they finished, as
    kvsim's engine does, the CPU manager's ranks do not hang on string hashes."""

    def add(self, rid: str) -> None:
        self[rid] = None


def main() -> None:
    from vllm import SamplingParams
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request

    # vLLM's Scheduler and block hasher once "init" has run (vLLM is not typed where we check)
    scheduler: Any = None
    hasher: Any = None
    offload = False
    in_flight: deque = deque()  # (step, scheduler output) not yet updated, oldest first
    step = 0  # schedule calls so far
    open_jobs: dict[int, tuple[int, list]] = {}  # job id -> (step, "jobs" entry) until done
    out = sys.stdout
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "init":
            scheduler, hasher = build(cmd)
            scheduler.finished_req_ids = InOrder()
            offload = bool(cmd.get("offload"))
            reply: dict[str, Any] = {"ok": True}
        elif op == "add":
            params = SamplingParams(max_tokens=cmd["max_tokens"], ignore_eos=True)
            scheduler.add_request(
                Request(cmd["id"], cmd["tokens"], params, None, block_hasher=hasher)
            )
            continue
        elif op == "schedule":
            last = scheduler.schedule()
            scheduler.finished_req_ids = InOrder()  # schedule() left a plain set
            step += 1
            in_flight.append((step, last))
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
                "waiting": scheduler.get_request_counts()[1],  # with the block holders
            }
            if offload:
                meta = last.kv_connector_metadata
                jobs = jobs_of(meta)
                open_jobs.update((job[0], (step, job)) for job in jobs)
                reply["jobs"] = jobs
                reply["flush"] = sorted(meta.jobs_to_flush or ())
        elif op == "update":
            sampled = cmd.get("sampled", {})
            last_step, last = in_flight.popleft()
            kv_out = None
            if offload:
                done_jobs = sorted(cmd.get("finished_jobs", ()))
                reported = []
                for job_id in done_jobs:
                    created, job = open_jobs.pop(job_id)  # KeyError: unknown or reported twice
                    # This step's worker never saw a job that a later step created.
                    if created > last_step:
                        raise ValueError(f"job {job_id} of step {created} done in {last_step}")
                    reported.append(job)
                # As OffloadingConnectorWorker.get_finished / build_connector_worker_meta: one
                # worker, so each job counts 1; only async loads make a request finish recving.
                kv_out = KVConnectorOutput(
                    finished_recving={job[2] for job in reported if job[1] == "load"},
                    kv_connector_worker_meta=(
                        OffloadingWorkerMetadata(completed_jobs=dict.fromkeys(done_jobs, 1))
                        if done_jobs
                        else None
                    ),
                )
            ids = list(last.num_scheduled_tokens)
            if not ids:
                # GPUModelRunner.execute_model on an empty batch: kv_connector_no_forward.
                output = ModelRunnerOutput.with_kv_conn_output_only(kv_out)
            else:
                output = ModelRunnerOutput(
                    req_ids=ids,
                    req_id_to_index={rid: i for i, rid in enumerate(ids)},
                    sampled_token_ids=[[sampled[rid]] if rid in sampled else [] for rid in ids],
                    logprobs=None,
                    prompt_logprobs_dict={},
                    pooler_output=[],
                    kv_connector_output=kv_out,
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
    # Runs must not depend on the caller's hash seed: finished_req_ids is ordered (InOrder), and
    # the pin covers any other set of strings vLLM iterates.
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    main()
