"""`kvsim cost`: the predicted time of one batch shape, per term and in total, so anyone can check a
profile against a measurement; then layer by layer, where the pipeline puts each layer's copy and
compute (``experiments.cost_layers``), drawn with --timeline (``experiments.cost_timeline``).

    kvsim cost --profile h100-public --model llama-3-8b --prefill 2048 --ctx 8192
    kvsim cost --profile a100-vidur --model llama-3-8b --decode-batch 32 --decode-ctx 2000
    kvsim cost --profile h100-sxm --model llama-3-8b --swap-bytes 134217728 --swap-copies 32
    kvsim cost --profile h100-public --model llama-3-8b --prefill 2048 --ctx 6144 \
        --swap-bytes 805306368 --swap-copies 12288 --timeline out/timeline.png
"""

from __future__ import annotations

import argparse
import json


def _nonneg_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "cost",
        help="predicted time of one batch shape under a profile (per term and total)",
        description="Price one engine iteration with the cost model: a prefill (N_NEW new tokens after "
        "N_CTX cached ones, per sequence), a decode batch (B sequences with C context tokens "
        "each), both together (a mixed batch), and/or a swap of X bytes. Per-layer terms, "
        "times the layer count, plus LM head and step overhead; copies pipelined with the "
        "layers as the simulator does.",
    )
    p.add_argument(
        "--profile", required=True, help="GPU name (analytic), committed profile name, or YAML path"
    )
    p.add_argument("--model", required=True, help="model name or spec YAML")
    p.add_argument(
        "--tp", type=int, default=1, metavar="N", help="tensor parallelism: price one GPU of N"
    )
    p.add_argument(
        "--prefill",
        type=_nonneg_int,
        default=0,
        metavar="N_NEW",
        help="new tokens per prefilling sequence",
    )
    p.add_argument(
        "--ctx",
        type=_nonneg_int,
        default=0,
        metavar="N_CTX",
        help="cached tokens before them (default 0)",
    )
    p.add_argument(
        "--prefill-seqs",
        type=_nonneg_int,
        default=1,
        metavar="S",
        help="prefilling sequences (default 1)",
    )
    p.add_argument(
        "--decode-batch", type=_nonneg_int, default=0, metavar="B", help="decoding sequences"
    )
    p.add_argument(
        "--decode-ctx",
        type=_nonneg_int,
        default=0,
        metavar="C",
        help="context tokens of EACH decoding sequence (total = B*C)",
    )
    p.add_argument(
        "--swap-bytes", type=_nonneg_int, default=0, metavar="X", help="bytes copied this iteration"
    )
    p.add_argument(
        "--swap-copies",
        type=_nonneg_int,
        default=None,
        metavar="N",
        help="copy calls moving them (default 1; per-layer KV tensors make a page L copies)",
    )
    p.add_argument(
        "--direction",
        choices=("h2d", "d2h"),
        default="h2d",
        help="h2d: swap-in, pipelined with the layers; d2h: demotion on the other copy engine",
    )
    p.add_argument(
        "--no-pipelining", action="store_true", help="all H2D copies finish before layer 0"
    )
    p.add_argument(
        "--pensieve",
        type=_nonneg_int,
        metavar="N_NEW",
        help="also print Pensieve's per-layer alpha, beta, non-attention for N_NEW new tokens",
    )
    p.add_argument(
        "--all-layers",
        action="store_true",
        help="print every layer's row of the per-layer table (default: runs of alike layers folded)",
    )
    p.add_argument(
        "--timeline",
        metavar="FILE.png",
        help="also draw the iteration's copy and compute streams, layer by layer, to FILE.png",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p


def price(args: argparse.Namespace) -> dict:
    from costmodels import BatchShape, attention_pairs, cost_model, get_model
    from costmodels.tensor_parallel import checked_note

    if args.ctx and not args.prefill:
        raise ValueError("--ctx needs --prefill")
    if args.decode_ctx and not args.decode_batch:
        raise ValueError("--decode-ctx needs --decode-batch")
    if not (args.prefill or args.decode_batch or args.swap_bytes):
        raise ValueError("give --prefill, --decode-batch and/or --swap-bytes")
    cm = cost_model(args.model, args.profile, tp=args.tp)
    tp_note = checked_note(get_model(args.model), cm.tp, cm.profile, "change --tp or --profile")
    seqs = args.prefill_seqs if args.prefill else 0
    shape = BatchShape(
        prefill_tokens=args.prefill * seqs,
        prefill_pairs=seqs * attention_pairs(args.prefill, args.ctx),
        prefill_seqs=seqs,
        decode_seqs=args.decode_batch,
        decode_ctx_tokens=args.decode_batch * args.decode_ctx,
        prefill_lens=((args.prefill, args.ctx),) * seqs if seqs else None,
        decode_lens=(args.decode_ctx,) * args.decode_batch if args.decode_batch else None,
    )
    copies = args.swap_copies if args.swap_copies is not None else (1 if args.swap_bytes else 0)
    kw = {f"{args.direction}_bytes": args.swap_bytes, f"{args.direction}_copies": copies}
    it = cm.iteration(shape, pipelining=not args.no_pipelining, **kw)
    n = shape.tokens
    per_layer = {
        "linear_s": cm.linear_s(n),
        "elementwise_s": cm.elementwise_s(n),
        "prefill_attn_s": cm.prefill_attn_s(
            shape.prefill_pairs, shape.prefill_seqs, shape.prefill_tokens, shape.prefill_lens
        )
        if shape.prefill_seqs
        else 0.0,
        "decode_attn_s": cm.decode_attn_s(shape.decode_seqs, shape.decode_ctx_tokens),
        "layer_s": cm.layer_s(shape),
    }
    out = {
        "profile": cm.profile.name,
        "model": cm.model.name,
        "layers": cm.model.num_layers,
        "tp": cm.tp,
        "tp_note": tp_note,
        "shape": {
            "prefill_tokens": shape.prefill_tokens,
            "prefill_pairs": shape.prefill_pairs,
            "prefill_seqs": shape.prefill_seqs,
            "decode_seqs": shape.decode_seqs,
            "decode_ctx_tokens": shape.decode_ctx_tokens,
            "swap_bytes": args.swap_bytes,
            "swap_copies": copies,
            "direction": args.direction,
        },
        "per_layer": per_layer,
        "all_layers_s": cm.model.num_layers * per_layer["layer_s"],
        "lm_head_s": cm.lm_head_s(shape.rows) if not shape.is_empty else 0.0,
        "step_overhead_s": cm.profile.step_overhead_s if not shape.is_empty else 0.0,
        "compute_s": it.compute_s,
        "h2d_s": it.h2d_s,
        "d2h_s": it.d2h_s,
        "stall_s": it.stall_s,
        "total_s": it.total_s,
    }
    from experiments.cost_layers import iteration_schedule

    out["schedule"] = iteration_schedule(
        cm, per_layer["layer_s"], it.h2d_s, pipelining=not args.no_pipelining
    )
    if args.pensieve:
        c = cm.pensieve_constants(args.pensieve)
        out["pensieve"] = {
            "n_new": c.n_new,
            "alpha_s_per_ctx_token": c.alpha,
            "beta_s": c.beta,
            "non_attention_s": c.non_attention,
        }
    return out


def _t(s: float) -> str:
    if s == 0:
        return "0"
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    if s < 1:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.3f} s"


def main(args: argparse.Namespace) -> int:
    r = price(args)
    if args.timeline:  # matplotlib only when asked for a figure
        from experiments.cost_timeline import write_timeline

        write_timeline(r, args.timeline)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    sh = r["shape"]
    print(
        f"{r['model']} on {r['profile']}: prefill {sh['prefill_tokens']} tokens in {sh['prefill_seqs']} seq(s) "
        f"({sh['prefill_pairs']:.0f} pairs), decode {sh['decode_seqs']} seq(s) over {sh['decode_ctx_tokens']} "
        f"context tokens, {sh['direction']} {sh['swap_bytes']} B in {sh['swap_copies']} copies"
    )
    if r["tp_note"]:
        print(r["tp_note"])
    pl = r["per_layer"]
    rows = [
        ("linear (GEMMs + tau)", pl["linear_s"]),
        ("elementwise", pl["elementwise_s"]),
        ("prefill attention", pl["prefill_attn_s"]),
        ("decode attention", pl["decode_attn_s"]),
        ("layer", pl["layer_s"]),
    ]
    print("per layer:")
    for name, v in rows:
        print(f"  {name:<24} {_t(v):>12}")
    print(f"x {r['layers']} layers:{'':<14} {_t(r['all_layers_s']):>12}")
    for name, key in (
        ("LM head", "lm_head_s"),
        ("step overhead", "step_overhead_s"),
        ("compute", "compute_s"),
        ("H2D copies", "h2d_s"),
        ("D2H copies", "d2h_s"),
        ("stall (copies not hidden)", "stall_s"),
        ("TOTAL (iteration)", "total_s"),
    ):
        print(f"{name:<27} {_t(r[key]):>12}")
    from experiments.cost_layers import layer_table

    for line in layer_table(r, all_layers=args.all_layers):
        print(line)
    if args.timeline:
        print(f"timeline: {args.timeline}")
    if "pensieve" in r:
        c = r["pensieve"]
        print(
            f"pensieve n_new={c['n_new']}: alpha {c['alpha_s_per_ctx_token']:.4g} s/ctx-token/layer, "
            f"beta {_t(c['beta_s'])}/layer, non-attention {_t(c['non_attention_s'])}/layer"
        )
    return 0
