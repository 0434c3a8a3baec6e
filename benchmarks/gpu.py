"""L1<->L2 copy throughput of the GPU backend against a plain pinned copy, in one run.

    python benchmarks/gpu.py [--json] [--device cuda|cpu] [--ranks R] [--pages N]
                             [--page-bytes B] [--layers L] [--cycles C] [--io auto|direct|staged]
                             [--slab-dir D] [--timeout S]

It writes a log of large transitions (each rank stores N pages at every WriteDone and
loads N pages at every LoadBack), measures a plain pinned host<->device copy of one
rank's batch (N pages, both directions), replays the log with `kvsm gpu replay`'s
machinery, and prints {"pinned_gbps", "replay_l1_l2_gbps", "ratio", ...}.

The replay's figure is the bytes of every load and store of every rank over the time
the bus was busy with any of them (the union of the ranks' copy intervals, each from
issuing a batch to its synchronisation), so ranks that copy at once are not counted
twice. As for the pinned copy, which is warmed up before it is timed, the replay's
buffers are allocated and its kernels launched once before any interval starts. On the CPU, "device" memory is host memory and the pinned copy is a memcpy;
the target ratio (>= 0.85) is for an H200 with N >= 1024 pages of >= 64 KiB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvsm import gpu as _backend  # noqa: E402, F401 - its warning filter, before torch
from kvsm.config import Config  # noqa: E402
from kvsm.log import Header, LogWriter  # noqa: E402
from kvsm.state import initial_state  # noqa: E402
from kvsm.transitions import Transition, apply  # noqa: E402


def build_log(path: Path, R: int, pages: int, cycles: int) -> int:
    """Each cycle: a request inserts a new prefix of R*pages pages (evicting the last
    one), backs it up (every rank stores `pages` pages), commits, finishes, drops it
    from L1, and a second request loads it back (every rank loads `pages` pages).
    Returns the number of transitions."""
    n = R * pages
    cfg = Config(name="bench-gpu", R=R, P=1, L1=pages, L2=2 * n)
    s = initial_state(cfg)
    count = 0
    with LogWriter(path, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={"benchmark": "gpu", "pages": pages, "cycles": cycles})) as w:

        def step(name: str, rank: int | None = None, **args: object) -> None:
            nonlocal s, count
            t = Transition.make(name, rank=rank, **args)
            s = apply(s, t)
            w.write(t, s)
            count += 1

        rid = 0
        for c in range(cycles):
            tokens = [c * 10 * n + k for k in range(n)]  # a fresh prefix each cycle
            step("Arrive", rid=rid, tokens=tokens, out_pages=0)
            step("Match", rid=rid)
            step("Insert", rid=rid)
            node = s.requests[rid].node
            step("Reserve", node=node, fits=True)
            for r in range(R):
                step("WriteDone", rank=r)
            for r in range(R):
                step("CommitCall", rank=r)
            step("Commit")
            step("Finish", rid=rid)
            step("EvictDevice", node=node)
            rid += 1
            # one page more: a match covers a prompt but its last page, so this one
            # matches the whole evicted prefix
            step("Arrive", rid=rid, tokens=tokens + [tokens[-1] + 1], out_pages=0)
            step("Match", rid=rid)
            step("LoadBack", rid=rid)
            for r in range(R):
                step("LoadDone", rank=r)
            step("Abort", rid=rid)
            rid += 1
    return count


def pinned_gbps(device: str, pages: int, page_words: int, reps: int) -> float:
    """A plain copy of one rank's batch between pinned host memory and the device, each
    direction timed `reps` times; the median of each (on the CPU: between two host
    buffers)."""
    import statistics  # noqa: PLC0415

    import torch  # noqa: PLC0415

    cuda = device == "cuda"
    host = torch.empty((pages, page_words), dtype=torch.int64, pin_memory=cuda).fill_(7)
    dev = torch.empty((pages, page_words), dtype=torch.int64, device=device).fill_(9)

    def timed(dst: torch.Tensor, src: torch.Tensor) -> float:
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=cuda)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    for _ in range(3):  # first touch, warm-up
        timed(dev, host)
        timed(host, dev)
    h2d = statistics.median(timed(dev, host) for _ in range(reps))
    d2h = statistics.median(timed(host, dev) for _ in range(reps))
    return 2 * host.numel() * 8 / (h2d + d2h) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pages", type=int, default=1024, help="pages each rank moves per transition")
    ap.add_argument("--page-bytes", type=int, default=65536, help="bytes per page and layer")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--cycles", type=int, default=4, help="store + load-back cycles")
    ap.add_argument("--io", choices=("auto", "direct", "staged"), default="auto")
    ap.add_argument("--reps", type=int, default=10, help="repetitions of the pinned copy")
    ap.add_argument("--slab-dir", default="/dev/shm", help="where the shared host slab file is made")
    ap.add_argument("--timeout", type=int, default=120, help="seconds a rank waits for the others at an agreement")
    a = ap.parse_args()

    import torch  # noqa: PLC0415

    from kvsm.gpu.launch import Options, replay  # noqa: PLC0415

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: CUDA is not available on this machine")
    page_words = a.layers * a.page_bytes // 8
    with tempfile.TemporaryDirectory(prefix="kvsm-bench-") as d:
        log = Path(d) / "bench.jsonl"
        t0 = time.perf_counter()
        transitions = build_log(log, a.ranks, a.pages, a.cycles)
        t_log = time.perf_counter() - t0
        pinned = pinned_gbps(device, a.pages, page_words, a.reps)
        run = replay(Options(str(log), device=device, page_bytes=a.page_bytes, layers=a.layers, io=a.io, timeout_s=a.timeout, slab_dir=a.slab_dir))
    rep = run["gbps_l1_l2"]
    out = {
        "pinned_gbps": round(pinned, 3),
        "replay_l1_l2_gbps": rep,
        "ratio": round(rep / pinned, 3) if pinned else 0.0,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "io": run["io"],
        "ranks": a.ranks,
        "pages_per_transition": a.pages,
        "page_bytes": a.page_bytes * a.layers,
        "cycles": a.cycles,
        "transitions": transitions,
        "ok": run["ok"],
        "bytes_copied": run["bytes_copied"],
        "bytes_verified": run["bytes_verified"],
        "copy_seconds": run["copy_seconds"],
        "replay_seconds": run["seconds"],
        "log_seconds": round(t_log, 3),
        "cpu_threads": os.cpu_count(),
    }
    if run["io_note"]:
        out["io_note"] = run["io_note"]
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>20}: {v}")
    if not run["ok"]:
        print(json.dumps(run["failures"][:5]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
