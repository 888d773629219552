"""Host (Python/CPU) cost of the NSA triton layer's custom ops per forward+backward, measured without a GPU.

Owns the host-cost measurement of issue 20 (bench/RESULTS.md "Host cost of the NSA layer"). It runs
the triton backend's attention core of one layer (q's RoPE fan-out, the three key RoPEs, the gated
branches node: every custom op NSAAttention's triton forward calls, forward and backward) on CPU
tensors under TRITON_INTERPRET=1 with every kernel launch replaced by a counting no-op
(`InterpretedFunction.run`, as bench/attention_launches.py does): what is left is our wrappers, the
torch.library / autograd dispatch, and the aten allocations and copies the wrappers make. The
projections, the compression MLP and wo are left out (dense pays for them too).

What it cannot see: triton's own launcher (`JITFunction.run`: argument binding, specialization key,
cache lookup, the C launcher's cuLaunchKernel), which runs only with a CUDA driver; the interpreter
replaces it. And the aten ops here run on CPU memory: their time at B*T = 16k (copies, fills) is CPU
work a GPU does asynchronously, so compare the `--B 1 --T 128` row (same launches, no data to speak
of) for the pure host part.

  TRITON_INTERPRET=1 .venv/bin/python bench/host_cost.py                      # M7C, B 8, T 2048, bf16
  TRITON_INTERPRET=1 .venv/bin/python bench/host_cost.py --B 1 --T 128 --profile 25
  TRITON_INTERPRET=1 .venv/bin/python bench/host_cost.py --block nsa,dense:inductor --B 1 --T 64 --dtype fp32

Prints one JSON row: launches fwd / bwd (triton and aten), host microseconds per layer (median of
--reps) and per triton launch, and with --profile N the N largest cumulative cProfile entries.
`--block ATTENTIONS:COMPILE` times whole M7C blocks (width 64) instead, eager or compiled per block
as the trainer compiles them, NSA beside dense in alternating rounds (`block_cost`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import io
import json
import math
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

_REPO = Path(__file__).resolve().parents[1]
M7C = dict(dim=768, n_heads=12, n_kv_heads=2, head_dim=64)
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@contextlib.contextmanager
def no_launch(counts: collections.Counter):
    """Every `kernel[grid](...)` of an interpreted kernel counted (by kernel name) and skipped."""
    from triton.runtime.interpreter import InterpretedFunction

    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            counts[self.fn.__name__] += 1

    InterpretedFunction.run = run
    try:
        yield
    finally:
        InterpretedFunction.run = real


class _AtenCount(torch.utils._python_dispatch.TorchDispatchMode):
    """aten ops reaching the backend (custom ops are entered, so the aten ops inside them count)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in ("aten", "prims"):
            from torch._library.custom_ops import _maybe_get_opdef

            opdef = _maybe_get_opdef(func._name)
            if opdef is not None:
                with self:
                    return opdef._init_fn(*args, **kwargs)
        elif not func.is_view:
            self.n += 1
        return func(*args, **kwargs)


def core_inputs(B: int, T: int, dtype: torch.dtype):
    """The layer's tensors just before its custom ops: q [B, T, Hkv, G, D], the three branches' raw
    keys/values [B, N, Hkv, D] (compressed: N = T/d blocks), the RoPE tables, the gates; leaves that
    require grad, as the projections' outputs would."""
    from nsa.attention.nsa import NSAAttention
    from nsa.attention.rope import rope_tables

    mod = NSAAttention(**M7C, backend="triton")
    Hkv, D, G = M7C["n_kv_heads"], M7C["head_dim"], M7C["n_heads"] // M7C["n_kv_heads"]
    Nc = (T - mod.block_len) // mod.block_stride + 1
    g = torch.Generator().manual_seed(0)

    def leaf(*shape):
        return torch.randn(*shape, generator=g).to(dtype).requires_grad_()

    x = {"xq": leaf(B, T, Hkv, G, D), "kc": leaf(B, Nc, Hkv, D), "vc": leaf(B, Nc, Hkv, D)}
    for n in ("ks", "vs", "kw", "vw"):
        x[n] = leaf(B, T, Hkv, D)
    x["g"] = torch.rand(B, T, Hkv, G, 3, generator=g).to(dtype).requires_grad_()
    cos, sin = rope_tables(T, D, mod.rope_theta, torch.float32, torch.device("cpu"))
    ccos, csin = rope_tables(
        Nc,
        D,
        mod.rope_theta,
        torch.float32,
        torch.device("cpu"),
        step=mod.block_stride,
        offset=mod.block_len - 1,
    )
    return mod, x, (cos, sin, ccos, csin)


def run_core(mod, x: dict, tables, backward: bool = True, autocast: bool = True, dy=None):
    """NSAAttention._branch_inputs' custom ops and forward's gated node, as the module calls them; the
    forward under bf16 autocast and the backward outside it, as the trainer runs them. `dy`: y's
    gradient (made here where None: a fill the timed loops keep out of their time)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = _core_fwd(mod, x, tables)
    if backward:
        y.backward(torch.ones_like(y) if dy is None else dy)
    return y


def _core_fwd(mod, x: dict, tables):
    ops = mod.ops_for(torch.device("cpu"))
    cos, sin, ccos, csin = tables
    to_heads = (0, 2, 1, 3)
    q, q_sel, q_win = ops.rope_q(x["xq"], cos, sin, 3)
    inp = {
        "q": q,
        "q_sel": q_sel,
        "q_win": q_win,
        "kc": ops.rope(x["kc"], ccos, csin, to_heads),
        "vc": x["vc"].permute(to_heads).contiguous(),
        "ks": ops.rope(x["ks"], cos, sin, to_heads),
        "vs": x["vs"].permute(to_heads).contiguous(),
        "kw": ops.rope(x["kw"], cos, sin, to_heads),
        "vw": x["vw"].permute(to_heads).contiguous(),
    }
    geo = (mod.block_len, mod.block_stride, mod.sel_block, mod.n_sel, mod.window)
    y, _, _ = ops.gated(inp, x["g"], *geo, scale=1.0 / math.sqrt(mod.head_dim))
    return y


def dispatch_overhead(B: int, T: int, dtype: torch.dtype, reps: int) -> dict:
    """Microseconds a custom op call costs over its Python body (the same arguments, launches no-op,
    grad off as inside an autograd node or a compiled graph): torch.library's dispatch (the autograd
    kernel, redispatch, the backend wrapper's aliasing check, the dynamo-disable wrapper). Two ops:
    the gate mix (4 tensor arguments) and the window forward (3 tensors and 2 scalars)."""
    from torch._library.custom_ops import _maybe_get_opdef

    # imported: they register the ops
    import nsa.attention.triton.fused
    import nsa.attention.triton.window  # noqa: F401

    Hkv, D, G = M7C["n_kv_heads"], M7C["head_dim"], M7C["n_heads"] // M7C["n_kv_heads"]
    o = torch.randn(B, Hkv, T, G, D).to(dtype)
    g = torch.rand(B, T, Hkv, G, 3).to(dtype)
    k = torch.randn(B, Hkv, T, D).to(dtype)
    calls = {
        "nsa::triton_gate_mix": (g, o, o, o),
        "nsa::triton_window_fwd": (o, k, k, 512, 0.125),
    }
    out = {}
    with no_launch(collections.Counter()), torch.no_grad():
        for name, args in calls.items():
            ns, op_name = name.split("::")
            op = getattr(getattr(torch.ops, ns), op_name).default
            body = _maybe_get_opdef(name)._init_fn
            times = {}
            for what, fn in (("op", op), ("body", body)):
                fn(*args)
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    fn(*args)
                    ts.append((time.perf_counter() - t0) * 1e6)
                times[what] = statistics.median(ts)
            out[name] = {"op_us": round(times["op"], 1), "body_us": round(times["body"], 1)}
    return out


def measure(B: int, T: int, dtype: torch.dtype, reps: int, profile: int = 0) -> dict:
    mod, x, tables = core_inputs(B, T, dtype)
    fwd, bwd = collections.Counter(), collections.Counter()
    with no_launch(fwd):
        for _ in range(2):  # warm: imports, op registration caches, the allocator
            run_core(mod, x, tables)
        fwd.clear()
        aten_f = _AtenCount()
        with aten_f:
            y = run_core(mod, x, tables, backward=False)
    with no_launch(bwd):
        aten_b = _AtenCount()
        with aten_b:
            y.backward(torch.ones_like(y))
    times_f, times_b, times_ng, cpu_fb = [], [], [], []
    dy = torch.ones_like(y)
    with no_launch(collections.Counter()):
        for _ in range(reps):
            for v in x.values():
                v.grad = None
            c0, t0 = time.thread_time(), time.perf_counter()
            y = run_core(mod, x, tables, backward=False)
            t1 = time.perf_counter()
            y.backward(dy)
            c2, t2 = time.thread_time(), time.perf_counter()
            with torch.no_grad():  # the ops alone, no autograd nodes: as a compiled graph calls them
                run_core(mod, x, tables, backward=False)
            t3 = time.perf_counter()
            times_f.append((t1 - t0) * 1e6)
            times_b.append((t2 - t1) * 1e6)
            times_ng.append((t3 - t2) * 1e6)
            cpu_fb.append((c2 - c0) * 1e6)
        prof_rows = (
            _profile(functools.partial(run_core, mod, x, tables, dy=dy), reps, profile) if profile else []
        )
    nf, nb = sum(fwd.values()), sum(bwd.values())
    mf, mb = statistics.median(times_f), statistics.median(times_b)
    row = {
        "measured": "CPU, TRITON_INTERPRET=1, kernel launches no-op",
        "shape": "m7c",
        "B": B,
        "T": T,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "triton_launches": {"fwd": nf, "bwd": nb},
        "aten_ops": {"fwd": aten_f.n, "bwd": aten_b.n},
        "host_us": {"fwd": round(mf), "bwd": round(mb), "total": round(mf + mb)},
        "host_us_min": {"fwd": round(min(times_f)), "bwd": round(min(times_b))},
        # this thread's CPU time (forward + backward): what a shared, loaded machine's wall time
        # adds waits to; the least disturbed figure on a busy VM
        "host_cpu_us": {"median": round(statistics.median(cpu_fb)), "min": round(min(cpu_fb))},
        "fwd_no_grad_us": round(statistics.median(times_ng)),
        "us_per_triton_launch": round((mf + mb) / max(1, nf + nb), 1),
        "kernels_fwd": dict(sorted(fwd.items())),
        "kernels_bwd": dict(sorted(bwd.items())),
        "reps": reps,
    }
    if profile:
        row["profile"] = prof_rows
    row["dispatch"] = dispatch_overhead(B, T, dtype, max(reps, 20))
    return row


def block_cost(
    attentions: list[str],
    compile_backend: str,
    B: int,
    T: int,
    reps: int,
    rounds: int = 3,
    profile: int = 0,
    autocast: bool = True,
) -> dict:
    """Host CPU time of one whole M7C block (norms, attention, MLP) forward + backward, eager or
    compiled per block as the trainer compiles it (`block.compile(backend=...)`), NSA (triton ops,
    launches no-op) and / or dense, built in one process and timed in alternating rounds (the VM's
    load drifts). The trainer's dtypes: fp32 weights, the forward under bf16 autocast, the backward
    outside it (`autocast` False: fp32 throughout). The model width is 64, not 768 (M7C's 12 heads,
    2 KV heads, head_dim 64 kept): the launches and op calls are the same, and at 768 the projections
    and MLP GEMMs alone took ~0.1 s a block on this VM's CPU (bf16 ~6x slower than fp32 there),
    hiding the host cost. At --B 1 --T 64 the aten / inductor kernels that do run on CPU have next to
    no data, so NSA minus dense is the host cost NSA's layer adds (before triton's launcher).
    `python_calls`: Python and C function calls a block step makes (sys.setprofile events), a count
    the machine's load does not change."""
    from nsa.model import Block
    from nsa.train.config import load_config

    built = {}
    counts: collections.Counter = collections.Counter()
    for att in attentions:
        sets = [f"model.attention={att}", "model.nsa.backend=triton", "model.dim=64"]
        cfg = load_config(str(_REPO / "configs" / "m7c_125m.yaml"), sets)
        torch.manual_seed(0)
        block = Block(cfg.model)
        if compile_backend != "none":
            block.compile(backend=compile_backend)
        x = torch.randn(B, T, cfg.model.dim).requires_grad_()
        with no_launch(counts):
            t0 = time.perf_counter()
            for _ in range(2):  # the compile, imports, caches
                _block_step(block, x, autocast)
            warm_s = time.perf_counter() - t0
            counts.clear()
            _block_step(block, x, autocast)
            launches = sum(counts.values())
            calls = _python_calls(lambda b=block, x=x: _block_step(b, x, autocast))
        built[att] = (
            block,
            x,
            {"warm_s": round(warm_s, 1), "triton_launches": launches, "python_calls": calls},
        )
    cpu: dict[str, list[float]] = {a: [] for a in attentions}
    wall: dict[str, list[float]] = {a: [] for a in attentions}
    rows: dict[str, dict] = {}
    with no_launch(counts):
        for _ in range(rounds):
            for att, (block, x, _) in built.items():
                c, w = [], []
                for _ in range(reps):
                    c0, t0 = time.thread_time(), time.perf_counter()
                    _block_step(block, x, autocast)
                    c.append((time.thread_time() - c0) * 1e6)
                    w.append((time.perf_counter() - t0) * 1e6)
                cpu[att].append(statistics.median(c))
                wall[att].append(statistics.median(w))
        for att, (block, x, info) in built.items():
            rows[att] = {
                **info,
                # median over rounds of each round's median, and the range of the round medians
                "host_cpu_us": round(statistics.median(cpu[att])),
                "host_cpu_us_rounds": [round(v) for v in sorted(cpu[att])],
                "wall_us": round(statistics.median(wall[att])),
            }
            if profile:
                rows[att]["profile"] = _profile(
                    lambda b=block, x=x: _block_step(b, x, autocast), reps, profile
                )
    row = {
        "measured": "CPU, TRITON_INTERPRET=1, kernel launches no-op",
        "what": "one M7C block (dim 64) fwd+bwd",
        "compile": compile_backend,
        "dtype": "bf16 autocast" if autocast else "fp32",
        "B": B,
        "T": T,
        "torch": torch.__version__,
        "reps": reps,
        "rounds": rounds,
        "blocks": rows,
    }
    if "nsa" in rows and "dense" in rows:
        row["nsa_minus_dense"] = {
            k: rows["nsa"][k] - rows["dense"][k] for k in ("host_cpu_us", "python_calls", "triton_launches")
        }
    return row


def _python_calls(fn) -> int:
    n = 0

    def count(frame, event, arg):
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def _block_step(block, x, autocast: bool = True) -> None:
    x.grad = None
    for p in block.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = block(x)
    y.float().sum().backward()


def _profile(fn, reps: int, top: int) -> list[dict]:
    """The `top` largest cumulative cProfile entries of `reps` calls of `fn`, per call (`measure`'s
    layer, `block_cost`'s block)."""
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(reps):
        fn()
    pr.disable()
    st = pstats.Stats(pr, stream=io.StringIO())
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():
        rows.append(
            {
                "fn": f"{os.path.relpath(file) if file.startswith('/') else file}:{line}:{name}",
                "calls_per_layer": round(nc / reps, 1),
                "self_us": round(tt / reps * 1e6, 1),
                "cum_us": round(ct / reps * 1e6, 1),
            }
        )
    rows.sort(key=lambda r: -r["cum_us"])
    return rows[:top]


BLOCK_ATTENTIONS = ("nsa", "dense")
BLOCK_COMPILES = ("none", "aot_eager", "inductor")


def block_arg(text: str) -> tuple[list[str], str]:
    """--block's `ATTENTIONS:COMPILE` (`nsa,dense:inductor`; no COMPILE: none) as (attentions, backend);
    ValueError naming the bad part and the choices (a typo once ran to a ConfigError or dynamo's
    InvalidBackend traceback after the imports)."""
    names, _, backend = text.partition(":")
    attentions = names.split(",")
    bad = [a for a in attentions if a not in BLOCK_ATTENTIONS]
    if bad or len(set(attentions)) != len(attentions):
        raise ValueError(
            f"--block {text}: attentions {names!r}, give distinct ones of {', '.join(BLOCK_ATTENTIONS)}, "
            "comma-separated (e.g. nsa,dense:inductor)"
        )
    backend = backend or "none"
    if backend not in BLOCK_COMPILES:
        raise ValueError(f"--block {text}: compile {backend!r}, give one of {', '.join(BLOCK_COMPILES)}")
    return attentions, backend


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--profile", type=int, default=0, help="also list the N largest cumulative cProfile entries"
    )
    ap.add_argument(
        "--block",
        default=None,
        metavar="ATTENTIONS:COMPILE",
        help="whole M7C blocks instead: ATTENTIONS:COMPILE, e.g. nsa,dense:inductor (none|aot_eager|inductor); "
        "--dtype bf16 (autocast) or fp32",
    )
    ap.add_argument("--rounds", type=int, default=3, help="--block: alternating rounds of --reps each")
    args = ap.parse_args()
    if args.block:
        try:
            attentions, backend = block_arg(args.block)
        except ValueError as e:
            ap.error(str(e))
        if args.dtype not in ("bf16", "fp32"):
            ap.error(f"--block runs the trainer's bf16 autocast or fp32, not --dtype {args.dtype}")
        if args.rounds < 1 or args.reps < 1:
            ap.error(f"--block needs --rounds and --reps >= 1 (got {args.rounds}, {args.reps})")
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("bench/host_cost.py: the triton ops take CPU tensors only under TRITON_INTERPRET=1")
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as nsa-train does
    if args.block:
        row = block_cost(
            attentions, backend, args.B, args.T, args.reps, args.rounds, args.profile,
            args.dtype == "bf16",
        )  # fmt: skip
        print(json.dumps(row), flush=True)
        return
    print(json.dumps(measure(args.B, args.T, _DTYPES[args.dtype], args.reps, args.profile)), flush=True)


if __name__ == "__main__":
    main()
