"""The replay's agreement as one all-reduce against the same agreement as an object
collective, in one run: why `kvsm/gpu/collectives.py` keeps the all-reduce.

    python benchmarks/agreement.py [--json] [--ranks R] [--rounds N] [--repeat K]

R gloo processes on this host each run N agreements both ways, alternating the two
ways K times; the fastest run of each counts:

- allreduce: `collectives.agree`, one MAX all-reduce of 8 + 2R int64 (the digest's
  limbs, their negations, a status and a first-bad slot per rank);
- object: `dist.all_gather_object` of (digest, status, first bad), then the MIN and
  MAX digests and the statuses read from the R gathered tuples (what the agreement
  would be without the packing: two all-gathers, pickling and unpickling).

It prints {"allreduce_us", "object_us", "ratio"}: microseconds per agreement on rank 0
and object / allreduce.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvsm import gpu as _backend  # noqa: E402, F401 - its warning filter, before torch

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from kvsm.gpu import collectives  # noqa: E402

DIGEST = "0123456789abcdef0123456789abcdef"


def _object_agree(digest: str, status: int, first_bad: int, world: int) -> tuple[str, str, list[int]]:
    out: list = [None] * world
    dist.all_gather_object(out, (digest, status, first_bad))
    digests = [d for d, _, _ in out]
    return min(digests), max(digests), [s for _, s, _ in out]


def _rank(rank: int, world: int, port: int, rounds: int, repeat: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with collectives.process_group(rank, world, 120):
        best = {"allreduce": float("inf"), "object": float("inf")}
        for _ in range(repeat):
            for way in best:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(rounds):
                    if way == "allreduce":
                        collectives.agree(DIGEST, 0, 0, rank, world)
                    else:
                        _object_agree(DIGEST, 0, 0, world)
                best[way] = min(best[way], time.perf_counter() - t0)
        if rank == 0:
            q.put({k: v / rounds * 1e6 for k, v in best.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, a.ranks, port, a.rounds, a.repeat, q)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    res = q.get(timeout=600)
    for p in procs:
        p.join()
    out = {
        "ranks": a.ranks,
        "rounds": a.rounds,
        "allreduce_us": round(res["allreduce"], 1),
        "object_us": round(res["object"], 1),
        "ratio": round(res["object"] / res["allreduce"], 2),
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.ranks} ranks, {a.rounds} agreements: all-reduce {out['allreduce_us']} us, object collective {out['object_us']} us per agreement: ratio {out['ratio']}")


if __name__ == "__main__":
    main()
