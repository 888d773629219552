"""What-if (an assumption, not a measurement): NSA/FA2 at the paper's shape if the token tiles' gathered
K/V loads were pipelined, from bench/attention_model.py's cost model.

Owns one question of `selected._config`'s `tok_pipe` (bench/RESULTS.md, docs/attention.md): the model
prices the forced split's token-tile forward and dQ (kinds tok_fwd / tok_dq, the only query-major
kernels at G >= 9) per gathered byte, 0.065 / 0.060 SM cycles a byte fitted on the H100/H200 runs of
the branchy loop, whose K/V loads wait a full memory latency every step. ASSUMED here: with the loads
pipelined (cp.async, 3 stages: bench/tok_pipe_sass.py) the two kernels run like the dense forced
kernels beside them, so each is priced by the forced kernels' fitted MMA efficiency instead
(forced_fwd 0.169 / forced_dq 0.205 of the bf16 peak on Hopper; the published calibration's dense
Triton tiles on A100, 0.40 / 0.32), floored by its DRAM bytes and by its gathered bytes through L2.
Two builds of the loop, both built (selected_query.py PIPE):
- `pipelined_union`: tok_pipe 2, one step per distinct non-forced block of the tile (the model's step
  count, as today; the probe's variant, selected.TOK_PIPE_PROBE);
- `pipelined_all_slots`: tok_pipe 1, every one of a token's n table slots a step with its products,
  the forced, invalid and duplicate ones masked (n / the union's steps more MMA work; no more bytes).
Everything else is the model as shipped (since tokgather the model's "shipped" token tiles on Hopper
are tok_pipe 2 at bench/gather_proxy.py's ratios, whose fit found the loops bound by shared-memory
traffic, not by the latency this what-if assumes away). Prints one JSON object per line: `{"what_if", "assumption",
"gpu", "shape", "T", "tok_ms", "nsa_ms", "fa2_ms", "fwd", "bwd", "fwd_bwd"}` (NSA/FA2 ratios).

  .venv/bin/python bench/tok_pipe_whatif.py                 # paper shape, H100 and A100, 8k-64k
  .venv/bin/python bench/tok_pipe_whatif.py --gpu H200 --T 8192 32768
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_model

HERE = Path(__file__).resolve().parent
TOK_KINDS = {"sel_fwd": "forced_fwd", "sel_bwd_dq": "forced_dq"}  # token tile -> the dense kind it prices as
ASSUMPTION = "token tiles priced as the forced kernels' MMA efficiency (gathers pipelined), not measured"


def _model():
    return load_model(HERE / "attention_model.py")


def _pipelined(k, gpu, slots: float):
    """Kernel `k` (a token tile) at the forced kind's efficiency, its MMA work x `slots`, floored by
    its DRAM and its gathered (L2) bytes."""
    m = _model()
    p = replace(k, kind=TOK_KINDS[k.name], flops=k.flops * slots, work={})
    return max(p.time(gpu), k.l2 / gpu.l2 + m.LAUNCH_S * k.launches)


def rows(Ts: list[int], gpus: list[str], shape: str = "paper") -> list[dict]:
    m = _model()
    s = m.SHAPES[shape]
    out = []
    for gname in gpus:
        gpu = m.GPUS[gname]
        for T in Ts:
            ks = m.ours_on(T, s, gpu)
            fa = m.flash2(T, s)
            k_slots = min(s.n, -(-T // s.lp))
            union = m._sel_steps(T, s, 1)  # steps of one (batch, KV head) at one token a tile
            for name, slots in (("shipped", None), ("pipelined_union", 1.0), ("pipelined_all_slots", None)):
                tp = m.shipped_launch(s, gpu.cc)["tp"]
                if name == "pipelined_all_slots":
                    # every slot of every token a step: T*k against the union's steps (TP = 1 here)
                    slots = (T * k_slots) / union if tp == 1 and union else None
                    if slots is None:
                        continue
                t = {"fwd": 0.0, "bwd": 0.0}
                tok = 0.0
                for k in ks:
                    dt = k.time(gpu)
                    if k.name in TOK_KINDS and name != "shipped":
                        dt = _pipelined(k, gpu, slots)
                    if k.name in TOK_KINDS:
                        tok += dt
                    t[k.direction] += dt
                f = {d: m.total(fa, gpu, d) for d in ("fwd", "bwd")}
                out.append({
                    "what_if": name, "assumption": "model as shipped" if name == "shipped" else ASSUMPTION,
                    "gpu": gname, "shape": shape, "T": T, "tok_ms": round(tok * 1e3, 3),
                    "nsa_ms": round((t["fwd"] + t["bwd"]) * 1e3, 3), "fa2_ms": round((f["fwd"] + f["bwd"]) * 1e3, 3),
                    "fwd": round(t["fwd"] / f["fwd"], 3), "bwd": round(t["bwd"] / f["bwd"], 3),
                    "fwd_bwd": round((t["fwd"] + t["bwd"]) / (f["fwd"] + f["bwd"]), 3),
                })  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", nargs="+", default=["H100", "A100"])
    ap.add_argument("--T", type=int, nargs="+", default=[8192, 16384, 32768, 65536])
    ap.add_argument("--shape", default="paper", choices=("paper", "m7c"))
    args = ap.parse_args()
    for r in rows(args.T, args.gpu, args.shape):
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
