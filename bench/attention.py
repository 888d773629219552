"""Speed and memory of NSAAttention vs DenseAttention, side by side, printed as JSON rows.

Owns the attention benchmark of bench/RESULTS.md ("Attention"); it measures, it asserts nothing.
Each (backend, T) runs in a fresh subprocess so peak memory is per configuration. Rows: one per
(backend, T) with ms_fwd (forward with autograd on), ms_fwd_bwd (forward + backward of y.sum()),
peak_mem_mb (CPU: peak RSS growth over the first run at size T; CUDA: max_memory_allocated), then one
"ratio" row per T and baseline (nsa / dense, flash, flash_gqa) and "growth" rows (time(2T) / time(T)). Times are the median of
`--repeat` steady-state runs (`--repeat-long` above T=8192) after the first run at size T.

`--allocator` picks the malloc of both backends' processes (preloaded). The default, `auto`, is what
nsa-train does on a CPU run (NSA_MALLOC=auto, docs/training.md): tcmalloc when it is installed,
else glibc; on CUDA, glibc. glibc's malloc hands every block above 32 MB back to the kernel on free,
so each step's large activations are page-faulted and zeroed again: ~3 s of a 13.6 s NSA step at
T=32k on the 2-core dev machine (bench/RESULTS.md). Every row names the allocator it ran under.

  .venv/bin/python bench/attention.py --quick                 # T 1024, 2048: a smoke run, ~1 min
  .venv/bin/python bench/attention.py                         # CPU: T 1024..32768 (long: minutes)
  .venv/bin/python bench/attention.py --T 8192 16384 --threads 2
  .venv/bin/python bench/attention.py --allocator system      # both backends under glibc's malloc
  python bench/attention.py --device cuda                     # GPU, bf16: T 2048..65536, nsa (triton) vs
                                                              # dense layer, bare flash with and without GQA
  .venv/bin/python bench/attention.py --model                 # no GPU: the calibrated cost model (below)
  .venv/bin/python bench/attention_fit.py bench/gpu/*-speed.json  # re-fit its prices to a GPU suite run

Backends: `nsa` (NSAAttention, `--nsa-backend` auto|eager|triton), `dense` (DenseAttention: the layer,
K/V expanded to all heads), `flash` / `flash_gqa` (the attention core alone, F.scaled_dot_product_attention
causal on [B, H, T, D], K/V expanded / enable_gqa=True; on CUDA pinned to the flash backend). `--model`
(bench/attention_model.py: estimates, not measurements; its Hopper prices of our kernels fitted on the
H100 and H200 GPU runs, bench/attention_fit.py) prints JSON lines: "calibration" rows (the model
against published NSA / FlashAttention-2 figures, relative error), "prediction" rows (our triton
backend / FlashAttention-2 as PyTorch SDPA's flash backend, fwd, bwd, fwd+bwd; A100, H100, H200; shapes
m7c and paper), "miss" rows (a prediction over its target, with its largest kernel), "what_if" rows
(the same ratio for other builds: earlier ones, one switch changed, restructures not built), "bound"
rows (the ideal NSA any structure of the model's kernel kinds could reach, and the sparse backward
efficiency the targets need), "budget_ms" rows (per branch), "kernel_model" rows (FLOPs issued incl. padding, DRAM and L2 bytes, programs, waves),
and "memory" rows (bytes one M7C layer saves for backward, traced on the meta device, and the
largest scratch an op holds) at T = 8k, 32k, 64k, 128k.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from nsa.malloc import PACKAGE as TCMALLOC_PACKAGE
from nsa.malloc import TCMALLOC_LIBS, find_library, find_tcmalloc, gpu_present, loaded_allocator, plan

CPU_T = [1024, 2048, 4096, 8192, 16384, 32768]
ALLOCATORS = {"tcmalloc": TCMALLOC_LIBS, "jemalloc": ("libjemalloc.so.2",)}
ALLOCATOR_PACKAGES = {"tcmalloc": TCMALLOC_PACKAGE, "jemalloc": "libjemalloc2"}
GPU_T = [2048, 4096, 8192, 16384, 32768, 65536]
MODEL_T = [8192, 16384, 32768, 65536]  # the targets: 8k, 32k, 64k
MEMORY_T = [8192, 32768, 65536, 131072]


def _sdpa(q, k, v, gqa: bool):
    import torch.nn.functional as F

    if q.device.type != "cuda":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


class _FlashCore:
    """The bare attention core: x [B, T, H*D] as queries, K/V from a fixed projection, causal SDPA."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, gqa: bool, dev, dtype) -> None:
        import torch

        self.H, self.Hkv, self.D, self.gqa = heads, kv_heads, head_dim, gqa
        self.kv = torch.randn(2, kv_heads, 1, head_dim, device=dev, dtype=dtype)

    def __call__(self, x):
        B, T, _ = x.shape
        q = x.view(B, T, self.H, self.D).transpose(1, 2)
        k = (x[..., : self.D].unsqueeze(1) * self.kv[0]).expand(B, self.Hkv, T, self.D)
        v = (x[..., : self.D].unsqueeze(1) * self.kv[1]).expand(B, self.Hkv, T, self.D)
        if not self.gqa:
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        return _sdpa(q, k, v, self.gqa).transpose(1, 2).reshape(B, T, self.H * self.D)

    def to(self, *args):
        return self

    def zero_grad(self, set_to_none=True):
        pass


def saved_bytes(T: int, B: int = 1, dim: int = 768, H: int = 12, Hkv: int = 2, D: int = 64) -> dict:
    """Bytes one NSA layer (triton backend, bf16) saves for its backward at length T, measured on the
    meta device (no memory is allocated): every tensor autograd saves, deduplicated by storage,
    without the layer's input and parameters (they exist without the layer). RoPE's cos/sin tables
    are cached and shared by all layers; they are reported apart."""
    import torch

    from nsa.attention import NSAAttention
    from nsa.attention import nsa as nsa_module

    attn = NSAAttention(dim, H, Hkv, D).to("meta", torch.bfloat16)
    # The triton ops have meta (fake) kernels; resolve_backend refuses triton off CUDA, so the
    # instance's op table for the meta device is the triton one (ops are bound at construction:
    # overriding resolved_backend afterwards would trace the eager path instead).
    attn._dispatch["meta"] = nsa_module._ops("triton")
    x = torch.randn(B, T, dim, device="meta", dtype=torch.bfloat16, requires_grad=True)
    skip = {id(p) for p in attn.parameters()} | {id(x)}
    seen: dict[int, int] = {}
    shared = 0

    def pack(t):
        nonlocal shared
        base = t._base if t._base is not None else t
        if id(base) in skip or id(t) in skip:
            return t
        if t.dtype == torch.float32 and t.dim() == 2 and t.shape[0] == T and t.shape[1] == D:
            shared += base.untyped_storage().nbytes() if id(base) not in seen else 0
        seen[id(base)] = base.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(x)
    return {"saved_bytes": sum(seen.values()) - shared, "rope_tables_bytes": shared}


def model_output(Ts: list[int]) -> list[dict]:
    """Every row `--model` prints: calibration, predictions, per-kernel costs, branch budgets, memory."""
    import attention_model as m  # beside this script (its directory is on sys.path when run)

    rows: list[dict] = [*m.calibration_rows(), *m.prediction_rows(Ts), *m.miss_rows(Ts), *m.what_if_rows(Ts)]
    rows += m.bound_rows(Ts) + m.a100_rows(Ts)
    for gpu in m.PREDICTED_GPUS:
        for shape in ("m7c", "paper"):
            for T in Ts:
                budget = m.branch_budget(T, m.SHAPES[shape], m.GPUS[gpu])
                rows.append({"budget_ms": "per_branch", "gpu": gpu, "shape": shape, "T": T, **budget})
    rows += m.kernel_rows(Ts, ("m7c", "paper"))
    for T in MEMORY_T:
        s = saved_bytes(T)
        rows.append({
            "memory": "per_layer", "shape": "m7c", "T": T, "saved_bytes": s["saved_bytes"],
            "peak_transient_bytes": m.transient_bytes(T, m.SHAPES["m7c"]),
        })  # fmt: skip
    return rows


def _one(args: argparse.Namespace) -> dict:
    import torch

    from nsa.attention import DenseAttention, NSAAttention

    if args.allocator != "system" and loaded_allocator() != args.allocator:
        raise RuntimeError(
            f"--allocator {args.allocator}: {' or '.join(ALLOCATORS[args.allocator])} is not loaded"
        )
    torch.manual_seed(0)
    T = args.T[0]
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    dim = args.heads * args.head_dim
    if args.backend == "nsa":
        mod = NSAAttention(
            dim, args.heads, args.kv_heads, args.head_dim, 32, 16, 64, 16, 512, backend=args.nsa_backend
        )
    elif args.backend in ("flash", "flash_gqa"):
        mod = _FlashCore(args.heads, args.kv_heads, args.head_dim, args.backend == "flash_gqa", dev, dtype)
    else:
        mod = DenseAttention(dim, args.heads, args.kv_heads, args.head_dim)
    mod = mod.to(dev, dtype)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step(T: int) -> tuple[float, float]:
        x = torch.randn(args.B, T, dim, device=dev, dtype=dtype, requires_grad=True)
        sync()
        t0 = time.perf_counter()
        y = mod(x)
        sync()
        t1 = time.perf_counter()
        y.float().sum().backward()
        sync()
        t2 = time.perf_counter()
        mod.zero_grad(set_to_none=True)
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3

    step(min(T, 1024))  # warm kernels and allocator at a cheap size
    # Peak memory comes from the first run at size T (freed memory stays in RSS, so a later run at
    # the same size would show no growth); times come from the runs after it.
    rss0 = _rss_mb()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step(T)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0
    runs = [step(T) for _ in range(args.repeat if T <= 8192 else args.repeat_long)]
    return {
        "backend": args.backend + (f" ({mod.resolved_backend(dev)})" if args.backend == "nsa" else ""),
        "device": args.device,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "dtype": args.dtype,
        "T": T,
        "B": args.B,
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "threads": torch.get_num_threads(),
        "ms_fwd": round(statistics.median(r[0] for r in runs), 1),
        "ms_fwd_bwd": round(statistics.median(r[1] for r in runs), 1),
        "peak_mem_mb": round(max(peak, 0.0), 1),
        "repeats": len(runs),
        "allocator": args.allocator,
        "load_avg_1m": float(open("/proc/loadavg").read().split()[0]),
    }


def _find_allocator(name: str) -> str:
    """Absolute path of the allocator's shared library, or exit 2 naming the package to install."""
    path = find_library(ALLOCATORS[name])
    if path:
        return path
    print(
        f"bench/attention.py: --allocator {name}: {' or '.join(ALLOCATORS[name])} not found; "
        f"install it (Debian: apt-get install -y {ALLOCATOR_PACKAGES[name]}) or use --allocator system",
        file=sys.stderr,
    )
    sys.exit(2)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", help="sequence lengths (default: CPU 1k..32k, GPU ..64k)")
    ap.add_argument("--quick", action="store_true", help="T = 1024 2048 only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--dtype", help="float32 | bfloat16 | float16 (default: float32 on CPU, bfloat16 on CUDA)"
    )
    ap.add_argument("--nsa-backend", default="auto", choices=["auto", "eager", "triton"])
    ap.add_argument(
        "--model",
        action="store_true",
        help="print the calibrated cost model (A100/H100/H200, shapes m7c and paper; no GPU needed) and exit; "
        "--T picks its lengths, the other shape options do not apply",
    )
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per config for T <= 8192 (median)")
    ap.add_argument("--repeat-long", type=int, default=2, help="timed runs per config for T > 8192 (median)")
    ap.add_argument(
        "--allocator",
        default="auto",
        choices=["auto", "system", *ALLOCATORS],
        help="malloc of the measured processes (preloaded; Debian packages: "
        + ", ".join(f"{k}: {v}" for k, v in ALLOCATOR_PACKAGES.items())
        + "); auto: as nsa-train, tcmalloc on CPU when installed, else system",
    )
    ap.add_argument("--backends", nargs="+", choices=["nsa", "dense", "flash", "flash_gqa"])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.backends = args.backends or (["nsa", "dense", "flash", "flash_gqa"] if cuda else ["nsa", "dense"])
    if args.model:
        Ts = args.T or ([8192] if args.quick else MODEL_T)
        for row in model_output(Ts):
            print(json.dumps(row), flush=True)
        return
    if args.one:
        print(json.dumps(_one(args)), flush=True)
        return
    if args.allocator == "auto":  # exactly nsa-train's decision for NSA_MALLOC=auto
        device = "cuda" if args.device.startswith("cuda") else "cpu"
        chosen = plan("auto", device, gpu_present=gpu_present(), lib=find_tcmalloc())
        args.allocator = "tcmalloc" if chosen.lib else "system"
    Ts = args.T or ([1024, 2048] if args.quick else (GPU_T if cuda else CPU_T))
    results: dict[tuple[str, int], dict] = {}
    passthrough = [
        *("--device", args.device, "--dtype", args.dtype, "--B", str(args.B), "--heads", str(args.heads)),
        *("--nsa-backend", args.nsa_backend),
        *("--kv-heads", str(args.kv_heads), "--head-dim", str(args.head_dim), "--threads", str(args.threads)),
        *(
            "--repeat",
            str(args.repeat),
            "--repeat-long",
            str(args.repeat_long),
            "--allocator",
            args.allocator,
        ),
    ]
    env = dict(os.environ)
    if args.allocator != "system":
        lib = _find_allocator(args.allocator)
        env["LD_PRELOAD"] = " ".join(filter(None, [lib, env.get("LD_PRELOAD", "")]))
    for T in Ts:
        for backend in args.backends:
            cmd = [sys.executable, __file__, "--one", "--backend", backend, "--T", str(T), *passthrough]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                row = {"backend": backend, "T": T, "error": proc.stderr.strip().splitlines()[-1:]}
            else:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                results[(backend, T)] = row
            print(json.dumps(row), flush=True)
        for other in ("dense", "flash", "flash_gqa"):
            if ("nsa", T) in results and (other, T) in results:
                n, d = results[("nsa", T)], results[(other, T)]
                ratio = {"ratio": f"nsa/{other}", "T": T, "fwd": round(n["ms_fwd"] / d["ms_fwd"], 3)}
                ratio["fwd_bwd"] = round(n["ms_fwd_bwd"] / d["ms_fwd_bwd"], 3)
                print(json.dumps(ratio), flush=True)
    for backend in args.backends:
        for T in Ts:
            if (backend, T) in results and (backend, 2 * T) in results:
                a, b = results[(backend, T)], results[(backend, 2 * T)]
                growth = round(b["ms_fwd_bwd"] / a["ms_fwd_bwd"], 2)
                print(
                    json.dumps({"growth": backend, "from_T": T, "to_T": 2 * T, "fwd_bwd": growth}), flush=True
                )


if __name__ == "__main__":
    main()
