"""Where the NSA kernels' GPU time goes: each kernel family timed alone under launch-config variants.

Owns the GPU probe behind docs/attention.md's per-kernel fixes: the compressed forward's two kernels
(attention, selection) and its backward under other tile sizes, warps and stages, and the selected branch's
ops (forward, forward+backward) with one launch setting changed at a time from the shipped config
(`selected._launch_config`, patched for the probe only). CUDA only; prints one JSON object per line:
`{"probe", "shape", "T", "B", "variant", "ms"}`. It measures, it asserts nothing; the shipped
configs stay whatever the modules say.

  python bench/kernel_probe.py                       # every probe, M7C and paper shapes
  python bench/kernel_probe.py --only cmp_fwd --shapes m7c:8192:8
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton

from nsa.attention.gpusuite.gpu import _nsa_core_inputs, _time_cuda
from nsa.attention.triton import compressed as cmp
from nsa.attention.triton import selected as sel

GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
SHAPES = {"m7c": (2, 6, 64), "paper": (4, 16, 128)}  # (Hkv, G, D)


def _time(fn, iters: int = 5) -> float:
    return round(_time_cuda(fn, iters, warmup=1), 4)


def _inputs(B, T, Hkv, G, D):
    """q, compressed K/V and selected K/V as the suite's speed section makes them (bf16, CUDA)."""
    inp = _nsa_core_inputs(B, T, Hkv, G, D, GEO, "cuda", torch.bfloat16)
    return tuple(inp[k].detach() for k in ("q", "kc", "vc", "ks", "vs"))


def _cmp_launch(q, kc, vc, over: dict):
    """The compressed forward's two kernels with `over` applied to the shipped config: one run()."""
    B, Hkv, T, G, D = q.shape
    c = cmp._config(G, D, GEO["n_sel"], GEO["block_len"], GEO["block_stride"], GEO["sel_block"], 90)
    c = {**c, **{k: v for k, v in over.items() if k in c}}
    k = min(GEO["n_sel"], -(-T // GEO["sel_block"]))
    out = torch.empty_like(q)
    lse = torch.zeros(B, Hkv, T, G, dtype=torch.float32, device=q.device)
    idx = torch.empty(B, Hkv, T, k, dtype=torch.int64, device=q.device)
    valid = torch.empty(B, Hkv, T, k, dtype=torch.bool, device=q.device)
    geo = {"L": GEO["block_len"], "S": GEO["block_stride"], "PREC": "ieee"}
    qk = D**-0.5 * cmp._LOG2E

    def attend():
        cmp._cmp_fwd[(triton.cdiv(T * G, c["bm_fwd"]), B * Hkv)](
            q, kc, vc, out, lse, T, kc.shape[2], qk, G=G, D=D, DP=c["DP"], BM=c["bm_fwd"], BN=c["bn_fwd"],
            **geo, num_warps=c["warps_fwd"], num_stages=over.get("stages_fwd", 2),
        )  # fmt: skip

    def select():
        cmp.launch_select(c, q, kc, lse, idx, valid, GEO["block_len"], GEO["block_stride"], GEO["sel_block"], qk,
                          "ieee")  # fmt: skip

    attend()  # the selection reads the forward's row statistics
    return {"attend": attend, "select": select}[over["kernel"]]


# One launch setting changed at a time from the shipped config (compressed._config).
CMP_VARIANTS = [
    {"kernel": "attend"},
    {"kernel": "attend", "bm_fwd": 64},
    {"kernel": "select"},
    {"kernel": "select", "warps_sel": 4},
    {"kernel": "select", "warps_sel": 1},
    {"kernel": "select", "bt_sel": 8},
    {"kernel": "select", "bt_sel": 2},
    {"kernel": "select", "bt_sel": 4},  # M7C on sm_90: 2 warps, 12-24 B spilled (bench/select_sass.py)
    {"kernel": "select", "bt_sel": 4, "warps_sel": 4},
    {"kernel": "select", "halves_sel": 1},
    {"kernel": "select", "halves_sel": 0},  # since 2026-11-26b M7C on sm_90 ships halves
    # 8 tokens a tile merged in halves: bench/select_proxy.py predicts the paper's shape 16 % faster
    # than shipped at 64k (208 registers, 2 warps a scheduler: outside its calibrated range).
    {"kernel": "select", "bt_sel": 8, "halves_sel": 1},
    # 1 warp a program under a 168-register cap (12 warps an SM, no spill on triton 3.6): the proxy
    # (bench/select_proxy.py) predicts M7C 28 % faster at 64k (4.90 ms against 6.81), 29-31 % at
    # 2k-32k, like `warps_sel` 1 uncapped above (4.87; 10 warps an SM, at its latency bound); and 4
    # tokens a tile in halves under the cap (M7C 14 %; 210 registers uncapped).
    {"kernel": "select", "warps_sel": 1, "maxnreg_sel": 168},
    {"kernel": "select", "bt_sel": 4, "halves_sel": 1, "maxnreg_sel": 168},
    # The selection kernel before 2026-11-26b (compressed_select_v0.py) at its shipped settings, and
    # at 4 warps: the comparison of the int32 merge with the int64 one, in the same run.
    {"kernel": "select", "select_v0": 1},
    {"kernel": "select", "select_v0": 1, "warps_sel_v0": 4},
]

# The compressed backward (dQ, dK/dV, the partial sum): keys of compressed._config; "x2" doubles one.
CMP_BWD_VARIANTS = [
    {},
    {"bn_dkv": 64},
    {"bt_dkv": "x2"},
    {"warps_dkv": 4},
    {"split_dkv": 4},
    {"split_dkv": 16},
    {"warps": "toggle"},
]

# The selected ops; "TP": "x2" doubles the token tile's tokens (rows padded to a power of two).
SEL_VARIANTS = [
    {},
    {"fwd_keys": False, "bwd_keys": False},  # the query-major forward and dQ (forced + token tiles)
    {"fwd_keys": False},  # the key-major forward (selected_keys.py) off
    {"bwd_keys": False},  # the key-major backward (selected_keys_bwd.py) off
    {"BR_f": 64},
    {"BR_keys": 32},
    {"TP": "x2"},
    {"warps_tok": 2},
    {"warps_kv": 8},
    # The key-major backward's dQ partials in q's 16-bit dtype (bf16 here) instead of fp32: half of
    # PDQ's bytes written by _sel_bwd_keys_kernel and read by _sel_bwd_dq_merge_kernel (the model:
    # bench/attention_model.py what-if "pdq_16bit"; numerics: bench/pdq_numerics.py).
    {"pdq_bits": 16},
    # The key-major kernels' rows in 64 bits (keys_div32 False: the int64 step index and
    # (pos // NK) % T, the path every GPU run measured, compiled to the same SASS) instead of the
    # shipped 32-bit ones: the probe measures what bench/keys_proxy.py priced for the keys backward
    # (M7C 8k x 8, triton 3.6: 4.29 ms for the measured build, 4.53 measured; 2.68 shipped, 2.18 with
    # pdq_bits 16) and the forward's 1682 -> 1386 SASS a step (bench/RESULTS.md "keysdiv").
    {"keys_div32": False},
    {"keys_div32": False, "pdq_bits": 16},
]


def _apply(cfg: dict, over: dict, G: int) -> dict:
    out = dict(cfg)
    for k, v in over.items():
        if k == "TP":
            out["TP"] = cfg["TP"] * int(v[1:])
            out["RP"] = max(16, triton.next_power_of_2(out["TP"] * G))
        elif v == "x2":
            out[k] = cfg[k] * 2
        elif v == "toggle":
            out[k] = 4 if cfg[k] == 8 else 8
        elif k in cfg:
            out[k] = v
    return out


def probe_cmp(name, B, T):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, _, _ = _inputs(B, T, Hkv, G, D)
    for over in CMP_VARIANTS:
        try:
            ms = _time(_cmp_launch(q, kc, vc, over))
        except Exception as e:  # a variant that does not compile (shared memory, registers) is a result
            ms = f"{type(e).__name__}: {str(e)[:200]}"
        yield {"probe": "cmp_fwd", "shape": name, "T": T, "B": B, "variant": over, "ms": ms}


def probe_sel(name, B, T):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, ks, vs = _inputs(B, T, Hkv, G, D)
    scale = D**-0.5
    _, idx, valid = cmp.compressed_attention_and_selection(
        q, kc, vc, block_len=GEO["block_len"], block_stride=GEO["block_stride"],
        sel_block=GEO["sel_block"], n_sel=GEO["n_sel"], scale=scale,
    )  # fmt: skip
    leaves = [t.detach().clone().requires_grad_() for t in (q, ks, vs)]
    dout = torch.randn_like(q)
    base = sel._launch_config

    def fwd():
        return sel.selected_attention(*leaves, idx, valid, sel_block=GEO["sel_block"], scale=scale,
                                      forced_blocks=True)  # fmt: skip

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, dout)

    for over in SEL_VARIANTS:
        sel._launch_config = lambda G, D, LP, *a, _o=over: _apply(base(G, D, LP, *a), _o, G)
        try:
            row = {"fwd_ms": _time(fwd), "fwd_bwd_ms": _time(fwd_bwd)}
        except Exception as e:
            row = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        finally:
            sel._launch_config = base
        yield {"probe": "selected", "shape": name, "T": T, "B": B, "variant": over, **row}


def probe_cmp_bwd(name, B, T):
    Hkv, G, D = SHAPES[name]
    q, kc, vc, _, _ = _inputs(B, T, Hkv, G, D)
    leaves = [t.detach().clone().requires_grad_() for t in (q, kc, vc)]
    kw = {k: GEO[k] for k in ("block_len", "block_stride", "sel_block", "n_sel")}
    out = cmp.compressed_attention_and_selection(*leaves, **kw, scale=D**-0.5)[0]
    dout = torch.randn_like(out)
    base = cmp._config
    for over in CMP_BWD_VARIANTS:
        cmp._config = lambda *a, _o=over, **k: _apply(base(*a, **k), _o, G)
        try:
            ms = _time(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True))
        except Exception as e:
            ms = f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            cmp._config = base
        yield {"probe": "cmp_bwd", "shape": name, "T": T, "B": B, "variant": over, "ms": ms}


def ncu_target(name, B, T):
    """One forward + backward of the compressed and selected ops (for ncu -k regex:...)."""
    Hkv, G, D = SHAPES[name]
    q, kc, vc, ks, vs = _inputs(B, T, Hkv, G, D)
    leaves = [t.requires_grad_() for t in (q, kc, vc, ks, vs)]
    scale = D**-0.5
    o, idx, valid = cmp.compressed_attention_and_selection(
        *leaves[:3], block_len=GEO["block_len"], block_stride=GEO["block_stride"],
        sel_block=GEO["sel_block"], n_sel=GEO["n_sel"], scale=scale,
    )  # fmt: skip
    o2 = sel.selected_attention(leaves[0], leaves[3], leaves[4], idx, valid, sel_block=GEO["sel_block"],
                                scale=scale, forced_blocks=True)  # fmt: skip
    (o.float().sum() + o2.float().sum()).backward()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("cmp_fwd", "cmp_bwd", "selected"), action="append")
    ap.add_argument("--shapes", nargs="*", help="name:T:B (names: m7c, paper); default: per probe, below")
    ap.add_argument("--ncu-target", help="name:T:B: run the ops once (for ncu) and exit")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.ncu_target:
        n, t, b = args.ncu_target.split(":")
        ncu_target(n, int(b), int(t))
        return 0
    probes = {"cmp_fwd": probe_cmp, "cmp_bwd": probe_cmp_bwd, "selected": probe_sel}
    # The compressed forward grows with T; the selected ops' time is flat in T at B*T = 64k tokens.
    default = {
        "cmp_fwd": ["m7c:8192:8", "m7c:65536:1", "paper:32768:2"],
        "cmp_bwd": ["m7c:65536:1", "paper:32768:2"],
        "selected": ["m7c:8192:8", "paper:8192:8"],
    }
    for p in args.only or list(probes):
        for spec in args.shapes or default[p]:
            n, t, b = spec.split(":")
            for row in probes[p](n, int(b), int(t)):
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
