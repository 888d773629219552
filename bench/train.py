"""Training-step benchmark: tokens/s and peak memory of one config, NSA and dense side by side.

Owns the trainer's speed and memory numbers (recorded in bench/RESULTS.md, "Training"). Each
variant runs in its own subprocess (so peak memory is that variant's alone) and times full
optimizer steps exactly as nsa-train builds them: the same `Transformer`, `parallelize` (activation
checkpointing when the config asks), bf16 autocast on CUDA, AdamW (fused on CUDA), gradient
clipping; random tokens, so the data pipeline is not in the number (bench/data.py measures that).
tokens/s = batch x seq_len x measured steps / wall seconds of those steps (after warm-up steps).
Prints one JSON row per variant and one ratio row; never asserts.

    .venv/bin/python bench/train.py --config configs/tiny.yaml --steps 20
    .venv/bin/python bench/train.py --config configs/bench_20m_seq4096.yaml --steps 2 --warmup 1
    .venv/bin/python bench/train.py --config configs/m7c_125m.yaml --set train.batch_size=4   # GPU
    .venv/bin/python bench/train.py --heartbeat      # cost of one heartbeat rewrite
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def one(config: str, sets: list[str], steps: int, warmup: int) -> dict:
    import torch

    torch.set_flush_denormal(True)  # as nsa-train does
    from nsa.model import Transformer
    from nsa.train.config import load_config
    from nsa.train.dist import DistInfo, choose_device
    from nsa.train.parallelize import parallelize

    cfg = load_config(config, sets)
    t = cfg.train
    dev = choose_device(t.device, 0)
    info = DistInfo(0, 0, 1, dev, None)
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.resolved_vocab_size()).to(dev)
    n_params = model.num_params()
    wrapped = parallelize(model, info, cfg.parallel, None)
    bf16 = t.dtype == "bf16" or (t.dtype == "auto" and dev.type == "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    vocab = cfg.resolved_vocab_size()
    x = torch.randint(0, vocab, (t.batch_size, t.seq_len + 1), device=dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = wrapped(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    total = sum(times)
    row = {
        "bench": "train/step",
        "config": config,
        "sets": sets,
        "attention": cfg.model.attention,
        "params": n_params,
        "seq_len": t.seq_len,
        "batch": t.batch_size,
        "activation_checkpointing": cfg.parallel.activation_checkpointing,
        "dtype": "bf16" if bf16 else "fp32",
        "device": torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"cpu x{torch.get_num_threads()}",
        "steps": steps,
        "step_s_mean": round(total / steps, 4),
        "step_s_min": round(min(times), 4),
        "tokens_per_s": round(t.batch_size * t.seq_len * steps / total, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
    }
    if dev.type == "cuda":
        row["peak_cuda_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return row


def heartbeat_cost(n: int = 2000) -> dict:
    """What a heartbeat costs: the trainer rewrites it 2-3 times per micro-batch."""
    import tempfile

    from nsa.runfiles import RunDir
    from nsa.telemetry import Recorder

    with tempfile.TemporaryDirectory() as d:
        rec = Recorder(RunDir(d), rank=0, tensorboard=False)
        t0 = time.perf_counter()
        for i in range(n):
            rec.beat("forward_backward", i)
        dt = time.perf_counter() - t0
    return {"bench": "train/heartbeat", "beats": n, "us_per_beat": round(dt / n * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/tiny.yaml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="section.key=value (repeatable)")
    ap.add_argument("--steps", type=int, default=10, help="measured optimizer steps per variant")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--attention", default="nsa,dense", help="variants, comma separated")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: run in this process
    ap.add_argument("--heartbeat", action="store_true", help="only time the heartbeat write")
    args = ap.parse_args()
    if args.heartbeat:
        print(json.dumps(heartbeat_cost()))
        return
    if args.one:
        print(json.dumps(one(args.config, args.sets, args.steps, args.warmup)), flush=True)
        return
    rows = {}
    for attention in args.attention.split(","):
        cmd = [sys.executable, __file__, "--one", "--config", args.config, "--steps", str(args.steps),
               "--warmup", str(args.warmup)]  # fmt: skip
        for s in [*args.sets, f"model.attention={attention}"]:
            cmd += ["--set", s]
        out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        if out.returncode != 0:
            print(json.dumps({"bench": "train/step", "attention": attention, "error": out.stderr[-2000:]}))
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows[attention] = row
        print(json.dumps(row), flush=True)
    if "nsa" in rows and "dense" in rows:
        n, d = rows["nsa"], rows["dense"]
        print(json.dumps({
            "bench": "train/nsa_vs_dense", "config": args.config, "seq_len": n["seq_len"],
            "tokens_per_s_ratio": round(n["tokens_per_s"] / d["tokens_per_s"], 3),
            "peak_rss_ratio": round(n["peak_rss_gb"] / d["peak_rss_gb"], 3),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
