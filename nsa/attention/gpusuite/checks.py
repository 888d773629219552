"""Sections a-c of the GPU suite (environment, numerics, determinism) and the plan of every mode.

Owns `Plan` (shapes and counts per mode: full / quick on a GPU, interpret on CPU) and the section
functions `env`, `numerics`, `determinism`; the GPU-only sections d-f live in `gpu.py`. Each section
takes (plan, suite), watches `suite.left()` (seconds of budget left) and returns a JSON-able dict
with `ok`, a one-line `summary` and its records. Numerics compare every triton kernel, forward and
backward, in bf16 and fp16 with the exact float64 result under the bounds of `bounds.py`, and the
whole NSAAttention (parameters' gradients included) with eager in float32. It must not change a
kernel's launch config: it calls the same public functions the model calls.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nsa.attention.gpusuite import bounds
from nsa.attention.gpusuite.budget import (
    NUMERICS_COMPILE_S,
    NUMERICS_MODULE_S,
    Item,
    Items,
    numerics_estimate,
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Plan:
    """What one mode runs. Kernel shapes are (G, D, T), run in that order for each dtype; geometry is
    NSA's (l, d, l', n, w); speed cases are (name, H, Hkv, D, T)."""

    mode: str
    device: str
    kernel_shapes: list[tuple[int, int, int]]
    dtypes: list[str]
    geometry: dict = field(default_factory=dict)
    module: dict = field(default_factory=dict)
    speed_cases: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    train_seqs: list[int] = field(default_factory=list)
    train_steps: int = 0
    long_train_steps: int = 0  # the 64k-token NSA run of configs/m7c_64k.yaml (issue 20, item 4)

    @classmethod
    def for_mode(cls, mode: str) -> Plan:
        paper = {"block_len": 32, "block_stride": 16, "sel_block": 64, "n_sel": 16, "window": 512}
        if mode == "interpret":
            # Tiny: the interpreter runs each program in Python. Still crosses tiles and blocks.
            return cls(
                mode, "cpu", kernel_shapes=[(2, 32, 40)], dtypes=["bf16", "fp16"],
                geometry={"block_len": 16, "block_stride": 8, "sel_block": 16, "n_sel": 4, "window": 24},
                module={"dim": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 32, "T": 32, "B": 1},
            )  # fmt: skip
        # Most telling first (time may cut the tail): M7C's (G 6, D 64), the paper's (16, 128), then
        # the rest; each (G, D) at 1k (where its kernels compile) then 8k.
        pairs = [(6, 64), (16, 128), (1, 64), (2, 64), (1, 128), (2, 128), (6, 128), (16, 64)]
        grid = [(g, d, t) for g, d in pairs for t in (1024, 8192)]
        quick = [(6, 64, 1024), (6, 64, 8192), (16, 128, 1024), (1, 64, 8192)]
        m7c = {"dim": 768, "n_heads": 12, "n_kv_heads": 2, "head_dim": 64, "T": 2048, "B": 2}
        shapes = {"m7c": (12, 2, 64), "paper_G16_D128": (64, 4, 128)}
        if mode == "quick":
            speed = [("m7c", 8192), ("m7c", 32768), ("paper_G16_D128", 32768)]
        else:
            speed = [(s, t) for s in shapes for t in (2048, 8192, 16384, 32768, 65536)]
        return cls(
            mode, "cuda", kernel_shapes=quick if mode == "quick" else grid,
            dtypes=["bf16"] if mode == "quick" else ["bf16", "fp16"], geometry=paper, module=m7c,
            speed_cases=[(s, *shapes[s], t) for s, t in speed],
            train_seqs=[2048] if mode == "quick" else [2048, 8192],
            train_steps=6 if mode == "quick" else 12, long_train_steps=4 if mode == "quick" else 6,
        )  # fmt: skip


@contextlib.contextmanager
def _bf16_honest(plan: Plan):
    """The interpreter's bf16 patch where the kernels are interpreted; nothing on a GPU."""
    if plan.device == "cpu":
        from nsa.attention.gpusuite.interp_bf16 import honest_bf16

        with honest_bf16():
            yield
    else:
        yield


def _git_commit() -> str:
    """The checkout's commit (+ "-dirty" when it has changes), so a suite.json names the code it ran."""
    repo = Path(__file__).resolve().parents[3]
    try:
        git = ["git", "-C", str(repo)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=20).stdout.strip()  # fmt: skip
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown (git: {type(e).__name__})"


def _version(mod: str) -> str | None:
    try:
        return __import__(mod).__version__
    except Exception:
        return None


# ------------------------------------------------------------------------------------------ a) env
def env(plan: Plan, suite) -> dict:
    import triton

    rec = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": _version("numpy"),
        "cuda_runtime": torch.version.cuda,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
        "host": platform.node(),
        "git_commit": _git_commit(),
    }
    from nsa.attention.triton import unsupported_reason

    rec["triton_supported"] = unsupported_reason() is None
    if plan.device == "cpu":
        rec["device"] = f"cpu ({os.cpu_count()} cores), kernels in triton's interpreter"
        return {"ok": rec["triton_supported"], "summary": f"CPU interpreter, torch {torch.__version__}, "
                f"triton {triton.__version__}", **rec}  # fmt: skip
    p = torch.cuda.get_device_properties(0)
    rec.update(
        gpu=p.name, sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
        memory_gib=round(p.total_memory / 2**30, 1), device_count=torch.cuda.device_count(),
        cudnn=torch.backends.cudnn.version(),
    )  # fmt: skip
    try:
        q = "--query-gpu=driver_version,clocks.max.sm,power.limit"
        out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip().splitlines()  # fmt: skip
        rec["driver"], rec["max_sm_clock"], rec["power_limit"] = (x.strip() for x in out[0].split(","))
    except Exception as e:
        rec["driver"] = f"unknown (nvidia-smi: {e})"
    summary = f"{p.name} x{rec['device_count']}, {p.multi_processor_count} SMs, driver {rec['driver']}, " \
        f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}"  # fmt: skip
    return {"ok": rec["triton_supported"], "summary": summary, **rec}


# ------------------------------------------------------------------------------------- b) numerics
def _inputs(B, Hkv, T, G, D, Tk, dtype, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    return mk(B, Hkv, T, G, D), mk(B, Hkv, Tk, D), mk(B, Hkv, Tk, D), mk(B, Hkv, T, G, D)


def _fwd_bwd(fn, q, k, v, dout, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    res = fn(*leaves, **kw)
    out = res[0] if isinstance(res, tuple) else res
    grads = torch.autograd.grad(out, leaves, dout)
    return {"out": out, "dq": grads[0], "dk": grads[1], "dv": grads[2]}, res


def _rounded(r: dict) -> dict:
    """Six decimals are enough for errors and their ratio to a bound (suite.json stays readable)."""
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()}


def _judge(name: str, got: dict, want: dict, meta: dict) -> dict:
    rec = {"kernel": name, **meta, "bound": "bounds.attention_bounds (rounding model, docs/gpu-suite.md)"}
    ok = True
    for part, wb in want.items():
        r = bounds.check(got[part], wb)
        rec[part] = _rounded(r)
        ok &= r["within_bound"] and bool(torch.isfinite(got[part]).all())
    rec["ok"] = ok
    return rec


def _pdq_rounded(G: int, D: int, lp: int, dtype: torch.dtype, device) -> bool:
    """Whether the selected backward that runs here (forced blocks, as NSAAttention) rounds its dQ
    partials to `dtype`: the key-major path (`bwd_keys`) at `pdq_bits` 16 (selected_keys_bwd.pdq_dtype)."""
    from nsa.attention.triton import selected as ts
    from nsa.attention.triton.selected_keys_bwd import pdq_dtype

    cfg = ts._launch_config(G, D, lp, ts.device_arch(torch.device(device)))
    return bool(cfg["bwd_keys"]) and pdq_dtype(cfg, dtype) != torch.float32


def _attention_kernels(plan: Plan, G: int, D: int, T: int, dtype: torch.dtype, seed: int) -> list[dict]:
    from nsa.attention import compressed as eager_cmp
    from nsa.attention.triton import compressed as tc
    from nsa.attention.triton import selected as ts
    from nsa.attention.triton import window as tw

    geo, dev = plan.geometry, plan.device
    bl, d, lp, n, w = (geo[k] for k in ("block_len", "block_stride", "sel_block", "n_sel", "window"))
    scale = D**-0.5
    meta = {"G": G, "D": D, "T": T, "dtype": str(dtype).removeprefix("torch.")}
    out = []
    # Window.
    q, k, v, do = _inputs(1, 1, T, G, D, T, dtype, dev, seed)
    got, _ = _fwd_bwd(tw.window_attention, q, k, v, do, window=w, scale=scale)
    vis = lambda t0, t1: bounds.window_visible(T, w, dev)[None, None, t0:t1]  # noqa: E731
    out.append(_judge("window", got, bounds.attention_bounds(q, k, v, do, vis, scale, dtype), meta))
    # Compressed (+ the selection table, which must equal eager's on the same values in float32).
    nc = (T - bl) // d + 1 if bl <= T else 0
    q, kc, vc, do = _inputs(1, 1, T, G, D, nc, dtype, dev, seed + 1)
    kw = dict(block_len=bl, block_stride=d, sel_block=lp, n_sel=n, scale=scale)
    got, (_, idx, valid) = _fwd_bwd(tc.compressed_attention_and_selection, q, kc, vc, do, **kw)
    vis = lambda t0, t1: bounds.compressed_visible(T, nc, bl, d, dev)[None, None, t0:t1]  # noqa: E731
    rec = _judge("compressed", got, bounds.attention_bounds(q, kc, vc, do, vis, scale, dtype), meta)
    with torch.no_grad(), _no_tf32():
        _, e_idx, e_valid = eager_cmp.compressed_attention_and_selection(
            q.float(), kc.float(), vc.float(), chunk=1024, **kw
        )
    same_rows = ((idx == e_idx) | ~e_valid).all(-1) & (valid == e_valid).all(-1)
    rec["table_rows_differing"] = int((~same_rows).sum())
    rec["table_identical_to_eager_fp32"] = bool(torch.equal(idx, e_idx) and torch.equal(valid, e_valid))
    ties = table_rows_within_ties(q, kc, idx, valid, e_idx, e_valid, **kw)
    rec["table_rows_near_tie"] = ties["near_tie"]
    rec["table_max_gap_over_bound"] = ties["max_gap_over_bound"]
    rec["table_matches_eager_up_to_ties"] = ties["near_tie"] == rec["table_rows_differing"]
    rec["ok"] = rec["ok"] and rec["table_matches_eager_up_to_ties"]
    out.append(rec)
    # Selected, on that table.
    qs, ks, vs, do = _inputs(1, 1, T, G, D, T, dtype, dev, seed + 2)
    got, _ = _fwd_bwd(ts.selected_attention, qs, ks, vs, do, idx=idx, valid=valid, sel_block=lp,
                      scale=scale, forced_blocks=True)  # fmt: skip
    vmask = bounds.selected_visible(idx, valid, T, lp)
    want = bounds.attention_bounds(
        qs, ks, vs, do, vmask, scale, dtype, dq_parts_rounded=_pdq_rounded(G, D, lp, dtype, dev)
    )
    out.append(_judge("selected", got, want, meta))
    return out


def table_rows_within_ties(q, kc, idx, valid, e_idx, e_valid, *, block_len, block_stride, sel_block, n_sel,
                           scale) -> dict:  # fmt: skip
    """Which rows where the kernel's table differs from eager's are float32 near-ties of eager's scores.

    The kernel sums its QK products in another order than eager's GEMM, so probabilities differ in
    the last float32 bits, and two blocks whose Eq. 9 scores are that close can swap at the n-th
    place. A differing row is a near-tie when every block the two tables disagree on scores (eager,
    float32) within the rounding bound of the row's n-th score s_n: |score - s_n| <= s_n * 2^-24 *
    (4 D max|logit| + 2 n_vis + 16): a D-term dot reordered (which moves each probability by at most
    ~2 D u max|logit| relative through exp), the softmax sum over n_vis keys, and Eq. 9's few adds.
    Anything farther apart is a real difference. Returns {"near_tie", "max_gap_over_bound"}."""
    from nsa.attention import compressed as eager_cmp

    T, D = q.shape[2], q.shape[4]
    diff = ((idx != e_idx) & e_valid).any(-1) | (valid != e_valid).any(-1)  # [B, Hkv, T]
    near, worst = 0, 0.0
    nc, ns = kc.shape[2], -(-T // sel_block)
    for b, h, t in diff.nonzero().tolist():
        n_vis = min(nc, max(0, (t - (block_len - 1)) // block_stride + 1))
        qs = q[b, h, t].float() * scale  # [G, D]
        logits = qs @ kc[b, h, :n_vis].float().T  # [G, n_vis]
        p = torch.softmax(logits, dim=-1).sum(0)  # Eq. 10
        scores = eager_cmp._eq9_scores(p[None], n_vis, block_len, block_stride, sel_block, ns)[0]
        mine_l = idx[b, h, t][valid[b, h, t]].tolist()
        theirs_l = e_idx[b, h, t][e_valid[b, h, t]].tolist()
        mine, theirs = set(mine_l), set(theirs_l)
        jt = t // sel_block
        swapped = [j for j in mine ^ theirs if j not in (0, jt, jt - 1)]
        free = sorted((scores[j].item() for j in theirs if j not in (0, jt, jt - 1)), reverse=True)
        s_n = free[-1] if free else 0.0
        rel = 2.0**-24 * (4 * D * logits.abs().max().item() + 2 * n_vis + 16)
        if swapped:
            gap, bound = max(abs(scores[j].item() - s_n) for j in swapped), s_n * rel
        else:
            # The same blocks in another order (the row is listed because positions differ): the
            # pairs the two tables rank the other way round must be near-ties of each other.
            pm, pt = {j: i for i, j in enumerate(mine_l)}, {j: i for i, j in enumerate(theirs_l)}
            flips = [(a, c) for a in mine for c in mine if pm[a] < pm[c] and pt[a] > pt[c]]
            gap = max((abs(scores[a].item() - scores[c].item()) for a, c in flips), default=float("inf"))
            bound = max((max(scores[a].item(), scores[c].item()) for a, c in flips), default=0.0) * rel
        ratio = gap / bound if bound > 0 else float("inf")
        worst = max(worst, ratio)
        near += ratio <= 1.0 and len(mine) == len(theirs)
    return {"near_tie": int(near), "max_gap_over_bound": round(worst, 3)}


@contextlib.contextmanager
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _fused_kernels(plan: Plan, G: int, D: int, T: int, dtype: torch.dtype, seed: int) -> list[dict]:
    """RoPE-to-layout and the gate mix: one rounding of a float32 result each, so the bound is
    u|exact| + 4 * 2^-24 * (sum of the magnitudes of the terms)."""
    from nsa.attention.rope import apply_rope, rope_tables
    from nsa.attention.triton import fused

    u, e, tiny = bounds.UNIT_ROUNDOFF[dtype], 4 * 2.0**-24, bounds.UNDERFLOW[dtype]
    dev, meta, out = plan.device, {"G": G, "D": D, "T": T, "dtype": str(dtype).removeprefix("torch.")}, []
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(1, T, 2, G, D, generator=g).to(dev, dtype)
    cos, sin = (t.float().contiguous() for t in rope_tables(T, D, 10000.0, torch.float32, torch.device(dev)))
    dy = torch.randn(1, 2, T, G, D, generator=g).to(dev, dtype)
    xl = x.detach().clone().requires_grad_()
    y = fused.rope_to_layout(xl, cos, sin, (0, 2, 1, 3, 4))
    (dx,) = torch.autograd.grad(y, xl, dy)
    x64 = x.double().requires_grad_()
    c64, s64 = cos.double()[None, :, None, None, :], sin.double()[None, :, None, None, :]
    y64 = apply_rope(x64.view(1, T, 2 * G, D), cos.double(), sin.double()).view(1, T, 2, G, D)
    y64 = y64.permute(0, 2, 1, 3, 4)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())

    def swap_halves(t):
        h = D // 2
        return torch.cat([t[..., h:], t[..., :h]], -1)

    # |y| <= |x||cos| + |x_other half||sin|, and the same for the backward's rotation by -angle.
    mag_y = (x.double().abs() * c64.abs() + swap_halves(x.double().abs()) * s64.abs()).permute(0, 2, 1, 3, 4)
    dyp = dy.double().abs().permute(0, 2, 1, 3, 4)
    mag_dx = dyp * c64.abs() + swap_halves(dyp * s64.abs())
    want = {
        "out": (y64.detach(), u * y64.detach().abs() + e * mag_y + tiny),
        "dx": (dx64, u * dx64.abs() + e * mag_dx + tiny),
    }
    rec = {"kernel": "rope_to_layout", **meta, "ok": True}
    for part, val in (("out", y), ("dx", dx)):
        r = bounds.check(val, want[part])
        rec[part] = _rounded(r)
        rec["ok"] &= r["within_bound"]
    out.append(rec)
    # Gate mix [Eq. 5].
    gates = torch.rand(1, T, 1, G, 3, generator=g).to(dev, dtype)
    os_ = [torch.randn(1, 1, T, G, D, generator=g).to(dev, dtype) for _ in range(3)]
    dy = torch.randn(1, T, G * D, generator=g).to(dev, dtype)
    leaves = [t.detach().clone().requires_grad_() for t in (gates, *os_)]
    y = fused.gate_mix(*leaves)
    grads = torch.autograd.grad(y, leaves, dy)
    g64 = gates.double().permute(0, 2, 1, 3, 4)  # [1, 1, T, G, 3]
    o64 = [o.double() for o in os_]
    terms = [g64[..., c : c + 1] * o64[c] for c in range(3)]
    y64 = sum(terms).permute(0, 2, 1, 3, 4).reshape(1, T, G * D)
    mag = sum(t.abs() for t in terms).permute(0, 2, 1, 3, 4).reshape(1, T, G * D)
    dy64 = dy.double().view(1, T, 1, G, D).permute(0, 2, 1, 3, 4)
    do64 = [dy64 * g64[..., c : c + 1] for c in range(3)]
    dg64 = torch.stack([(dy64 * o).sum(-1) for o in o64], -1).permute(0, 2, 1, 3, 4)
    dg_mag = torch.stack([(dy64 * o).abs().sum(-1) for o in o64], -1).permute(0, 2, 1, 3, 4)
    checks = [
        ("out", y, y64, u * y64.abs() + e * mag + tiny),
        ("dg", grads[0], dg64, u * dg64.abs() + D * e * dg_mag + tiny),
    ]
    checks += [(f"do{c}", grads[1 + c], do64[c], (u + e) * do64[c].abs() + tiny) for c in range(3)]
    rec = {"kernel": "gate_mix", **meta, "ok": True}
    for part, val, ref, bnd in checks:
        r = bounds.check(val, (ref, bnd))
        rec[part] = _rounded(r)
        rec["ok"] &= r["within_bound"]
    out.append(rec)
    return out


def _module_pair(plan: Plan, seed: int = 0):
    from nsa.attention.nsa import NSAAttention

    m = plan.module
    torch.manual_seed(seed)
    kw = dict(
        dim=m["dim"],
        n_heads=m["n_heads"],
        n_kv_heads=m["n_kv_heads"],
        head_dim=m["head_dim"],
        **plan.geometry,
    )
    tri = NSAAttention(**kw, backend="triton").to(plan.device)
    ref = NSAAttention(**kw, backend="eager").to(plan.device)
    ref.load_state_dict(tri.state_dict())
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    x = torch.randn(m["B"], m["T"], m["dim"], generator=g).to(plan.device)
    dy = torch.randn(m["B"], m["T"], m["dim"], generator=g).to(plan.device)
    return tri, ref, x, dy


def _module_run(mod, x, dy, autocast: bool, device: str) -> dict[str, torch.Tensor]:
    mod.zero_grad(set_to_none=True)
    xl = x.detach().clone().requires_grad_()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        y = mod(xl)
    y.float().backward(dy)
    res = {"y": y.detach().float(), "dx": xl.grad.float()}
    res.update({f"grad.{n}": p.grad.float() for n, p in mod.named_parameters() if p.grad is not None})
    return res


def _module_check(plan: Plan) -> dict:
    """NSAAttention(backend="triton") under bf16 autocast (as the trainer runs it) against eager in
    float32, parameters' gradients included. Bound: its relative error (norm) may not exceed twice
    that of eager under the same bf16 autocast plus 2u: no worse than PyTorch's own bf16 path."""
    tri, ref, x, dy = _module_pair(plan)
    with _no_tf32():
        want = _module_run(ref, x, dy, autocast=False, device=plan.device)
        base = _module_run(ref, x, dy, autocast=True, device=plan.device)
    got = _module_run(tri, x, dy, autocast=True, device=plan.device)
    u = bounds.UNIT_ROUNDOFF[torch.bfloat16]
    rows, ok = {}, True
    for name, w in want.items():
        r_tri, r_eager = (float((a[name] - w).norm() / w.norm().clamp_min(1e-30)) for a in (got, base))
        good = r_tri <= 2 * r_eager + 2 * u and math.isfinite(r_tri)
        rows[name] = {"rel_err_triton": round(r_tri, 6), "rel_err_eager_bf16": round(r_eager, 6), "ok": good}
        ok &= good
    return {"kernel": "NSAAttention", "module": plan.module, "bound": "rel <= 2*eager_bf16 + 2u", "ok": ok,
            "params_checked": sum(n.startswith("grad.") for n in want), "tensors": rows}  # fmt: skip


def numerics_items(plan: Plan) -> list[Item]:
    """Every (G, D, T, dtype) of the plan and the NSAAttention check (right after the kernel shapes
    of its own (G, D) in bf16, so time never cuts it), with their estimated seconds (none on CPU: the
    rehearsal's budget is generous and its costs are not a GPU's)."""
    gpu, m = plan.device != "cpu", plan.module
    own = (m["n_heads"] // m["n_kv_heads"], m["head_dim"], "bf16")
    items, compiled = [], set()
    for dt in plan.dtypes:
        for i, (G, D, T) in enumerate(plan.kernel_shapes):
            est = numerics_estimate((G, D, dt) not in compiled, T) if gpu else 0.0
            compiled.add((G, D, dt))
            items.append(Item(f"G{G} D{D} T{T} {dt}", est, (G, D, T, dt, 10 * i)))
    at = max((k + 1 for k, it in enumerate(items) if (it.spec[0], it.spec[1], it.spec[3]) == own), default=0)
    est = NUMERICS_MODULE_S + (0.0 if own in compiled else NUMERICS_COMPILE_S)
    items.insert(at, Item("NSAAttention", est if gpu else 0.0, "module"))
    return items


def numerics(plan: Plan, suite) -> dict:
    records = []
    items = Items(suite, numerics_items(plan))
    with _bf16_honest(plan):
        for item in items:
            if item.spec == "module":
                records.append(_module_check(plan))
                continue
            G, D, T, dt, seed = item.spec
            records += _attention_kernels(plan, G, D, T, DTYPES[dt], seed=seed)
            if T <= 8192:
                records += _fused_kernels(plan, G, D, T, DTYPES[dt], seed=seed + 5)
    bad = [
        f"{r['kernel']} G{r.get('G')} D{r.get('D')} T{r.get('T')} {r.get('dtype')}"
        for r in records
        if not r["ok"]
    ]
    worst = max(
        (r[p]["max_err_over_bound"] for r in records for p in ("out", "dq", "dk", "dv") if p in r), default=0
    )
    summary = f"{len(records)} checks, {len(bad)} failing, worst error/bound {worst:.2f}"
    if items.skipped:
        summary += f", skipped for time: {', '.join(items.skipped)}"
    return {"ok": not bad, "summary": summary + (f"; failing: {', '.join(bad[:6])}" if bad else ""),
            "failing": bad, "records": records, **items.fields()}  # fmt: skip


# -------------------------------------------------------------------------------- c) determinism
def determinism(plan: Plan, suite) -> dict:
    """Two forward + backward passes of NSAAttention(triton) under bf16 autocast: bitwise equal."""
    with _bf16_honest(plan):
        tri, _, x, dy = _module_pair(plan, seed=3)
        a = _module_run(tri, x, dy, autocast=True, device=plan.device)
        b = _module_run(tri, x, dy, autocast=True, device=plan.device)
        with torch.autocast(plan.device, dtype=torch.bfloat16):
            idx_a, idx_b = tri.selected_blocks(x), tri.selected_blocks(x)
    differ = [n for n in a if not torch.equal(a[n], b[n])]
    if not (torch.equal(idx_a[0], idx_b[0]) and torch.equal(idx_a[1], idx_b[1])):
        differ.append("selection table")
    return {"ok": not differ, "summary": f"{len(a)} tensors (output, dx, {len(a) - 2} parameter grads) "
            + ("bitwise equal" if not differ else f"differ: {', '.join(differ[:5])}"),
            "tensors": len(a), "differing": differ}  # fmt: skip


def _gpu(name):
    def run(plan, suite):
        from nsa.attention.gpusuite import gpu

        return getattr(gpu, name)(plan, suite)

    return run


SECTION_FUNCS = {
    "env": env,
    "numerics": numerics,
    "determinism": determinism,
    "sanitizer": _gpu("sanitizer"),
    "speed": _gpu("speed"),
    "train": _gpu("train"),
}

if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `python -m nsa.attention.gpusuite` (scripts/gpu-suite.sh)")
