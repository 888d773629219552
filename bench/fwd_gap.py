"""Where the M7C forward's time goes against FlashAttention-2's at B = 1 (8k-64k), whether the model's
forward prices hold against the H100 of 2026-11-26c, and what the forward's levers price.

Modelled, no GPU (the `check` rows compare the model with that run's committed measurements). One
JSON object per line:
- `fwd` rows (H100 and A100, M7C, B = 1): each forward kernel's model time, its share of the NSA
  forward, its ms over FlashAttention-2's forward, the time its FLOPs and its DRAM bytes account for
  (the kernel priced without its bytes, then without its FLOPs: their sum can exceed the time where
  the price is a max), the schedule's factor where the grid is key-major (balance.py) and its grid;
  a `fwd_total` row per T: NSA and FA2 forward ms, the key-major partials' part (PO / PL written by
  `_sel_fwd_keys_kernel`, read by `_sel_fwd_merge_kernel`) and the fwd+bwd ratio.
- `check` rows: the forward's kernel families of the H100 of 2026-11-26c (B*T = 64k) against the
  model of that run's build (RUN_BUILDS), and the forward as a whole (its core's families summed,
  and the suite's measured `nsa_fwd_ms`, which also holds RoPE-free core ops the model leaves out).
- `lever` rows (H100 and A100, M7C, B = 1): each lever's NSA forward ms, fwd and fwd+bwd NSA/FA2,
  and the saving as a share of NSA's fwd+bwd (the issue's "5 %" test), each against `masked_walk`,
  the build analysed (`BUILD`: the key-major forward's masked walk over every pair and its separate
  merge, what every GPU run measured, before `fwd_forced_merge` shipped):
  - `fwd_forced_merge`: the model as it stands, i.e. what ships since (the merging forced pass, the
    keys walk mask-free over the other pairs); `forced_merge_nomask_shipped_s` this module's estimate
    of the same (`forced_merge` below with NOMASK);
  - `forced_dense` / `forced_dense16`: the forced entries (block 0, the previous and the own block:
    3 of a token's 16) left out of the key-major forward, run as one dense causal tile pass per 64
    (token, head) rows (the query-major path's `selected_forced.py` forward, priced by its fitted
    kind `forced_fwd`), its state handed to the merge in fp32 (o + lse: what the kernel writes
    today) or as one more 16-bit partial (normalised o in q's dtype + fp32 lse, as PO / PL);
  - `forced_merge` / `forced_merge_s256`: that pass run after the keys kernel, merging each row's
    other partials itself (the merge's launch and the state gone; its bytes at its fitted price), the
    keys grid's segments as shipped or of 256 pairs;
  - `forced_merge_nomask`: `forced_merge_s256` with the keys forward's step mask-free throughout
    (with the forced entries gone no row of it sees its own block, and the last, partial block is
    listed only by its own tokens), priced by the keys proxy's terms (`NOMASK`);
  - `unmasked_steps` / `unmasked_steps_bwd`: the keys forward's (and backward's) steps whose rows all
    lie past the block's last key run without the causal / range mask (its share of the step's
    sm_90 SASS, compiled with and without it: `STEP_SASS`), priced by the keys proxy's terms;
  - `merge_at_dram`: the merge at the DRAM floor (0.8 of peak) instead of its fitted 1.70x: a bound
    on any rewrite of the merge;
  - `no_partials`: no PO / PL written or read (the merge gone, the keys kernel without its partial
    stores): a bound on any fusion of the merge;
  - `merge_into_gate`: the gate mix computed by the merge (it reads no selected output; the merge
    still writes it, which the backward's delta reads): one activation's bytes;
  - `query_major` / `query_major_shared`: the query-major forward (forced tiles + token tiles at
    TP 8), tables with independent (random) selections or adjacent tokens selecting alike;
  - `seg_target_256` / `seg_target_1024`, `br_fwd_keys_64`: other segment targets and rows a step
    (they change the backward too: its fwd+bwd says so).

  .venv/bin/python bench/fwd_gap.py            # every row
  .venv/bin/python bench/fwd_gap.py --T 8192   # one length
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/fwd_gap.py --step-sass   # STEP_SASS again

Asserts nothing; reads bench/gpu/2026-11-26c-h100-speed.json for the check rows. `--step-sass` compiles
(no GPU) each keys kernel's sm_90 step as shipped and from a temporary copy of its source without the
step's mask, and says whether the counts are STEP_SASS's (recorded with triton 3.6).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import core_flags, load_model

load_model()  # attention_cost's modules in sys.modules (the constants below)
HERE = Path(__file__).resolve().parent
# The build this analysis is of: the key-major forward's masked walk over every pair and its separate
# merge (what every GPU run measured); its lever `fwd_forced_merge` is what ships since (the model's
# `ours` as it stands).
BUILD = {"fwd_forced_merge": False}
H100C = HERE / "gpu/2026-11-26c-h100-speed.json"
TS = [8192, 16384, 32768, 65536]


def _ms(k, gpu) -> float:
    return k.time(gpu) * 1e3


def fwd_rows(model, T: int, gname: str) -> list[dict]:
    gpu, shape = model.GPUS[gname], model.SHAPES["m7c"]
    ks = model.ours_on(T, shape, gpu, **BUILD)
    fa = model.flash2(T, shape)
    fa_f = model.total(fa, gpu, "fwd") * 1e3
    nsa_f = model.total(ks, gpu, "fwd") * 1e3
    rows = []
    for k in sorted((k for k in ks if k.direction == "fwd"), key=lambda k: -k.time(gpu)):
        t = _ms(k, gpu)
        no_dram = _ms(replace(k, dram=0.0), gpu) if k.dram else t
        no_flops = _ms(replace(k, flops=0.0, useful=0.0), gpu) if k.flops else t
        slots = gpu.sms * k.per_sm
        bal = None
        if k.steps:
            bal = round(model.balance_factor(k.steps, slots, "fwd"), 3)
        rows.append({
            "fwd": k.name, "gpu": gname, "T": T, "kind": k.kind, "ms": round(t, 4),
            "share": round(t / nsa_f, 3), "over_fa2_fwd": round(t / fa_f, 3),
            "flops_ms": round(t - no_flops, 4), "dram_ms": round(t - no_dram, 4),
            "gflop": round(k.flops / 1e9, 2), "dram_mb": round(k.dram / 1e6, 1),
            "programs": k.programs or None, "waves": round(k.programs / slots, 2) if k.programs else None,
            "balance": bal,
        })  # fmt: skip
    po = _partials(model, T, shape, gpu, ks)
    total = model.total(ks, gpu) / model.total(fa, gpu)
    rows.append({
        "fwd_total": "m7c", "gpu": gname, "T": T, "nsa_fwd_ms": round(nsa_f, 4), "fa2_fwd_ms": round(fa_f, 4),
        "nsa_over_fa2_fwd": round(nsa_f / fa_f, 3), "nsa_fwd_bwd_ms": round(model.total(ks, gpu) * 1e3, 4),
        "fa2_fwd_bwd_ms": round(model.total(fa, gpu) * 1e3, 4), "nsa_over_fa2": round(total, 3),
        "partials_write_ms": round(po["write"], 4), "partials_merge_ms": round(po["merge"], 4),
        "partials_over_fa2_fwd": round((po["write"] + po["merge"]) / fa_f, 3),
    })  # fmt: skip
    return rows


def _po_bytes(T: int, s, launch: dict) -> float:
    """PO + PL bytes of the key-major forward (selected.py's `po`)."""
    nb = -(-s.lp // launch["bn_sel"])
    return nb * s.B * s.Hkv * _prow(T, s) * (s.D * 2 + 4)


def _prow(T: int, s) -> float:
    """(pair, head) rows of one (batch, KV head)."""
    return (
        float(sum(min(s.n, j + 1) * (min(T, (j + 1) * s.lp) - j * s.lp) for j in range(-(-T // s.lp)))) * s.G
    )


def _partials(model, T: int, s, gpu, ks) -> dict:
    by = {k.name: k for k in ks}
    keys, merge = by["sel_fwd_keys"], by["sel_fwd_merge"]
    launch = model.shipped_launch(s, gpu.cc)
    po = _po_bytes(T, s, launch)
    write = _ms(keys, gpu) - _ms(replace(keys, dram=keys.dram - po), gpu)
    return {"write": write, "merge": _ms(merge, gpu)}


def _steps_no_forced(T: int, s, BR: int, S: int) -> tuple[int, ...]:
    per_seq = []
    for c in sys.modules["attention_cost.balance"].pairs_per_block_no_forced(T, s.n, s.lp):
        for i in range(-(-c // S)):
            per_seq.append(-(-(min(S, c - i * S) * s.G) // BR))
    return tuple(per_seq * (s.B * s.Hkv))


def forced_dense(model, T: int, s, gpu, ks, sixteen: bool, fused: bool = False, S: int = 0) -> list:
    """The forward with its forced entries as a dense causal tile pass (see the module's doc); fused:
    that pass also merges the partials (no state stored, the merge's bytes and fitted time kept, its
    launch gone); S: the keys grid's segment (0: what ships)."""
    launch = model.shipped_launch(s, gpu.cc)
    BH, G, D = s.B * s.Hkv, s.G, s.D
    f = _SEL.forced_share(T, s)
    po = _po_bytes(T, s, launch)
    out = []
    rows_forced = BH * T * G
    state = rows_forced * ((D * 2 + 4) if sixteen else (D + 1) * 4)
    for k in ks:
        if k.name == "sel_fwd_keys":
            S = S or model._seg_pairs(T, BH * T * min(s.n, -(-T // s.lp)), launch.get("seg_target", 0))
            steps = _steps_no_forced(T, s, launch["br_fwd_keys"], S)
            npairs8 = BH * _prow(T, s) / G * 8
            k = replace(k, flops=k.flops * (1 - f), useful=k.useful * (1 - f),
                        dram=k.dram - f * (po + npairs8), programs=len(steps), steps=steps)  # fmt: skip
        elif k.name == "sel_fwd_merge":
            k = replace(k, dram=k.dram - f * po + (0 if fused else state), launches=0 if fused else 1)
        out.append(k)
    # selected.py's forced forward (selected_forced.py): grid (ceil(T*G/64), BH), 64 rows, l' keys of
    # block 0, the previous and the own block (causal)
    ns = -(-T // s.lp)
    fk = min(T, min(3, ns) * s.lp)
    bmf = launch["bm_forced"]
    fissue = 2 * BH * math.ceil(T * G / bmf) * bmf * fk * D
    fuse = 2 * BH * T * G * (fk - s.lp / 2) * D
    fprog = BH * math.ceil(T * G / bmf)
    act = s.B * T * s.H * D * 2
    table = BH * T * min(s.n, ns) * 9
    regs = 168 if gpu.cc == 80 else 124
    out.append(model.Kernel("sel_forced_fwd", "selected", "fwd", "forced_fwd", 2 * fissue, 2 * fuse,
                            act + (0 if fused else state) + table, l2=fprog * fk * D * 2 * 2, programs=fprog,
                            per_sm=model._per_sm(regs, 128), work={"programs": fprog}))  # fmt: skip
    return out


# The keys steps' SASS with and without their mask and the keys proxy's terms: the model's (bench/
# attention_cost/selected.py, which prices the shipped FREE walk by NOMASK).
_SEL = sys.modules["attention_cost.selected"]
STEP_SASS, NOMASK, ISSUE, SMEM = _SEL.STEP_SASS, _SEL.NOMASK, _SEL.KEYS_ISSUE, _SEL.KEYS_SMEM
# Instructions a step for the test that picks the path: a prototype testing the rows' smallest token
# (tl.min over the step, a cross-thread reduction) against the block's last key compiled to 1,044 on
# the unmasked path (triton 3.6, sm_90; 218 registers, no spill): 44 over the mask-free step. Applied
# to both paths of the backward too (not compiled there).
STEP_TEST = 44
ISSUE, SMEM = 2.865, 7.751  # bench/keys_proxy.py's issue+smem fit on both keys kernels (H200 cycles)


def unmasked_ratio(kernel: str, T: int, s, ks) -> float:
    """The keys kernel's step cycles (the keys proxy's terms) with its unmasked steps on the cheap
    path, over the shipped step's: masked are the steps holding a token of the block itself (the
    first 64 pairs of each block's list: its first 384 rows, 3 steps of 128 forward, 6 of 64
    backward); every other row's token lies past the block."""
    (mi, ms), (ui, us) = STEP_SASS[kernel]
    name, br = ("sel_fwd_keys", 128) if kernel == "fwd" else ("sel_bwd_keys", 64)
    k = next(k for k in ks if k.name == name)
    per_seq = sum(k.steps) / (s.B * s.Hkv)
    frac = min(1.0, -(-T // s.lp) * math.ceil(s.lp * s.G / br) / per_seq)
    base = mi * ISSUE + ms * SMEM
    return (
        frac * ((mi + STEP_TEST) * ISSUE + ms * SMEM) / base
        + (1 - frac) * ((ui + STEP_TEST) * ISSUE + us * SMEM) / base
    )


def unmasked(T: int, s, gpu, ks, bwd: bool) -> list:
    """The keys kernels' steps past the block's last key without the mask: the MMA-term (the fitted
    efficiency's part, which the proxy says is issue) scaled by `unmasked_ratio`; the A100's
    backward is priced from its sm_80 SASS, which was not counted: left as it is."""
    out = []
    for k in ks:
        if k.name == "sel_fwd_keys" or (bwd and k.name == "sel_bwd_keys" and gpu.cc != 80):
            k = replace(k, flops=k.flops * unmasked_ratio("fwd" if "fwd" in k.name else "bwd", T, s, ks))
        out.append(k)
    return out


def _edit(ks, name: str, **kw) -> list:
    return [replace(k, **kw) if k.name == name else k for k in ks]


def lever_rows(model, T: int, gname: str) -> list[dict]:
    gpu, s = model.GPUS[gname], model.SHAPES["m7c"]
    base = model.ours_on(T, s, gpu, **BUILD)
    fa = model.flash2(T, s)
    fa_f, fa_all = model.total(fa, gpu, "fwd"), model.total(fa, gpu)
    launch = model.shipped_launch(s, gpu.cc)
    po = _po_bytes(T, s, launch)
    act = s.B * T * s.H * s.D * 2
    fm256 = forced_dense(model, T, s, gpu, base, sixteen=True, fused=True, S=256)
    fm = forced_dense(model, T, s, gpu, base, sixteen=True, fused=True)
    levers = {
        "masked_walk": base,  # the analysed build (BUILD): every lever's base
        "forced_dense": forced_dense(model, T, s, gpu, base, sixteen=False),
        "forced_dense16": forced_dense(model, T, s, gpu, base, sixteen=True),
        "forced_merge": forced_dense(model, T, s, gpu, base, sixteen=True, fused=True),
        "forced_merge_s256": fm256,
        "unmasked_steps": unmasked(T, s, gpu, base, bwd=False),
        "unmasked_steps_bwd": unmasked(T, s, gpu, base, bwd=True),
        "forced_merge_nomask": [
            replace(k, flops=k.flops * NOMASK) if k.name == "sel_fwd_keys" else k for k in fm256
        ],
        # What selected.py's `fwd_forced_merge` builds and ships (2026-11-27): the merging forced pass
        # and the keys kernel mask-free over the non-forced pairs, at the shipped segments; the
        # model's own pricing of it (`fm` + NOMASK is this section's estimate of the same)
        "fwd_forced_merge": model.ours_on(T, s, gpu),
        "forced_merge_nomask_shipped_s": [
            replace(k, flops=k.flops * NOMASK) if k.name == "sel_fwd_keys" else k for k in fm
        ],
        "merge_at_dram": _edit(base, "sel_fwd_merge", kind="memory"),
        "no_partials": [
            replace(k, dram=k.dram - po) if k.name == "sel_fwd_keys" else k
            for k in base
            if k.name != "sel_fwd_merge"
        ],
        "merge_into_gate": [replace(k, dram=k.dram - act) if k.name == "gate_mix_fwd" else k for k in base],
        "query_major": model.ours_on(T, s, gpu, fwd_keys=False, **BUILD),
        "query_major_shared": model.ours_on(T, s, gpu, fwd_keys=False, selections="shared", **BUILD),
        "seg_target_256": model.ours_on(T, s, gpu, seg_target=256, **BUILD),
        "seg_target_1024": model.ours_on(T, s, gpu, seg_target=1024, **BUILD),
        "br_fwd_keys_64": model.ours_on(T, s, gpu, br_fwd_keys=64, **BUILD),
    }
    t0 = model.total(base, gpu)
    rows = []
    for name, ks in levers.items():
        f, a = model.total(ks, gpu, "fwd"), model.total(ks, gpu)
        rows.append({
            "lever": name, "gpu": gname, "T": T, "nsa_fwd_ms": round(f * 1e3, 4),
            "fwd": round(f / fa_f, 3), "fwd_bwd": round(a / fa_all, 3),
            "saved_of_fwd_bwd": round((t0 - a) / t0, 4),
        })  # fmt: skip
    return rows


def check_rows(model) -> list[dict]:
    """The forward's families of the H100 of 2026-11-26c against the model of its build."""
    from nsa.attention.gpusuite import modelcheck as mc

    data = json.loads(H100C.read_text())
    build = model.RUN_BUILDS[H100C.name]
    gpu = model.GPUS["H100"]
    geo = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
    rows = []
    for rec in data["sections"]["speed"]["records"]:
        if rec["shape"] != "m7c":
            continue
        s = model.Shape(rec["shape"], rec["B"], rec["H"], rec["Hkv"], rec["D"], geo["block_len"],
                        geo["block_stride"], geo["sel_block"], geo["n_sel"], geo["window"])  # fmt: skip
        flags = core_flags(rec, build)
        fams = mc.families_of(flags)
        ks = model.ours(rec["T"], s, cc=gpu.cc, **flags)
        meas = mc.measured_families(rec)
        mod_f, meas_f = 0.0, 0.0
        for k in ks:
            if k.direction != "fwd" or k.name not in fams:
                continue
            fam = fams[k.name]
            if fam not in meas:
                continue
            mod_f += _ms(k, gpu)
            meas_f += meas[fam]
            rows.append({"check": fam, "T": rec["T"], "B": rec["B"], "measured_ms": meas[fam],
                         "model_ms": round(_ms(k, gpu), 4),
                         "measured_over_model": round(meas[fam] / _ms(k, gpu), 3)})  # fmt: skip
        fa_m = model.total(model.flash2(rec["T"], s), gpu, "fwd") * 1e3
        rows.append({
            "check_fwd": "m7c", "T": rec["T"], "B": rec["B"], "families_measured_ms": round(meas_f, 3),
            "families_model_ms": round(mod_f, 3), "nsa_fwd_ms_measured": rec["nsa_fwd_ms"],
            "fa2_fwd_measured": rec["sdpa_flash_fwd_ms"], "fa2_fwd_model": round(fa_m, 3),
            "fwd_over_fa2_measured": rec["nsa_over_flash_fwd"],
            "families_over_fa2_measured": round(meas_f / rec["sdpa_flash_fwd_ms"], 3),
            "families_over_fa2_model": round(mod_f / fa_m, 3),
        })  # fmt: skip
    return rows


# The `ok` mask of each keys kernel's step, and the step without it (--step-sass compiles both): the
# forward's masked walk is its gpucheck variant `selected_fwd_keys_masked` and its mask-free step the
# shipped FREE walk (selected.py `_config` fwd_forced_merge, built from this measurement); the backward's
# from a copy of its source with the mask taken out.
UNMASK = {
    "fwd": ("selected_keys.py", "selected_fwd_keys_masked", "selected_fwd_keys"),
    "bwd": ("selected_keys_bwd.py", "selected_bwd_keys", [
        ("        p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)\n",
         "        p = tl.exp2(s - lse[:, None])\n"),
    ]),
}  # fmt: skip


def step_sass() -> list[dict]:
    """Compile each keys kernel as shipped on sm_90 and again from a copy of its source with the
    step's mask taken out (a temporary module; the package is not touched): the step's warp SASS,
    shared accesses and registers of both, against STEP_SASS (triton 3.6 for the recorded counts)."""
    import os
    import tempfile
    from dataclasses import replace as dc_replace

    import triton

    from nsa.attention import gpucheck
    from nsa.attention.gpusuite.modelcheck import load_by_path
    from nsa.attention.triton import selected as sel

    kp = load_by_path("keys_proxy", HERE / "keys_proxy.py")
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-fwd-gap-"))
    src_dir = Path(sel.__file__).resolve().parent
    rows = []
    for kernel, (fname, spec_name, edits) in UNMASK.items():
        spec = kp.select_sass.patched_spec(sel, spec_name, 6, 64, 90, {}, sel_block=64, n_sel=16)
        if isinstance(edits, str):  # the mask-free step is another spec of the same kernel
            free = kp.select_sass.patched_spec(sel, edits, 6, 64, 90, {}, sel_block=64, n_sel=16)
        else:
            text = (src_dir / fname).read_text()
            for old, new in edits:
                if text.count(old) != 1:
                    raise SystemExit(f"{fname}: the step's mask is not where --step-sass looks for it")
                text = text.replace(old, new)
            tmp = Path(tempfile.mkdtemp(prefix="nsa-fwd-gap-src-")) / f"unmasked_{fname}"
            tmp.write_text(text)
            mod = load_by_path(f"unmasked_{kernel}", tmp)
            free = dc_replace(spec, fn=getattr(mod, spec.fn.__name__))
        out = {"step_sass": kernel, "triton": triton.__version__}
        for tag, sp in (("shipped", spec), ("unmasked", free)):
            k, rep = gpucheck.compile_spec(sp, 90)
            pth = kp.paths(kp.select_sass._disasm(k.asm["cubin"], 90))
            out[tag] = {"insns": pth["step"]["insns"], "lds_sts": pth["step"]["lds_sts"],
                        "registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"]}  # fmt: skip
        rec = STEP_SASS[kernel]
        out["as_recorded"] = [[out[t]["insns"], out[t]["lds_sts"]] for t in ("shipped", "unmasked")] == [
            list(r) for r in rec
        ]
        rows.append(out)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", type=int, nargs="+", default=TS)
    p.add_argument(
        "--step-sass", action="store_true", help="compile the keys steps with and without their mask"
    )
    a = p.parse_args(argv)
    if a.step_sass:
        for r in step_sass():
            print(json.dumps(r))
        return 0
    model = load_model()
    rows = []
    for g in ("H100", "A100"):
        for T in a.T:
            rows += fwd_rows(model, T, g)
    rows += check_rows(model)
    for g in ("H100", "A100"):
        for T in a.T:
            rows += lever_rows(model, T, g)
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
