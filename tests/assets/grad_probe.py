"""Gradient probe for the DDP / FSDP2 equivalence test (run alone or under torchrun, gloo on CPU).

Builds the tiny model exactly as nsa-train does (same seed, `parallelize` with the given strategy
and activation checkpointing), feeds a fixed global batch split evenly over ranks and over
`accum` micro-batches (gradient sync only on the last one, as the trainer does), and rank 0 writes
every parameter's full gradient to OUT as a torch file. It ends as nsa-train does (exit_process);
`--plain-exit` returns normally instead (bench/torchrun_exit.py: the SIGABRT that exit avoids).
Several probes separated by `+` run one after the other in the same processes and process group, each
on a model of its own built from the same seed: one torchrun start (an agent and two ranks, ~12 s of
CPU on the 2-core VM, bench/RESULTS.md "suitetime3") serves both the DDP and the FSDP2 probe.

    python tests/assets/grad_probe.py OUT [--ac] [--fsdp] [--accum N] [--plain-exit]
    torchrun --standalone --nproc_per_node 2 tests/assets/grad_probe.py OUT --ac
    torchrun --standalone --nproc_per_node 2 tests/assets/grad_probe.py A.pt --ac + B.pt --ac --fsdp --accum 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from nsa.model import Transformer
from nsa.train.config import load_config
from nsa.train.dist import exit_process, init_distributed, teardown
from nsa.train.parallelize import grad_sync, parallelize

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
GLOBAL_BATCH, SEQ = 8, 64


def _probe(args: argparse.Namespace, info) -> None:
    """One probe: the gradients of the fixed global batch, written by rank 0 to args.out."""
    sets = [f"parallel.activation_checkpointing={str(args.ac).lower()}", f"train.seq_len={SEQ}"]
    if args.fsdp:
        sets.append("parallel.strategy=fsdp")
    cfg = load_config(TINY, sets)
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model, cfg.resolved_vocab_size())
    wrapped = parallelize(model, info, cfg.parallel, None)
    gen = torch.Generator().manual_seed(1234)
    data = torch.randint(0, 257, (GLOBAL_BATCH, SEQ + 1), generator=gen)
    per_rank = GLOBAL_BATCH // info.world_size
    mine = data[info.rank * per_rank : (info.rank + 1) * per_rank]
    micro = per_rank // args.accum
    for i in range(args.accum):
        chunk = mine[i * micro : (i + 1) * micro]
        with grad_sync(wrapped, i == args.accum - 1):
            (wrapped(chunk[:, :-1], chunk[:, 1:]) / args.accum).backward()
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad
        grads[name] = g.full_tensor() if hasattr(g, "full_tensor") else g.detach().clone()
    if info.rank == 0:
        torch.save(grads, args.out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ac", action="store_true")
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--plain-exit", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    parts: list[list[str]] = [[]]
    for a in argv:
        if a == "+":
            parts.append([])
        else:
            parts[-1].append(a)
    probes = [ap.parse_args(p) for p in parts]
    info = init_distributed("cpu", 60)
    for args in probes:
        _probe(args, info)
    teardown(info, sync=True)
    if not any(a.plain_exit for a in probes):
        exit_process(0)  # as nsa-train ends: see exit_process for the SIGABRT this avoids


if __name__ == "__main__":
    main()
