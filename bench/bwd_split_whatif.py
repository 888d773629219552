"""What the backward analogue of `fwd_forced_merge` would price: the key-major backward's local
forced pairs (a token's own selection block and the one before) taken out of `_sel_bwd_keys_kernel`
and run as a dense causal pass, the keys walk over the other pairs mask-free (issue 20; modelled, not
built, no GPU).

The pass is priced as the window branch's own backward kernels (`win_bwd_dq`, `win_bwd_dkdv`, their
fitted kinds) over a window of 2 x l' keys: the same tiles over the same rows and keys, what such a
pass would be. The walk keeps (1 - local share) of its rows, FLOPs, partials and (on sm_80) its SASS
counts, its step at `STEP_SASS["bwd"]`'s mask-free over masked ratio (535 -> 467 SASS a step at the
keys proxy's constants: 0.891); the dQ merge reads that share of the partials plus the pass's fp32 dQ;
the reduction one more fp32 dK / dV partial a block. M7C only (the paper shape's backward is
query-major). One JSON object per line:
  {"what_if": "bwd_forced_split", "gpu", "shape", "T", "local_share", "shipped", "split",
   "keys_ms": [shipped, split], "local_dq_ms", "local_dkdv_ms"}

Usage: .venv/bin/python bench/bwd_split_whatif.py
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from nsa.attention.gpusuite.modelcheck import load_model

# The model by path, never bench/ on sys.path (bench/launcher.py and bench/data.py would shadow the
# project's packages in the importing process: modelcheck.load_by_path).
m = load_model()
total = m.total
_SEL = sys.modules["attention_cost.selected"]
KEYS_ISSUE, KEYS_SMEM, STEP_SASS = _SEL.KEYS_ISSUE, _SEL.KEYS_SMEM, _SEL.STEP_SASS

(MASKED, _), (FREE, SMEM) = STEP_SASS["bwd"][0], STEP_SASS["bwd"][1]
BWD_NOMASK = (FREE * KEYS_ISSUE + SMEM * KEYS_SMEM) / (MASKED * KEYS_ISSUE + SMEM * KEYS_SMEM)
SASS_COUNTS = ("warp_insns", "warp_smem", "warp_ldsm", "warp_mma")
PER_PROGRAM = ("resident_warps", "resident_programs")


def local_share(T: int, s) -> float:
    """The own and previous blocks' share of a sequence's valid (pair, head) rows: min(2, j + 1) of
    min(n, j + 1) entries for the tokens of block j (block 0 stays in the walk)."""
    blocks = [(j, min(T, (j + 1) * s.lp) - j * s.lp) for j in range(-(-T // s.lp))]
    return sum(min(2, j + 1) * t for j, t in blocks) / sum(min(s.n, j + 1) * t for j, t in blocks)


def _walk(k, f: float):
    work = {x: v if x in PER_PROGRAM else v * (1 - f) * (BWD_NOMASK if x in SASS_COUNTS else 1.0)
            for x, v in k.work.items()}  # fmt: skip
    return replace(k, flops=k.flops * (1 - f) * BWD_NOMASK, useful=k.useful * (1 - f), dram=k.dram * (1 - f),
                   l2=k.l2 * (1 - f), work=work)  # fmt: skip


def split_kernels(T: int, s, gpu) -> tuple[list, float] | None:
    """The shipped build's kernels with the split applied (None where the backward is not key-major)."""
    ks = m.ours_on(T, s, gpu)
    if not any(k.name == "sel_bwd_keys" for k in ks):
        return None
    f = local_share(T, s)
    rows = s.B * s.Hkv * T
    out = []
    for k in ks:
        if k.name == "sel_bwd_keys":
            k = _walk(k, f)
        elif k.name == "sel_bwd_dq_merge":
            k = replace(k, dram=k.dram * (1 - f) + rows * s.G * s.D * 4)
        elif k.name == "sel_bwd_reduce":
            k = replace(k, dram=k.dram + 2 * 2 * rows * s.D * 4)  # the pass's dK / dV written, read
        out.append(k)
    local = {k.name: k for k in m.ours_on(T, replace(s, w=2 * s.lp), gpu)}
    for name in ("win_bwd_dq", "win_bwd_dkdv"):
        out.append(replace(local[name], name=name.replace("win", "sel_local"), branch="selected"))
    return out, f


def rows(Ts=(8192, 16384, 32768, 65536), gpus=("H100", "H200", "A100")) -> list[dict]:
    res = []
    for gname in gpus:
        gpu = m.GPUS[gname]
        s = m.SHAPES["m7c"]
        for T in Ts:
            got = split_kernels(T, s, gpu)
            if got is None:
                continue
            ks, f = got
            fa = total(m.flash2(T, s), gpu)
            base = m.ours_on(T, s, gpu)
            ms = {k.name: k.time(gpu) * 1e3 for k in ks}
            keys0 = next(k for k in base if k.name == "sel_bwd_keys").time(gpu) * 1e3
            res.append({"what_if": "bwd_forced_split", "gpu": gname, "shape": "m7c", "T": T,
                        "local_share": round(f, 3), "shipped": round(total(base, gpu) / fa, 3),
                        "split": round(total(ks, gpu) / fa, 3),
                        "keys_ms": [round(keys0, 3), round(ms["sel_bwd_keys"], 3)],
                        "local_dq_ms": round(ms["sel_local_bwd_dq"], 3),
                        "local_dkdv_ms": round(ms["sel_local_bwd_dkdv"], 3)})  # fmt: skip
    return res


if __name__ == "__main__":
    for r in rows():
        print(json.dumps(r))
