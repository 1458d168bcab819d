"""Write the 1M-request sized Zipf stream that `kvsim cachesim` is timed on (docs/benchmarks.md).

Zipf(0.9) over 100,000 objects (popularity unrelated to the id), one size of 1-100 per object,
1,000,000 requests, header ``obj_id,size``; the same draws as the test helpers ``zipf_ids`` and
``var_sizes`` (tests/policies/pol_helpers.py), seed 0::

    python benchmarks/cachesim_zipf.py /tmp/zipf_sized.csv
    python -m experiments.cli cachesim --trace /tmp/zipf_sized.csv --policy lru \
        --capacity 1000000 --json
"""

from __future__ import annotations

import argparse

import numpy as np


def zipf_sized(
    requests: int = 1_000_000, objects: int = 100_000, alpha: float = 0.9, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, objects + 1) ** alpha
    ranks = rng.choice(objects, size=requests, p=p / p.sum())
    ids = rng.permutation(objects)[ranks].astype(np.int64)
    uniq, inv = np.unique(ids, return_inverse=True)
    per_obj = np.random.default_rng(seed + 1000).integers(1, 101, len(uniq))
    return ids, per_obj[inv].astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the CSV to write")
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ids, sizes = zipf_sized(a.requests, a.objects, seed=a.seed)
    body = "\n".join(f"{i},{s}" for i, s in zip(ids.tolist(), sizes.tolist()))
    with open(a.out, "w") as f:
        f.write("obj_id,size\n" + body + "\n")


if __name__ == "__main__":
    import own_tree  # this tree's packages, not the installed checkout's

    own_tree.use()
    main()
