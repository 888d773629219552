"""Long-context evaluation: passkey retrieval per (length, depth) and held-out loss by position.

Owns the two measurements the NSA paper uses to show long context is used, not only tolerated:
- passkey: a 5-digit key hidden at a depth of a filler context of a given length; the model must
  repeat it after "The pass key is". Scored teacher-forced: a trial is correct when the argmax at
  every answer position is the key's token, which is exactly when greedy decoding produces the key.
  Prompts come from a fixed seed, so two checkpoints are scored on the same prompts.
- loss by position: mean next-token loss of held-out sequences in buckets of position; a model that
  uses long context keeps lowering it at later positions.
It takes a built model and the run's tokenizer; it must not train, and writes nothing itself.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import torch
import torch.nn.functional as F

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = " What is the pass key? The pass key is "


def passkey_prompt(tok: Any, length: int, depth: float, key: str) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids) with len(prompt) + len(answer) == length (tokens)."""
    needle = f" The pass key is {key}. Remember it. "
    ans = [int(t) for t in tok.encode(key)]
    fixed = len(tok.encode(needle)) + len(tok.encode(QUESTION)) + len(ans)
    room = length - fixed
    if room < 0:
        raise ValueError(f"passkey length {length} is shorter than the needle and question ({fixed} tokens)")
    filler_ids = [int(t) for t in tok.encode(FILLER)]
    hay = (filler_ids * (room // max(1, len(filler_ids)) + 1))[:room]
    at = round(depth * room)
    prompt = (
        hay[:at] + [int(t) for t in tok.encode(needle)] + hay[at:] + [int(t) for t in tok.encode(QUESTION)]
    )
    return prompt, ans


@torch.no_grad()
def passkey(model: Any, tok: Any, lengths: list[int], depths: list[float], trials: int, seed: int,
            device: torch.device, autocast: Any) -> dict[str, Any]:  # fmt: skip
    """Accuracy per (length, depth) over `trials` keys drawn from `seed`."""
    model.eval()
    rng = random.Random(seed)
    rows = []
    for length in lengths:
        for depth in depths:
            correct = 0
            for _ in range(trials):
                key = f"{rng.randrange(10**4, 10**5)}"
                prompt, ans = passkey_prompt(tok, length, depth, key)
                ids = torch.tensor([prompt + ans], device=device)
                with autocast():
                    logits = model(ids[:, :-1])
                pred = logits[0, len(prompt) - 1 :].argmax(-1).tolist()
                correct += int(pred == ans)
            rows.append({"length": length, "depth": depth, "correct": correct, "trials": trials,
                         "accuracy": correct / trials})  # fmt: skip
    total = sum(r["correct"] for r in rows)
    n = sum(r["trials"] for r in rows)
    return {"seed": seed, "trials": trials, "results": rows, "accuracy": total / max(1, n)}


@torch.no_grad()
def loss_by_position(model: Any, batches: list[tuple[torch.Tensor, torch.Tensor]], buckets: int,
                     device: torch.device, autocast: Any) -> dict[str, Any]:  # fmt: skip
    """Mean loss per bucket of positions over held-out (x, y) batches [B, T]."""
    model.eval()
    sums: torch.Tensor | None = None
    count = 0
    for x, y in batches:
        with autocast():
            logits = model(x.to(device))
        loss = F.cross_entropy(logits.float().transpose(1, 2), y.to(device), reduction="none")  # [B, T]
        s = loss.sum(0)
        sums = s if sums is None else sums + s
        count += loss.shape[0]
    assert sums is not None, "no batches"
    T = sums.shape[0]
    per_pos = (sums / count).cpu()
    edges = sorted({round(i * T / buckets) for i in range(buckets + 1)})
    out = [
        {"start": a, "end": b, "loss": float(per_pos[a:b].mean())}
        for a, b in itertools.pairwise(edges)
        if b > a
    ]
    return {"seq_len": T, "sequences": count, "buckets": out}


def metrics(pk: dict[str, Any] | None, lbp: dict[str, Any] | None) -> dict[str, float]:
    """Namespaced scalars for metrics.jsonl, TensorBoard and W&B."""
    out: dict[str, float] = {}
    if pk:
        out["eval/passkey/accuracy"] = pk["accuracy"]
        for r in pk["results"]:
            out[f"eval/passkey/len{r['length']}_depth{r['depth']:g}"] = r["accuracy"]
    if lbp:
        for b in lbp["buckets"]:
            out[f"eval/loss_by_position/{b['start']:06d}-{b['end']:06d}"] = b["loss"]
    return out


def during_training(
    model: Any, cfg: Any, info: Any, run_dir: Any, rec: Any, step: int, autocast: Any
) -> float:
    """eval.long_context_every: both measurements on this rank; rank 0 writes eval/*.json and metrics."""
    import time

    from nsa.data import build_loader
    from nsa.data.tokenizers import build_tokenizer
    from nsa.runfiles import atomic_write_json

    e, t0 = cfg.eval, time.time()
    try:
        pk = passkey(model, build_tokenizer(cfg.data), e.passkey_lengths, e.passkey_depths, e.passkey_trials,
                     cfg.train.seed, info.device, autocast)  # fmt: skip
        with build_loader(cfg.data, seq_len=cfg.train.seq_len, batch_size=1, rank=0, world_size=1, split="val",
                          seed=cfg.train.seed) as ld:  # fmt: skip
            batches = [ld.next_batch() for _ in range(cfg.train.eval_batches)]
        lbp = loss_by_position(model, batches, 16, info.device, autocast)
    finally:
        model.train()
    if info.is_main:
        out = run_dir / "eval"
        out.mkdir(exist_ok=True)
        atomic_write_json(out / "passkey.json", {**pk, "step": step})
        atomic_write_json(out / "loss_by_position.json", {**lbp, "step": step})
    rec.metrics(step, {**metrics(pk, lbp), "eval/long_context_seconds": time.time() - t0})
    rec.event("eval", step=step, kind_of="long_context", passkey_accuracy=pk["accuracy"])
    return pk["accuracy"]
