"""A GPU-free time proxy for the selection kernel `_cmp_select`: its dynamic SASS instruction count.

Owns the proxy behind docs/attention.md's paragraph on what bounds the selection, and its
calibration on the H200 runs. For a (shape, T, B, launch settings, kernel) it counts the warp
instructions the kernel issues: per program the prologue and epilogue once, per key tile the loop's
always-run part, and each top-n merge branch only on the tiles where it runs (bench/select_sass.py's
`split` of the SASS). Whether a tile merges depends on the data, so it is simulated on the inputs the
GPU runs used (the suite's `_nsa_core_inputs`: q and the compressed keys standard normal, bf16,
CPU generator seed 0), in torch on CPU, on windows of 8 consecutive tokens sampled evenly over every
sequence: eager's Eq. 9 scores, and per key tile whether one of its blocks would enter a token's
running top-W. Time = (c_i x warp instructions + c_s x warp shared-memory loads/stores) / (SMs x 4
schedulers x clock), c_i and c_s fitted on the measured points where an SM holds >= 3 warps a
scheduler; where fewer hide less latency, lat x warp instructions / (warps a scheduler x SMs x 4 x
clock) if that is longer, lat fitted on the unspilled points at 2 warps a scheduler (registers,
shared memory and warps a program set the warps an SM holds). Spilled registers are not priced:
the domain (`in_domain`) is no spill. The constants from the probe's points alone are checked on
the speed runs' points (out of sample). Prints one JSON object per line; asserts nothing. A build
whose merges the count does not model (select_insert's insertion paths) is refused: `--predict`
exits 2 with the reason, `--variants` names it in place of its rows.

  .venv/bin/python bench/select_proxy.py                       # the calibration rows and the fit
  .venv/bin/python bench/select_proxy.py --predict m7c:65536:1 --set bt_sel=4   # a candidate
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/select_proxy.py --recount  # re-record SASS

The measured kernels' SASS counts (triton 3.6, the GPU runs' version, sm_90) are recorded in
bench/select_proxy_sass.json (`--recount` compiles them again, the older kernels from git).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _sibling(name: str):
    """bench/<name>.py as the module `name`, by path (the suite's loader): never bench/ on sys.path
    (bench/launcher.py and bench/data.py would shadow the project's packages)."""
    return load_by_path(name, HERE / f"{name}.py")


select_sass = _sibling("select_sass")

SASS_FILE = HERE / "select_proxy_sass.json"
GEO = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16}
SHAPES = {"m7c": (2, 6, 64), "paper": (4, 16, 128)}  # (Hkv, G, D), as the suite and the probe
# NVIDIA H200 SXM: 132 SMs, 4 schedulers each issuing one warp instruction a cycle, 1980 MHz max
# (the suite's env record), 64 K registers, 64 warps, 32 programs and 228 KB shared memory per SM.
H200 = {"sms": 132, "sched": 4, "ghz": 1.98, "regs": 65536, "warps": 64, "blocks": 32, "smem": 233472}
W_TOP = 16  # the running top-W (compressed._config's W at n = 16)
WINDOW = 8  # tokens per sampled window: every BT in 1, 2, 4, 8 tiles it exactly


class Unpredictable(ValueError):
    """A build whose dynamic count the proxy does not model (`--predict` exits 2 with the reason)."""


def _check_merges(branches: list, where: str) -> None:
    """The count's paths: a loop's data-dependent branches are its merges, one for the tile's tokens
    at once or two for its halves. Anything else (select_insert's insertion paths, or a listing whose
    key-tile loop the SASS split did not find) would be priced as merges it is not."""
    if len(branches) not in (1, 2):
        raise Unpredictable(
            f"{where}: {len(branches)} data-dependent branches in a key-tile loop, the count expects 1 or 2"
            " (the merge of the tile's tokens, or of each half)"
        )


# The kernels the GPU measured: name -> git commit of compressed_select.py (None: the module as it is).
KERNELS = {"int32": None, "int32_f3f507d": "f3f507d", "v0": "v0"}


def _load_kernel(name: str):
    """The @triton.jit selection kernel `name` (KERNELS): today's, or an older one from git."""
    from nsa.attention.triton import compressed_select, compressed_select_v0

    rev = KERNELS[name]
    if rev is None:
        return compressed_select._cmp_select
    if rev == "v0":
        return compressed_select_v0._cmp_select_v0
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:nsa/attention/triton/compressed_select.py"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp(prefix="selproxy-")) / f"compressed_select_{rev}.py"
    path.write_text(src)  # triton.jit reads the source file: a real module, not exec'd text
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._cmp_select


def sass_counts(shape: str, kernel: str, bt: int, warps: int, halves: int, arch: int = 90, over=None) -> dict:
    """Registers, shared memory and the per-path SASS counts of one launch setting (compiles)."""
    _, G, D = SHAPES[shape]
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    o = {"bt_sel": bt, "warps_sel": warps, "halves_sel": halves, **(over or {})}
    if kernel == "v0":
        o = {"select_v0": 1, "bt_sel_v0": bt, "warps_sel_v0": warps}
        rec = select_sass.compile_select(G, D, arch, o, paths=True)
    else:
        rec = select_sass.compile_select(G, D, arch, o, fn=_load_kernel(kernel), paths=True)
    return {k: rec[k] for k in ("registers", "spill", "smem", "triton", "paths")}


# ---- which key tiles merge: eager's scores on the runs' inputs --------------------------------------


@functools.lru_cache(maxsize=4)
def window_scores(shape: str, T: int, B: int, windows: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """(t [n, WINDOW] token positions, scores [n, WINDOW, Ns] float32 Eq. 9 block scores) of `windows`
    windows of WINDOW consecutive tokens spread evenly over every (batch, KV head) sequence of the
    suite's inputs (`_nsa_core_inputs`: q, then the compressed keys, torch.randn from a CPU generator
    seeded 0, rounded to bf16), by eager's arithmetic in float32."""
    from nsa.attention.compressed import _eq9_scores

    Hkv, G, D = SHAPES[shape]
    bl, d, lp = GEO["block_len"], GEO["block_stride"], GEO["sel_block"]
    nc, ns = (T - bl) // d + 1, -(-T // lp)
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(B, Hkv, T, G, D, generator=g)  # the suite's order: q first, then kc
    kc = torch.randn(B, Hkv, nc, D, generator=g).bfloat16().float()
    per = max(1, windows // (B * Hkv))
    t0 = torch.tensor([min(T // WINDOW - 1, int((i + 0.5) * T / WINDOW / per)) * WINDOW for i in range(per)])
    t = t0[:, None] + torch.arange(WINDOW)  # [per, WINDOW]
    seen = torch.arange(nc) * d + (bl - 1) <= t[..., None]  # [per, WINDOW, nc]
    out = []
    for b in range(B):
        for h in range(Hkv):
            s = torch.einsum("pwgd,cd->pwgc", q[b, h, t].bfloat16().float(), kc[b, h]) * D**-0.5
            s = s.masked_fill(~seen[:, :, None, :], float("-inf"))
            lse = torch.logsumexp(s, dim=-1, keepdim=True).nan_to_num(0.0)  # no key seen: p = 0
            p_grp = torch.where(seen[:, :, None, :], torch.exp(s - lse), 0.0).sum(2)  # Eq. 10
            out.append(_eq9_scores(p_grp, nc, bl, d, lp, ns))
    return t.repeat(B * Hkv, 1), torch.cat(out)


def block_keys(t: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Eager's key bits per block (`selection.top_blocks` without the j half): float bits, forced
    blocks (0, t // l', t // l' - 1) +inf, non-candidates -1."""
    lp = GEO["sel_block"]
    j = torch.arange(scores.shape[-1])
    jt = (t // lp)[..., None]
    bits = scores.contiguous().view(torch.int32).to(torch.int64) & 0x7FFFFFFF
    bits = torch.where((j == 0) | (j == jt) | (j == jt - 1), 0x7F800000, bits)
    return torch.where(j * lp <= t[..., None], bits, -1)


def enter_flags(keys: torch.Tensor, bj: int) -> torch.Tensor:
    """[..., key tiles] bool from keys [..., Ns]: whether key tile jb (blocks jb*bj ..) holds a block
    that enters the token's running top-W, the kernel's merge test: a key >= the W-th key of the
    earlier tiles (its j is larger, so ties enter), or any candidate while fewer than W are known."""
    flat = keys.reshape(-1, keys.shape[-1])
    top = torch.full((flat.shape[0], W_TOP), -1, dtype=torch.int64)
    flags = []
    for jb in range(-(-flat.shape[1] // bj)):
        kb = flat[:, jb * bj : (jb + 1) * bj]
        floor = top[:, -1].clamp(min=0)
        flags.append((kb >= floor[:, None]).any(1))
        top = torch.cat([top, kb], 1).topk(W_TOP, dim=1).values
    return torch.stack(flags, 1).reshape(*keys.shape[:-1], len(flags))


def dynamic_count(
    shape: str, T: int, B: int, bt: int, halves: int, paths: dict, warps: int, windows=512, bj: int = 16
) -> dict:
    """Warp instructions of one launch: prologue + epilogue per program, the always-run loop part per
    key tile, each merge branch per tile that merges (sampled windows scaled to every program)."""
    Hkv = SHAPES[shape][0]
    lp = GEO["sel_block"]
    progs = -(-T // bt)
    tiles = 0
    for pid in range(progs):  # exact: the loop count depends on the program's last token only
        t_last = min(pid * bt + bt - 1, T - 1)
        tiles += -(-(t_last // lp + 1) // bj)
    _check_merges(paths["branches"], "the key-tile loop")
    E = enter_flags(block_keys(*window_scores(shape, T, B, windows)), bj)
    n_br = len(paths["branches"])
    # The merge branches: one group of the tile's tokens each (two halves, or all BT at once).
    th = (bt + 1) // 2 if n_br == 2 else bt
    merges = [0.0] * n_br
    n_prog = 0
    for off in range(0, WINDOW, bt):
        n_prog += E.shape[0]
        for r in range(n_br):
            lo = off + r * th
            grp = E[:, lo : min(lo + th, off + bt)]
            if grp.shape[1]:
                merges[r] += float(grp.any(1).sum())
    scale = progs / n_prog  # sampled programs -> all programs of one sequence
    seqs = B * Hkv
    dyn = {}
    for c in paths["always"]:
        n = progs * (paths["prologue"][c] + paths["epilogue"][c]) + tiles * paths["always"][c]
        n += sum(m * scale * b[c] for m, b in zip(merges, paths["branches"]))
        dyn[c] = n * seqs * warps
    return {
        "programs": progs * seqs,
        "tiles": tiles * seqs,
        "merge_rate": [round(m * scale / tiles, 4) for m in merges],
        "warp_insns": dyn["insns"],
        "dyn": dyn,
    }


def interior_end(t0: int, t_last: int, bj: int, bl: int = 32, d: int = 16, lp: int = 64) -> int:
    """`_cmp_select`'s `_interior_end` (select_split) for a program of tokens t0..t_last (geometry: the
    proxy's, GEO): its interior key tiles are [1, end), its edge tiles 0 and [end, tiles)."""
    r = lp // d
    n_tiles = -(-(t_last // lp + 1) // bj)
    vis = max(t0 - (bl - 1) + d, 0) // (bj * r * d)
    cand = (t0 + lp) // (bj * lp)
    forced = max(t0 // lp - 1, 0) // bj
    return max(min(vis, cand, forced, n_tiles), 1)


def dynamic_count_split(
    shape: str, T: int, B: int, bt: int, paths: dict, warps: int, windows=512, bj: int = 16
) -> dict:
    """`dynamic_count` for the split loop (select_split; `paths["loops"]`, bench/select_sass.py
    `split_loops`): per program the code outside the loops once (tile 0 among it, straight-line, its
    merges counted as run: block 0 is forced, so tile 0 always merges a token's first keys), per
    interior and per edge tile its loop's always-run part (exact counts: `interior_end` of each
    program), and each loop's merge branches at the rate they run on the sampled tiles of its kind
    (`merge_rate_interior` / `_edge`, the edge's without tile 0) times its exact tile count."""
    Hkv = SHAPES[shape][0]
    lp = GEO["sel_block"]
    loops = paths["loops"]["loops"]
    if len(loops) != 2:  # tile 0 straight-line, then the interior and the edge loops
        raise Unpredictable(
            f"{len(loops)} key-tile loops in the split build's SASS, the count expects 2 (at 1 warp, ptxas lays"
            " the merges out after the loop and jumps back into it, on triton 3.6 and 3.9 alike: its loops"
            " are not found; --set warps_sel=2 --set maxnreg_sel=0 counts the 2-warp build before it)"
        )
    for name, loop in zip(("interior", "edge"), loops):
        _check_merges(loop["branches"], f"the {name} loop")
    progs = -(-T // bt)
    n_int = n_edge = 0
    for pid in range(progs):
        t0, t_last = pid * bt, min(pid * bt + bt - 1, T - 1)
        n = -(-(t_last // lp + 1) // bj)
        end = interior_end(t0, t_last, bj)
        n_int += end - 1
        n_edge += n - end
    t, sc = window_scores(shape, T, B, windows)
    E = enter_flags(block_keys(t, sc), bj)
    n_br = len(loops[1]["branches"])
    th = (bt + 1) // 2 if n_br == 2 else bt
    merges = {"interior": [0.0] * n_br, "edge": [0.0] * n_br}
    seen = {"interior": 0.0, "edge": 0.0}  # sampled tiles of each kind (a program's, once)
    for off in range(0, WINDOW, bt):
        t0 = t[:, off]
        t_last = t[:, min(off + bt, WINDOW) - 1]
        ends = torch.tensor([interior_end(int(a), int(b), bj) for a, b in zip(t0, t_last)])
        n_tiles = -(-(t_last // lp + 1) // bj)
        jb = torch.arange(E.shape[-1])
        interior = (jb[None, :] >= 1) & (jb[None, :] < ends[:, None])
        edge = (jb[None, :] >= ends[:, None]) & (jb[None, :] < n_tiles[:, None])
        seen["interior"] += float(interior.sum())
        seen["edge"] += float(edge.sum())
        for r in range(n_br):
            lo = off + r * th
            grp = E[:, lo : min(lo + th, off + bt)]
            if grp.shape[1]:
                m = grp.any(1)
                merges["interior"][r] += float((m & interior).sum())
                merges["edge"][r] += float((m & edge).sum())
    # Each loop's merges a tile of its kind in the sample, times its exact count (the sample's mix of
    # interior and edge tiles is not the launch's).
    rate = {k: [m / max(seen[k], 1.0) for m in v] for k, v in merges.items()}
    seqs = B * Hkv
    dyn = {}
    for c in paths["loops"]["once"]:
        n = progs * paths["loops"]["once"][c] + n_int * loops[0]["always"][c] + n_edge * loops[1]["always"][c]
        n += sum(r * n_int * b[c] for r, b in zip(rate["interior"], loops[0]["branches"]))
        n += sum(r * n_edge * b[c] for r, b in zip(rate["edge"], loops[1]["branches"]))
        dyn[c] = n * seqs * warps
    return {
        "programs": progs * seqs,
        "tiles": (progs + n_int + n_edge) * seqs,
        "interior_tiles": n_int * seqs,
        "edge_tiles": (progs + n_edge) * seqs,  # tile 0 among them
        "merge_rate": [
            round((a * n_int + b * n_edge) / max(n_int + n_edge, 1), 4) for a, b in zip(*rate.values())
        ],
        # per loop: merges a tile of its kind (the edge's without tile 0), for bench/a100_proxy.py's record
        "merge_rate_interior": [round(a, 4) for a in rate["interior"]],
        "merge_rate_edge": [round(b, 4) for b in rate["edge"]],
        "warp_insns": dyn["insns"],
        "dyn": dyn,
    }


def resident_warps(registers: int, smem: int, warps: int, gpu=H200) -> int:
    """Warps an SM of `gpu` (the H200 by default) holds of this kernel: select_sass.resident_programs
    x its warps."""
    return select_sass.resident_programs(registers, smem, warps, gpu) * warps


def cycles(dyn: dict, f: dict) -> float:
    """Scheduler cycles of a launch's dynamic counts when issue bounds it: every warp instruction
    takes f["insn"] issue cycles and every shared-memory load/store f["smem"] more (layout changes and
    cross-warp reductions through the SM's one shared-memory pipe)."""
    return f["insn"] * dyn["insns"] + f["smem"] * dyn["lds_sts"]


def proxy_ms(dyn: dict, f: dict, resident: int | None = None, gpu=H200) -> float:
    """Milliseconds: the issue bound, or where fewer warps share a scheduler than hide one warp's
    latency, the latency bound: each warp issues one instruction every f["lat"] cycles at best."""
    unit = gpu["sms"] * gpu["sched"] * gpu["ghz"] * 1e6
    issue = cycles(dyn, f) / unit
    if resident is None or not f.get("lat"):
        return issue
    return max(issue, f["lat"] * dyn["insns"] / (resident / gpu["sched"]) / unit)


def in_domain(row: dict) -> bool:
    """Where the proxy is calibrated: no spilled register (local-memory traffic is not priced)."""
    return row["dyn"]["ldl_stl"] == 0


def issue_bound(row: dict) -> bool:
    """The points that fit the issue constants: >= 3 warps resident a scheduler."""
    return in_domain(row) and row["resident_warps"] >= 3 * H200["sched"]


# ---- the measured points ---------------------------------------------------------------------------

PROBE = "bench/gpu/2026-11-26b-h200-probe-select.jsonl"
PROBE_SHAPES = ["m7c:8192:8", "m7c:65536:1", "paper:32768:2"]  # kernel_probe.py's cmp_fwd defaults
SPEED = {
    "int32": "bench/gpu/2026-11-26b-h200-speed-final.json",
    "v0": "bench/gpu/2026-11-26b-h200-speed-shipped.json",
}
# Launch settings in force when each file was measured (compressed._config at f3f507d, 050ce66 and
# 2b9778f, sm_90): (tokens a tile, warps, halves).
PROBE_BASE = {"m7c": (2, 2, 0), "paper": (2, 4, 0)}
SPEED_SETTINGS = {("int32", "m7c"): (2, 2, 1), ("int32", "paper"): (4, 4, 0),
                  ("v0", "m7c"): (2, 2, 1), ("v0", "paper"): (2, 4, 1)}  # fmt: skip


def measured_points() -> list[dict]:
    """Every measured `_cmp_select` time: the probe's variants and the two speed runs' kernel tables."""
    pts = []
    for line in (ROOT / PROBE).read_text().splitlines():
        r = json.loads(line)
        v = r["variant"]
        if v.get("kernel") != "select":
            continue
        bt, warps, halves = PROBE_BASE[r["shape"]]
        if v.get("select_v0"):
            kernel, warps, halves = "v0", v.get("warps_sel_v0", warps), 1
        else:
            kernel = "int32_f3f507d"
            bt, warps, halves = v.get("bt_sel", bt), v.get("warps_sel", warps), v.get("halves_sel", halves)
        name = ",".join(f"{k}={x}" for k, x in v.items() if k != "kernel") or "shipped"
        pts.append({"source": "probe", "variant": name, "shape": r["shape"], "T": r["T"], "B": r["B"],
                    "kernel": kernel, "bt": bt, "warps": warps, "halves": halves, "ms": r["ms"]})  # fmt: skip
    for kernel, path in SPEED.items():
        for r in json.loads((ROOT / path).read_text())["sections"]["speed"]["records"]:
            shape = "m7c" if r["shape"] == "m7c" else "paper"
            ms = [k["ms"] for k in r.get("nsa_kernels", []) if k["kernel"] == "_cmp_select"]
            bt, warps, halves = SPEED_SETTINGS[(kernel, shape)]
            if ms:
                pts.append({"source": f"speed-{kernel}", "variant": "shipped", "shape": shape, "T": r["T"],
                            "B": r["B"], "kernel": kernel if kernel == "v0" else "int32", "bt": bt,
                            "warps": warps, "halves": halves, "ms": ms[0]})  # fmt: skip
    return pts


def _key(p: dict) -> str:
    return f"{p['shape']}/{p['kernel']}/bt{p['bt']}/w{p['warps']}/h{p['halves']}"


def recount(points: list[dict]) -> dict:
    """Compile every measured setting once (sm_90, this triton) and return its SASS counts."""
    out = {}
    for p in points:
        k = _key(p)
        if k not in out:
            out[k] = sass_counts(p["shape"], p["kernel"], p["bt"], p["warps"], p["halves"])
            print(json.dumps({"recorded": k, **{x: out[k][x] for x in ("registers", "spill", "smem")}}),
                  file=sys.stderr, flush=True)  # fmt: skip
    return out


def proxy_rows(points: list[dict], sass: dict, windows: int = 512) -> list[dict]:
    rows = []
    for p in points:
        c = sass[_key(p)]
        dyn = dynamic_count(p["shape"], p["T"], p["B"], p["bt"], p["halves"], c["paths"], p["warps"], windows)
        res = resident_warps(c["registers"], c["smem"], p["warps"])
        rows.append({**p, "registers": c["registers"], "smem": c["smem"], "resident_warps": res, **dyn})
    return rows


def fit(rows: list[dict]) -> dict:
    """The constants, least squares on (predicted - measured) / measured: c_i and c_s over the
    issue-bound rows; then `lat` (log least squares) over the other unspilled rows, those at 2 warps
    a scheduler; `insn_only` the one-constant model (instructions alone) for comparison."""
    unit = H200["sms"] * H200["sched"] * H200["ghz"] * 1e6
    xs = [
        (r["dyn"]["insns"] / unit / r["ms"], r["dyn"]["lds_sts"] / unit / r["ms"])
        for r in rows
        if issue_bound(r)
    ]
    saa = sum(a * a for a, _ in xs)
    sab = sum(a * b for a, b in xs)
    sbb = sum(b * b for _, b in xs)
    sa, sb = sum(a for a, _ in xs), sum(b for _, b in xs)
    det = saa * sbb - sab * sab
    f = {"insn": (sa * sbb - sb * sab) / det, "smem": (sb * saa - sa * sab) / det, "insn_only": sa / saa}
    slow = [r for r in rows if in_domain(r) and not issue_bound(r)]
    if slow:  # cycles a warp waits between its instructions, from where issue alone is too fast
        logs = [
            math.log(r["ms"] * unit * r["resident_warps"] / H200["sched"] / r["dyn"]["insns"]) for r in slow
        ]
        f["lat"] = math.exp(sum(logs) / len(logs))
    return f


def predict(rows: list[dict], f: dict) -> list[dict]:
    out = []
    for r in rows:
        gpu = a100() if r.get("arch") == 80 else H200
        ms = proxy_ms(r["dyn"], f, r["resident_warps"], gpu)
        issue = proxy_ms(
            {"insns": r["dyn"]["insns"], "lds_sts": 0}, {"insn": f["insn_only"], "smem": 0}, gpu=gpu
        )
        row = {**r, "proxy_ms": round(ms, 3), "in_domain": in_domain(r)}
        if "ms" in r:
            row.update(error=round(ms / r["ms"] - 1, 3), insn_only_error=round(issue / r["ms"] - 1, 3))
        out.append(row)
    return out


def a100() -> dict:
    """The A100 as bench/a100_proxy.py prices it (the cost model's SMs and clock, sm_80's occupancy
    limits), in `proxy_ms`'s and `resident_warps`' form."""
    return _sibling("a100_proxy").A100_SM


def candidate_rows(
    specs: list[str], over: dict, kernel: str, windows: int, arch: int = 90, skipped: list | None = None
) -> list[dict]:
    """Proxy rows of one launch setting (today's _config on sm_`arch` with `over`) at shape:T:B points;
    arch 80: sm_80's SASS, resident warps on an A100 (priced there by `main`, the H200's cycles an
    instruction carried over per SM cycle as bench/a100_proxy.py does). A point whose build the count
    does not model raises `Unpredictable`, or with `skipped` (a list) is appended to it as (spec,
    reason) and left out."""
    rows, counted = [], {}
    for spec in specs:
        try:
            rows.append(_candidate_row(spec, over, kernel, windows, arch, counted))
        except Unpredictable as e:
            if skipped is None:
                raise
            skipped.append((spec, str(e)))
    return rows


def _candidate_row(spec: str, over: dict, kernel: str, windows: int, arch: int, counted: dict) -> dict:
    """`candidate_rows`' row of one shape:T:B point (`counted`: the SASS of the settings compiled)."""
    from nsa.attention.triton import compressed as cmp

    shape, T, B = spec.split(":")
    _, G, D = SHAPES[shape]
    c = {**cmp._config(G, D, 16, 32, 16, 64, arch), **over}
    if c["select_insert"] and not c["select_v0"]:
        # Its merges take one of four paths by the tile's entering keys (none, one, two, more): the
        # count knows one merge a group (and triton 3.9 lists the paths as four branches, read as merges).
        raise Unpredictable(
            f"{spec} on sm_{arch}: the build launches select_insert {c['select_insert']} (compressed._config"
            " with --set), whose one- and two-key insertion paths the proxy's dynamic count does not model;"
            " --set select_insert=0 counts the build without them (every entering tile merged), the cost"
            " model prices the insertion (bench/attention_cost/counts.py insert_factor)"
        )
    bt, warps, halves = c["bt_sel"], c["warps_sel"], c["halves_sel"]
    if c["select_v0"]:  # the kernel before, at its own settings (it always merges in halves)
        kernel, bt, warps, halves = "v0", c["bt_sel_v0"], c["warps_sel_v0"], 1
    key = (shape, kernel, bt, warps, halves, c["BJ"], c["maxnreg_sel"])
    if key not in counted:
        cap = {"maxnreg_sel": c["maxnreg_sel"]} if c["maxnreg_sel"] else {}  # the launcher's
        counted[key] = sass_counts(shape, kernel, bt, warps, halves, arch, over={**cap, **over})
    sc = counted[key]
    if "loops" in sc["paths"]:  # select_split: the interior and the edge tiles apart
        dyn = dynamic_count_split(shape, int(T), int(B), bt, sc["paths"], warps, windows, c["BJ"])
    else:
        dyn = dynamic_count(shape, int(T), int(B), bt, halves, sc["paths"], warps, windows, c["BJ"])
    res = resident_warps(sc["registers"], sc["smem"], warps, a100() if arch == 80 else H200)
    return {"arch": arch, "shape": shape, "T": int(T), "B": int(B), "kernel": kernel, "bt": bt, "warps": warps,
            "halves": halves, "BJ": c["BJ"], "set": over, "registers": sc["registers"], "spill": sc["spill"],
            "triton": sc["triton"], "resident_warps": res, **dyn}  # fmt: skip


KEEP = ("source", "variant", "arch", "shape", "T", "B", "kernel", "bt", "warps", "halves", "set", "registers", "spill",
        "triton", "resident_warps", "merge_rate", "merge_rate_interior", "merge_rate_edge", "interior_tiles", "edge_tiles", "warp_insns", "ms", "proxy_ms", "error", "insn_only_error",
        "in_domain")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recount", action="store_true", help="compile the measured kernels again and record")
    ap.add_argument("--windows", type=int, default=512, help="sampled 8-token windows per (shape, T)")
    ap.add_argument("--predict", nargs="*", help="shape:T:B points for a candidate (--set, --kernel)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="bt_sel, warps_sel, halves_sel, ..."
    )
    ap.add_argument("--kernel", default="int32", choices=sorted(KERNELS))
    ap.add_argument(
        "--arch",
        type=int,
        default=90,
        choices=[80, 90],
        help="80: sm_80's SASS priced on an A100 (--predict)",
    )
    ap.add_argument(
        "--variants",
        action="store_true",
        help="predict bench/kernel_probe.py's selection variants at its shapes",
    )
    args = ap.parse_args(argv)
    cands = None
    if args.predict:  # compiled and counted first: a build the count does not model exits before the fit
        over = {k: select_sass._value(v) for k, v in (x.split("=", 1) for x in args.set)}
        try:
            cands = candidate_rows(args.predict, over, args.kernel, args.windows, args.arch)
        except Unpredictable as e:
            print(f"select_proxy.py --predict: {e}", file=sys.stderr)
            return 2
    points = measured_points()
    if args.recount:
        SASS_FILE.write_text(json.dumps(recount(points), indent=1, sort_keys=True) + "\n")
    sass = json.loads(SASS_FILE.read_text())
    rows = proxy_rows(points, sass, args.windows)
    f = fit(rows)
    # Out of sample: the constants from the probe's points alone, checked on the two speed runs.
    f_probe = fit([r for r in rows if r["source"] == "probe"])
    held = [r for r in predict(rows, f_probe) if r["source"] != "probe" and r["in_domain"]]
    if args.predict is None and not args.variants:
        for r in predict(rows, f):
            print(json.dumps({"calibration": "h200", **{k: r[k] for k in KEEP if k in r}}), flush=True)
    errs = sorted(abs(r["error"]) for r in predict(rows, f) if r["in_domain"])
    print(json.dumps({"fit": {k: round(v, 3) for k, v in f.items()}, "points": len(rows), "in_domain": len(errs),
                      "within_15pct": sum(e <= 0.15 for e in errs), "max_abs_error": errs[-1],
                      "median_abs_error": errs[len(errs) // 2],
                      "probe_only_fit": {k: round(v, 3) for k, v in f_probe.items()},
                      "speed_points_max_abs_error": max(abs(r["error"]) for r in held)}), flush=True)  # fmt: skip
    if cands is not None:
        gpu = "a100" if args.arch == 80 else "h200"
        for r in predict(cands, f):
            print(json.dumps({"prediction": gpu, **{k: r[k] for k in KEEP if k in r}}), flush=True)
    if args.variants:  # before the GPU measures them: the probe checks the proxy out of sample
        for v in _sibling("kernel_probe").CMP_VARIANTS:
            if v["kernel"] != "select":
                continue
            over = {k: x for k, x in v.items() if k != "kernel"}
            skipped: list = []  # points the count does not model: named, the others predicted
            for r in predict(candidate_rows(PROBE_SHAPES, over, "int32", args.windows, skipped=skipped), f):
                print(
                    json.dumps({"prediction": "h200", "variant": v, **{k: r[k] for k in KEEP if k in r}}),
                    flush=True,
                )
            for spec, why in skipped:
                print(
                    json.dumps({"prediction": "h200", "variant": v, "point": spec, "unpredictable": why}),
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
