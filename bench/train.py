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
    .venv/bin/python bench/train.py --account --config configs/m7c_125m.yaml   # meta device, no GPU
    .venv/bin/python bench/train.py --matrix --config configs/m7c_125m.yaml    # GPU suite: dense/nsa x
                                                   # checkpointing none/full x eager/compiled, timed

`--account` needs no GPU and no time: one forward + backward of a micro-batch runs on the meta
device under a dispatch mode that adds up, per configuration (attention x activation
checkpointing), the GEMM FLOPs, the bytes read + written by every other (memory-bound) op, the
activations saved for backward and the ops launched. NSA's custom ops are opaque there (their fake
kernels run): each counts as one launch with its inputs and outputs as bytes. The compute dtype is
bf16 throughout (autocast's fp32 islands not modelled); the optimizer step is not included.
The peak memory of a whole step (autocast over fp32 masters, triton ops, AdamW) is bench/memory.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def setup(config: str, sets: list[str]):
    """One process's model, as nsa-train builds it, and its optimizer step on a fixed batch:
    (cfg, model, dev, bf16, step, sync). bench/step_host.py times the same step."""
    import torch

    torch.set_flush_denormal(True)  # as nsa-train does
    from nsa.model import Transformer
    from nsa.train.config import load_config
    from nsa.train.dist import DistInfo, choose_device
    from nsa.train.parallelize import cudagraphs, own_grads, parallelize

    cfg = load_config(config, sets)
    t = cfg.train
    dev = choose_device(t.device, 0)
    info = DistInfo(0, 0, 1, dev, None)
    torch.manual_seed(0)
    model = Transformer(cfg.model, cfg.resolved_vocab_size()).to(dev)
    wrapped = parallelize(model, info, cfg.parallel, None)
    bf16 = t.dtype == "bf16" or (t.dtype == "auto" and dev.type == "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    x = torch.randint(0, cfg.resolved_vocab_size(), (t.batch_size, t.seq_len + 1), device=dev)

    graphs = cudagraphs(cfg.parallel, info)  # compile_mode auto resolved as nsa-train resolves it

    def step() -> None:
        if graphs:  # as nsa-train marks each micro-batch and owns the .grad buffers
            own_grads(model.parameters())
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = wrapped(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=not graphs)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    return cfg, model, dev, bf16, step, sync


def one(config: str, sets: list[str], steps: int, warmup: int) -> dict:
    import torch

    cfg, model, dev, bf16, step, sync = setup(config, sets)
    t = cfg.train
    n_params = model.num_params()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

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


# Ops that move no data (views, allocation, metadata): no launch, no bytes.
_FREE = {
    "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
    "select", "slice", "split", "split_with_sizes", "unbind", "detach", "alias", "as_strided", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "_reshape_alias",
    "unfold", "diagonal", "chunk", "narrow", "view_as", "_to_copy_noop", "set_", "resize_",
}  # fmt: skip
_GEMM = {"mm", "addmm", "bmm", "baddbmm"}


def account(config: str, sets: list[str]) -> dict:
    """GEMM FLOPs, memory-bound bytes, saved activations and launches of one micro-batch, on meta."""
    import collections

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from nsa.model import Transformer
    from nsa.train.config import load_config
    from nsa.train.dist import DistInfo
    from nsa.train.parallelize import parallelize

    cfg = load_config(config, [*sets, "model.nsa.backend=eager"])
    t = cfg.train

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.flops = 0
            self.bytes = 0
            self.launches = 0
            self.ops: collections.Counter[str] = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._opname
            if func.namespace == "aten" and name in _FREE:
                return out
            ins = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            if func.namespace == "aten" and name in _GEMM:
                a, b = (ins[-2], ins[-1])
                m, k = a.shape[-2], a.shape[-1]
                batch = a.numel() // (m * k)
                self.flops += 2 * batch * m * k * b.shape[-1]
            else:
                self.bytes += sum(x.numel() * x.element_size() for x in ins + outs)
            self.launches += 1
            self.ops[f"{func.namespace}::{name}"] += 1
            return out

    with torch.device("meta"):
        model = Transformer(cfg.model, cfg.resolved_vocab_size()).to(torch.bfloat16)
    wrapped = parallelize(model, DistInfo(0, 0, 1, torch.device("meta"), None), cfg.parallel, None)
    x = torch.zeros(t.batch_size, t.seq_len + 1, dtype=torch.long, device="meta")
    params = {id(p) for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(z: torch.Tensor) -> torch.Tensor:
        base = z._base if z._base is not None else z
        if id(base) not in params:
            saved[id(base)] = base.numel() * base.element_size()
        return z

    fwd, bwd = Count(), Count()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda z: z), fwd:
        loss = wrapped(x[:, :-1], x[:, 1:])
    with bwd:
        loss.backward()
    return {
        "bench": "train/account", "config": config, "sets": sets, "attention": cfg.model.attention,
        "activation_checkpointing": cfg.parallel.activation_checkpointing, "seq_len": t.seq_len,
        "batch": t.batch_size, "dtype": "bf16",
        "gemm_gflop": round((fwd.flops + bwd.flops) / 1e9, 2),
        "memory_bound_gb": round((fwd.bytes + bwd.bytes) / 1e9, 3),
        # Checkpointed blocks save through torch's own hooks (inside ours): their block inputs are
        # not in this figure, which counts what the un-checkpointed parts keep.
        "saved_activations_mb": round(sum(saved.values()) / 1e6, 1),
        "launches": fwd.launches + bwd.launches,
        "launches_forward": fwd.launches,
        "top_ops": dict((fwd.ops + bwd.ops).most_common(6)),
    }  # fmt: skip


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
    ap.add_argument(
        "--account", action="store_true", help="meta-device account per (attention, checkpointing); no GPU"
    )
    ap.add_argument(
        "--matrix",
        action="store_true",
        help="time attention x {none, full} checkpointing x {eager, compiled}",
    )
    args = ap.parse_args()
    if args.heartbeat:
        print(json.dumps(heartbeat_cost()))
        return
    if args.account:
        for attention in args.attention.split(","):
            for ac in ("none", "selective", "full"):
                sets = [*args.sets, f"model.attention={attention}", f"parallel.activation_checkpointing={ac}"]
                print(json.dumps(account(args.config, sets)), flush=True)
        return
    if args.one:
        print(json.dumps(one(args.config, args.sets, args.steps, args.warmup)), flush=True)
        return
    if args.matrix:
        for attention in args.attention.split(","):
            for ac in ("none", "full"):
                for compiled in ("false", "true"):
                    sets = [*args.sets, f"model.attention={attention}", f"parallel.activation_checkpointing={ac}",
                            f"parallel.compile={compiled}"]  # fmt: skip
                    cmd = [sys.executable, __file__, "--one", "--config", args.config, "--steps", str(args.steps),
                           "--warmup", str(args.warmup)]  # fmt: skip
                    for x in sets:
                        cmd += ["--set", x]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
                    row = (
                        json.loads(out.stdout.strip().splitlines()[-1])
                        if out.returncode == 0
                        else {"bench": "train/step", "sets": sets, "error": out.stderr[-2000:]}
                    )
                    row["compile"] = compiled == "true"
                    print(json.dumps(row), flush=True)
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
