"""Peak memory of one whole training step, counted on the meta device: no GPU, no memory, seconds.

Owns the answer to "does this config fit on one GPU" before renting one (bench/RESULTS.md, "Peak
memory of one training step"). It builds the model as nsa-train does (fp32 master weights, the
config's activation checkpointing, NSA's triton ops through their meta kernels), then runs one
step -- forward under bf16 autocast, backward, gradient clipping, AdamW -- under a dispatch mode
that records every op output's storage once and drops it when the storage is freed
(`weakref.finalize`), so it knows the bytes live after every op and their peak. It must not
allocate real memory: everything lives on the meta device.

    .venv/bin/python bench/memory.py --config configs/m7c_64k.yaml                 # 64k, none/selective/full
    .venv/bin/python bench/memory.py --config configs/m7c_125m.yaml --T 8192 32768 65536 131072
    .venv/bin/python bench/memory.py --config configs/m7c_64k.yaml --checkpointing full --top 8

One JSON row per (T, checkpointing): {"memory": "train_step", "config", "T", "batch", "checkpointing",
"peak_live_bytes", "params_bytes", "grads_bytes", "optim_bytes", "transient_bytes", "total_gib",
"fits_80gb", ...}. Totals: params + optimizer state (they exist before the step) + the peak of the
bytes the step allocates (activations, temporaries and the fp32 gradients live at that moment: they
are allocated during backward, `zero_grad(set_to_none=True)` frees them after the step) + the
largest scratch inside one triton op (bench/attention_model.transient_bytes: meta kernels allocate
none of it; added on top of the peak, though it is live only inside the selected backward).
Not modelled: the CUDA caching allocator's fragmentation and the CUDA context (~0.5-1 GiB) and
cuBLAS/triton workspaces; hence `fits_80gb` asks for 10 GiB of margin (total <= 70 GiB).

Differences from a GPU run, by construction: autocast is emulated (each nn.Linear casts its fp32
inputs to bf16, as CUDA autocast's lower-precision list does, with the per-forward weight-cast
cache); torch.compile is off (a compiled block fuses elementwise ops and keeps fewer temporaries,
so the eager peak is the higher one); AdamW runs its single-tensor loop on meta (fused AdamW
refuses meta tensors): its state, 8 bytes per parameter, is the same. One process, one GPU: no
DDP gradient buckets (about one more gradient's size with several GPUs), no FSDP sharding.
Dense attention takes SDPA's math path on meta (the [T, T] weights a flash kernel never holds), and
SDPA is not cast: its rows are far above a GPU's. `at_peak` (`--top N`) lists the largest parts of
the peak as phase:module:op, module without its block index ("-": a gradient outside any forward).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

GIB = 2**30
BUDGET_GIB = 70.0  # an 80 GB GPU less 10 GiB for fragmentation, the CUDA context and workspaces


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created by the ops run under it and still alive; and their peak.

    A storage counts once, from the op that first returns it until it is freed. Storages that exist
    before (parameters, optimizer state, inputs) are not counted unless `persistent` misses them
    and an in-place op returns them: pass them in `persistent`.
    """

    def __init__(self, persistent: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__()
        self.ignore = {id(t.untyped_storage()) for t in persistent}
        self.keep = [t.untyped_storage() for t in persistent]  # their ids stay theirs
        self.live: dict[int, tuple[int, int, str]] = {}  # id(storage) -> (serial, nbytes, tag)
        self.now = 0
        self.peak = 0
        self.peak_serials: set[int] = set()
        self.tags: dict[int, str] = {}  # serial -> tag, for the breakdown at the peak
        self.sizes: dict[int, int] = {}
        self.phase = ""
        self.where: list[str] = []  # the module running now (see `label_modules`)
        self._serial = 0

    def track(self, t: torch.Tensor, tag: str) -> None:
        s = t.untyped_storage()
        key = id(s)
        if key in self.ignore or key in self.live:
            return
        n = s.nbytes()
        self._serial += 1
        self.live[key] = (self._serial, n, tag)
        self.tags[self._serial], self.sizes[self._serial] = tag, n
        self.now += n
        weakref.finalize(s, self._freed, key)
        if self.now > self.peak:
            self.peak = self.now
            self.peak_serials = {v[0] for v in self.live.values()}

    def _freed(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.now -= entry[1]

    def serial_of(self, t: torch.Tensor) -> int | None:
        entry = self.live.get(id(t.untyped_storage()))
        return entry[0] if entry else None

    def at_peak(self, top: int) -> list[tuple[str, int]]:
        """The largest contributors to the peak, grouped by phase, module and the op that made them."""
        by: collections.Counter[str] = collections.Counter()
        for s in self.peak_serials:
            by[self.tags[s]] += self.sizes[s]
        return by.most_common(top)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        where = self.where[-1] if self.where else "-"
        tag = f"{self.phase}:{where}:{func.namespace}::{func._opname}"
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor):
                self.track(o, tag)
        return out


class MetaAutocast:
    """CUDA bf16 autocast, emulated where torch's cannot run (meta tensors have no autocast key).

    Autocast casts the fp32 floating inputs of its lower-precision ops to bf16; in our model those
    are the nn.Linear layers (every projection, the MLP, the compression MLP, the head; NSA's
    branches are custom ops that take what they are given). Each Linear's forward is wrapped to
    cast its input, weight and bias before F.linear, above autograd as autocast does, so autograd
    records the same `_to_copy` nodes and saved tensors and gradient dtypes come out as on the GPU.
    The wrapper is the module's own attribute, so checkpointing's recomputation casts too (torch
    re-enters autocast there). Like autocast, a parameter's cast is cached for the forward.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.cache: dict[int, torch.Tensor] = {}
        self.use_cache = True
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.forward = self._linear(m)

    def _linear(self, m: torch.nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            bias = None if m.bias is None else self._cast(m.bias)
            return F.linear(self._cast(x), self._cast(m.weight), bias)

        return forward

    def _cast(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return x
        leaf = x.is_leaf and x.requires_grad and self.use_cache
        if leaf and id(x) in self.cache:
            return self.cache[id(x)]
        y = x.to(torch.bfloat16)
        if leaf:
            self.cache[id(x)] = y
        return y

    def end_forward(self) -> None:
        """Autocast's cache ends with the autocast region; recomputation in backward casts afresh."""
        self.cache.clear()
        self.use_cache = False


def _meta_triton(model: torch.nn.Module) -> None:
    """Give every NSA layer the triton op table for meta tensors (as bench/attention.py does): their
    fake kernels give the triton path's outputs and saved tensors; the eager path's would differ."""
    from nsa.attention import NSAAttention
    from nsa.attention import nsa as nsa_module

    for m in model.modules():
        if isinstance(m, NSAAttention):
            m._dispatch["meta"] = nsa_module._ops("triton")


def label_modules(model: torch.nn.Module, live: LiveBytes) -> None:
    """Name each tracked storage after the module whose forward made it, the block index dropped
    ("attn.wq", "mlp_norm"; "block" for the residual adds, "-" for gradients outside any forward):
    recomputation in backward runs the submodules' forwards, so it is named too."""
    import re

    for name, mod in model.named_modules():
        short = re.sub(r"^blocks\.\d+\.?", "", name) or (
            "block" if name.startswith("blocks.") else name or "model"
        )

        def push(_m: Any, _args: Any, short: str = short) -> None:
            live.where.append(short)

        def pop(_m: Any, _args: Any, _out: Any) -> None:
            live.where.pop()

        mod.register_forward_pre_hook(push)
        # always_call: checkpointing stops a recomputation by raising once it has what it needs.
        mod.register_forward_hook(pop, always_call=True)


def _unique_bytes(ts: Iterator[torch.Tensor]) -> int:
    seen = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in ts}
    return sum(seen.values())


def transient(T: int, batch: int, cfg: Any) -> int:
    """The largest scratch one NSA op holds that its meta kernel does not allocate (0 for dense)."""
    if cfg.model.attention != "nsa":
        return 0
    from nsa.attention.gpusuite.modelcheck import load_model

    am = load_model(Path(__file__).resolve().with_name("attention_model.py"))
    m, n = cfg.model, cfg.model.nsa
    shape = am.Shape("config", batch, m.n_heads, m.n_kv_heads, m.head_dim, n.block_len, n.block_stride,
                     n.sel_block, n.n_sel, n.window)  # fmt: skip
    return am.transient_bytes(T, shape)


def train_step(config: str, sets: list[str], top: int = 0) -> dict[str, Any]:
    """One nsa-train step (batch x train.seq_len tokens) on meta; the row described in the docstring."""
    from nsa.attention import rope
    from nsa.model import Transformer
    from nsa.train.config import load_config
    from nsa.train.dist import DistInfo
    from nsa.train.parallelize import parallelize

    cfg = load_config(config, [*sets, "parallel.compile=false"])
    # RoPE's cos/sin tables are cached per process: made during the first forward, they stay (32 MiB
    # at 64k). Dropping meta entries made by an earlier row counts them in every row alike.
    for key in [k for k, (cos, _) in rope._TABLES.items() if cos.device.type == "meta"]:
        del rope._TABLES[key]
    t = cfg.train
    vocab = cfg.resolved_vocab_size()
    with torch.device("meta"):
        model = Transformer(cfg.model, vocab)  # fp32 master weights, as the trainer keeps them
    _meta_triton(model)
    wrapped = parallelize(model, DistInfo(0, 0, 1, torch.device("meta"), None), cfg.parallel, None)
    params = list({id(p): p for p in model.parameters()}.values())
    opt = torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay, foreach=False, fused=False)
    for p in params:  # the optimizer state exists from the first step on: make it before measuring
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    x = torch.zeros(t.batch_size, t.seq_len + 1, dtype=torch.long, device="meta")
    inp, tgt = x[:, :-1], x[:, 1:]

    live = LiveBytes(persistent=(*params, *state, x))
    label_modules(model, live)
    # The trainer autocasts to bf16 on CUDA for dtype bf16 or auto (nsa.train.trainer).
    cast = MetaAutocast(model) if cfg.train.dtype in ("bf16", "auto") else None
    with live:
        live.phase = "forward"
        loss = wrapped(inp, tgt)
        if cast is not None:
            cast.end_forward()
        live.phase = "backward"
        (loss / t.grad_accum).backward()
        grads = [p.grad for p in params if p.grad is not None]
        grad_serials = {live.serial_of(g) for g in grads}
        live.phase = "optimizer"
        torch.nn.utils.clip_grad_norm_(
            params, t.grad_clip if t.grad_clip > 0 else float("inf"), foreach=False
        )
        opt.step()
    del loss
    grads_at_peak = sum(live.sizes[s] for s in live.peak_serials & grad_serials)
    row = {
        "memory": "train_step", "config": config, "T": t.seq_len, "batch": t.batch_size,
        "checkpointing": cfg.parallel.activation_checkpointing, "attention": cfg.model.attention,
        "peak_live_bytes": live.peak,
        "params_bytes": _unique_bytes(iter(params)),
        "grads_bytes": _unique_bytes(iter(grads)),
        "grads_at_peak_bytes": grads_at_peak,
        "optim_bytes": _unique_bytes(iter(state)),
        "transient_bytes": transient(t.seq_len, t.batch_size, cfg),
    }  # fmt: skip
    total = row["peak_live_bytes"] + row["params_bytes"] + row["optim_bytes"] + row["transient_bytes"]
    row["total_gib"] = round(total / GIB, 2)
    row["fits_80gb"] = row["total_gib"] <= BUDGET_GIB
    if top:
        row["at_peak"] = {k: round(v / GIB, 3) for k, v in live.at_peak(top)}
    opt.zero_grad(set_to_none=True)
    return row


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/m7c_64k.yaml")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="section.key=value (repeatable)")
    ap.add_argument("--T", type=int, nargs="+", help="train.seq_len values (default: the config's)")
    ap.add_argument("--batch", type=int, help="train.batch_size (default: the config's)")
    ap.add_argument(
        "--checkpointing",
        nargs="+",
        default=["none", "selective", "full"],
        choices=["none", "selective", "full"],
    )
    ap.add_argument(
        "--top", type=int, default=6, help="largest contributors at the peak, by phase:module:op (GiB)"
    )
    args = ap.parse_args(argv)
    from nsa.train.config import ConfigError

    for T in args.T or [None]:
        for ac in args.checkpointing:
            sets = [*args.sets, f"parallel.activation_checkpointing={ac}"]
            sets += [f"train.seq_len={T}"] if T else []
            sets += [f"train.batch_size={args.batch}"] if args.batch else []
            try:
                row = train_step(args.config, sets, args.top)
            except ConfigError as e:  # bad input: the config loader's message (file, key, value, fix)
                print(f"bench/memory.py: {e}", file=sys.stderr)
                raise SystemExit(2) from None
            out(json.dumps(row))


if __name__ == "__main__":
    main()
