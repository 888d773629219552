"""The boot banner and the files the trainer writes once at boot (config.yaml, train_manifest.json).

Owns what a person reads first: the config and its hash, parameters, world and parallel layout,
attention backend, batch arithmetic, dtype, device, the FLOP account (keys per query, FLOPs per
token, the GPU's peak), the memory estimate, data and resume. The compile line is added after the
first step, when dynamo's counts are known. It must not train or decide anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from nsa.malloc import loaded_allocator
from nsa.runfiles import RunDir, atomic_write_json, atomic_write_text
from nsa.telemetry.manifest import build_manifest
from nsa.train import memory
from nsa.train.config import TrainConfig
from nsa.train.dist import DistInfo
from nsa.train.parallelize import compile_mode


def attention_desc(cfg: TrainConfig, device: torch.device) -> str:
    """The banner's attention line, with the NSA backend this device resolves to: e.g. "nsa (triton)"."""
    if cfg.model.attention != "nsa":
        gqa = "; enable_gqa" if device.type == "cuda" else ""
        return f"{cfg.model.attention} (sdpa{gqa})"
    from nsa.attention.nsa import resolve_backend

    chosen = resolve_backend(cfg.model.nsa.backend, device)
    asked = cfg.model.nsa.backend
    return f"nsa ({chosen})" + (f"; model.nsa.backend={asked}" if asked != chosen else "")


def banner(
    cfg: TrainConfig, info: DistInfo, *, config_path: str, n_params: int, vocab: int, bf16: bool, fsdp: bool,
    flops: dict[str, Any], peak: tuple[str, float] | None, data_desc: str, malloc_note: str, run_dir: Path,
    resume: str,
) -> dict[str, str]:  # fmt: skip
    t, p = cfg.train, cfg.parallel
    cuda = info.device.type == "cuda"
    devices = torch.cuda.get_device_name(info.device) if cuda else f"cpu x{torch.get_num_threads()} threads"
    layout = (
        p.strategy if info.distributed else "single"
    ) + f"; activation_checkpointing={p.activation_checkpointing}"
    resolved = compile_mode(p, info)  # `auto` resolved on this device and world
    mode = f" {resolved}" if p.compile and (resolved != "default" or p.compile_mode == "auto") else ""
    mode += " (auto)" if p.compile and p.compile_mode == "auto" else ""
    mode += "; grads in trainer-owned buffers" if resolved == "reduce-overhead" else ""
    layout += f"; compile={p.compile_backend if p.compile else 'off'}{mode}"
    keys = flops["keys_per_query"]
    flop_line = (
        f"{flops['flops_per_token'] / 1e9:.3f} GFLOP/token (attention {flops['attention_flops_per_token'] / 1e9:.3f}; "
        f"keys/query {keys['total']:.0f} = cmp {keys['compressed']:.0f} + sel {keys['selected']:.0f} + "
        f"win {keys['window']:.0f} at seq {t.seq_len})"
        if cfg.model.attention == "nsa"
        else f"{flops['flops_per_token'] / 1e9:.3f} GFLOP/token (attention {flops['attention_flops_per_token'] / 1e9:.3f}; "
        f"keys/query {keys['total']:.0f} causal at seq {t.seq_len})"
    )
    flop_line += (
        f"; MFU against {peak[0]} {peak[1] / 1e12:.0f} TFLOP/s bf16" if peak else "; no MFU (peak unknown)"
    )
    est = memory.estimate(cfg, vocab, info.world_size, bf16, fsdp, info.device)
    total_gb = torch.cuda.get_device_properties(info.device).total_memory / 2**30 if cuda else None
    return {
        "config": f"{config_path} (hash {cfg.config_hash()})",
        "params": f"{n_params:,} ({n_params / 1e6:.1f}M; vocab {vocab})",
        "world": f"{info.world_size} ({info.backend or 'no process group'}, {layout})",
        "attention": attention_desc(cfg, info.device),
        "batch": (
            f"global {cfg.global_batch(info.world_size)} seqs = {t.batch_size} x {info.world_size} ranks x "
            f"{t.grad_accum} accum; {cfg.tokens_per_step(info.world_size):,} tokens/step; {t.steps} steps"
        ),
        "dtype": (
            ("bf16 FSDP2 mixed precision" if fsdp else "bf16 autocast") + ", fp32 master weights"
            if bf16
            else "fp32"
        )
        + ("; fp32 matmuls in TF32" if cuda else ""),
        "device": devices,
        "flops": flop_line,
        "memory": memory.describe(est, p.activation_checkpointing, total_gb),
        "malloc": loaded_allocator() + (f" ({malloc_note})" if malloc_note else ""),
        "data": data_desc,
        "run_dir": str(run_dir),
        "resume": resume,
    }


def write_boot_files(
    rd: RunDir, cfg: TrainConfig, info: DistInfo, lines: dict[str, str], extra: dict[str, Any]
) -> None:
    if info.local_rank != 0:
        return
    atomic_write_text(rd.config, cfg.to_yaml())
    manifest = {
        **extra, "config_hash": cfg.config_hash(), "world_size": info.world_size,
        "run_id": os.environ.get("NSA_RUN_ID"), "banner": lines,
    }  # fmt: skip
    atomic_write_json(rd.train_manifest, build_manifest(manifest))


def format_banner(lines: dict[str, str]) -> str:
    return "[nsa] " + "\n[nsa] ".join(f"{k:>8}: {v}" for k, v in lines.items())
