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
  .venv/bin/python bench/attention.py --model                 # no GPU: roofline estimates, A100 and H100

Backends: `nsa` (NSAAttention, `--nsa-backend` auto|eager|triton), `dense` (DenseAttention: the layer,
K/V expanded to all heads), `flash` / `flash_gqa` (the attention core alone, F.scaled_dot_product_attention
causal on [B, H, T, D], K/V expanded / enable_gqa=True; on CUDA pinned to the flash backend). `--model`
prints, per kernel of the triton backend and for FlashAttention-2 at the same shape, FLOPs, compulsory
bytes and the roofline time max(FLOPs/peak, bytes/bandwidth): estimates, not measurements.
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
# Peak dense bf16 tensor-core FLOP/s and memory bandwidth (vendor datasheets).
GPUS = {
    "A100-SXM4-80GB": (312e12, 2.039e12),
    "A100-40GB": (312e12, 1.555e12),
    "H100-SXM5": (989e12, 3.35e12),
}


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


def model_rows(Ts: list[int], B: int, H: int, Hkv: int, D: int, bl=32, d=16, lp=64, n=16, w=512, nbytes=2):
    """Roofline estimates of the triton backend's kernels and of FlashAttention-2, fwd and fwd+bwd.

    FLOPs count the matmuls only (2 per multiply-add; backward = 2.5x forward: S is recomputed, then
    dV, dP, dQ, dK), over the keys each query really attends (causal halves for the prefix kernels).
    Bytes are compulsory traffic: every input read once and every output written once (tiles re-read
    from L2 are free in this model), activations in bf16, statistics in fp32.
    """
    rows = []
    for T in Ts:
        nc = max(0, (T - bl) // d + 1)
        act = B * T * H * D * nbytes  # one [B, T, H, D] activation
        kvb = B * T * Hkv * D * nbytes
        sel_keys = min(T, n * lp)
        win_keys = min(T, w)
        kernels = {
            # compressed attention + Eq. 9 scores + top-n: q, kc, vc in; o, idx (int32 x n), lse out
            "compressed": (
                4 * B * H * T * (nc / 2) * D,
                act * 2 + 2 * B * nc * Hkv * D * nbytes + B * Hkv * T * n * 4,
            ),
            "selected": (
                4 * B * H * T * sel_keys * D,
                act * 2 + 2 * kvb + B * Hkv * T * n * 4 + B * H * T * 4,
            ),
            "window": (4 * B * H * T * win_keys * D, act * 2 + 2 * kvb + B * H * T * 4),
            "rope": (0, 2 * (act + 3 * kvb)),
            "gate_mix": (0, 3 * act + act + B * T * H * 3 * nbytes),
        }
        flash = {
            "flash2_gqa": (4 * B * H * T * (T / 2) * D, act * 2 + 2 * kvb + B * H * T * 4),
            "flash2_expanded": (4 * B * H * T * (T / 2) * D, act * 4 + B * H * T * 4),
        }
        for name, (fl, by) in {**kernels, **flash}.items():
            row = {"model": "roofline", "T": T, "B": B, "kernel": name, "gflop_fwd": round(fl / 1e9, 2)}
            row["gflop_fwd_bwd"] = round(3.5 * fl / 1e9, 2)
            # backward reads q, k, v, o, dO and lse, writes dq, dk, dv: ~2.5x the forward's bytes
            row["mb_fwd"], row["mb_fwd_bwd"] = round(by / 1e6, 1), round(3.5 * by / 1e6, 1)
            for gpu, (peak, bw) in GPUS.items():
                row[f"ms_fwd_{gpu}"] = round(max(fl / peak, by / bw) * 1e3, 4)
                row[f"ms_fwd_bwd_{gpu}"] = round(max(3.5 * fl / peak, 3.5 * by / bw) * 1e3, 4)
            rows.append(row)
        for gpu in GPUS:
            nsa = sum(r[f"ms_fwd_bwd_{gpu}"] for r in rows if r["T"] == T and r.get("kernel") in kernels)
            fa = next(r[f"ms_fwd_bwd_{gpu}"] for r in rows if r["T"] == T and r.get("kernel") == "flash2_gqa")
            rows.append(
                {"model": "roofline", "T": T, "gpu": gpu, "nsa_ms_fwd_bwd": round(nsa, 4),
                 "flash2_ms_fwd_bwd": round(fa, 4), "ratio_nsa_over_flash2": round(nsa / fa, 3)}
            )  # fmt: skip
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
    ap.add_argument("--model", action="store_true", help="print roofline estimates (no GPU needed) and exit")
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
        Ts = args.T or ([1024, 2048] if args.quick else GPU_T)
        for row in model_rows(Ts, args.B, args.heads, args.kv_heads, args.head_dim):
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
