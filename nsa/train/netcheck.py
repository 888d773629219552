"""The multi-GPU preflight: a short all-reduce across every rank, run by torchrun before training.

`python -m torch.distributed.run ... -m nsa.train.netcheck [--mb 64] [--iters 5] [--timeout 60]`:
NCCL on CUDA, gloo on CPU; a process group with a timeout, one warm-up all-reduce, then `--iters`
timed ones of `--mb` MiB float32. Rank 0 prints one JSON line (`NETCHECK {...}`): world size, bytes,
seconds per all-reduce, algorithm and bus bandwidth (nccl-tests' definition: busbw = algbw x
2(n-1)/n). A failure prints `NETCHECK {"ok": false, "error": ...}` from the rank that saw it and
exits 1. It owns nothing else: no run dir, no checkpoints. The launcher (launcher/launch/netcheck.py)
adds the wall-clock timeout that catches a hang and names the NCCL settings to try.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nsa.train.netcheck")
    ap.add_argument("--mb", type=float, default=64.0, help="MiB per all-reduce")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0, help="process-group timeout, seconds")
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    try:
        cuda = torch.cuda.is_available()
        if cuda:
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            dev = torch.device("cuda", local)
        else:
            dev = torch.device("cpu")
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout))
        n = dist.get_world_size()
        x = torch.ones(int(a.mb * (1 << 20) / 4), dtype=torch.float32, device=dev)
        dist.all_reduce(x)  # warm-up: connections are set up lazily
        if cuda:
            torch.cuda.synchronize()
        if float(x[0]) != n:
            raise RuntimeError(f"all-reduce returned {float(x[0])}, expected {n}: a wrong sum")
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / a.iters
        nbytes = x.numel() * 4
        algbw = nbytes / sec / 1e9
        out = {"ok": True, "backend": backend, "world_size": n, "bytes": nbytes, "iters": a.iters,
               "seconds": round(sec, 6), "algbw_gbps": round(algbw, 3),
               "busbw_gbps": round(algbw * 2 * (n - 1) / n, 3)}  # fmt: skip
        if rank == 0:
            _say(out)
        dist.destroy_process_group()
        return 0
    except Exception as e:  # every failure is reported as one line, then exit 1
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        _say({"ok": False, "rank": rank, "error": msg})
        return 1


def _say(obj: dict) -> None:
    """One `NETCHECK {...}` line in ONE write: the ranks share torchrun's stdout, and under
    PYTHONUNBUFFERED print() writes the text and its newline apart, so two ranks failing at once
    could glue their lines together (seen on CI: rank 1's object followed by rank 0's on one line)."""
    sys.stdout.write("NETCHECK " + json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
