"""`python -m nsa.attention.gpucheck`: compile every Triton kernel of the NSA backend for A100 and H100, no GPU.

Owns the ahead-of-time check CI runs: for each config (default configs/m7c_125m.yaml and
configs/long_context.yaml, read by the trainer's own config loader) it builds the layer's `GpuShape`,
asks each kernel module (`nsa.attention.triton.{selected,compressed,window,fused}`) for the
`KernelSpec`s it would launch on that arch (`gpucheck_specs(shape, arch)`), compiles them with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))` (pointer arguments marked 16-byte
aligned, as the JIT specialises them for torch allocations), reads registers and spills from the
`ptxas -v` log of triton's own cubin step (TRITON_DUMP_PTXAS_LOG: the flags that installed triton
really uses), and prints one JSON line per kernel x arch x config. Exit 1
when a kernel fails to compile, spills, or needs more shared memory than a block may opt into
(A100: 166,912 bytes = 163 KB; H100: 232,448 bytes = 227 KB: cudaDevAttrMaxSharedMemoryPerBlockOptin
of those GPUs); exit 2 on bad input. It must not run the kernels, and must not see interpreted ones:
under TRITON_INTERPRET=1 it re-executes itself without the variable. Nothing is cached in the repo
(triton's own cache lives in a temporary directory unless TRITON_CACHE_DIR is set).

    python -m nsa.attention.gpucheck                       # both configs, sm_80 and sm_90
    python -m nsa.attention.gpucheck --arch 90 --config configs/m7c_125m.yaml
    python -m nsa.attention.gpucheck --grid                # + every (G, D) of GRID at M7C's geometry
    python -m nsa.attention.gpucheck --shape 16x128 --shape 1x96   # + chosen (G, D) points only
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from nsa.attention.triton.spec import GpuShape, KernelSpec

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIGS = ("configs/m7c_125m.yaml", "configs/long_context.yaml")
MODULES = tuple(f"nsa.attention.triton.{m}" for m in ("selected", "compressed", "window", "fused"))
# Largest dynamic shared memory one block may opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SMEM_LIMIT = {80: 166_912, 90: 232_448}
GPU_NAME = {80: "A100 (sm_80)", 90: "H100 (sm_90a)"}
_DTYPE = {"bf16": "bf16", "auto": "bf16", "fp32": "fp32"}  # train.dtype -> activations on CUDA
# (heads per KV head, head_dim) every release must compile cleanly: the configs' and the GPU suite's
# shapes and what docs/attention.md promises (any head_dim the config accepts is padded to these).
GRID: tuple[tuple[int, int], ...] = tuple((g, d) for g in (1, 2, 6, 16) for d in (64, 96, 128))


def shape_from_config(path: str | Path) -> GpuShape:
    """The NSA layer geometry of a training config, through the trainer's loader (ConfigError if bad)."""
    from nsa.train.config import load_config

    cfg = load_config(path)
    m, n = cfg.model, cfg.model.nsa
    return GpuShape(
        name=Path(path).stem,
        head_dim=m.head_dim,
        group=m.n_heads // m.n_kv_heads,
        block_len=n.block_len,
        block_stride=n.block_stride,
        sel_block=n.sel_block,
        n_sel=n.n_sel,
        window=n.window,
        compression=n.compression,
        dtype=_DTYPE[cfg.train.dtype],
    )


def grid_shapes(
    points: list[tuple[int, int]], base: str | Path = REPO / DEFAULT_CONFIGS[0]
) -> list[GpuShape]:
    """`base`'s layer geometry with (group, head_dim) replaced by each point, named "G{g}xD{d}"."""
    b = shape_from_config(base)
    return [replace(b, name=f"G{g}xD{d}", group=g, head_dim=d) for g, d in points]


def parse_point(text: str) -> tuple[int, int]:
    """(G, D) from "GxD", e.g. "16x128" (the argparse type of --shape)."""
    try:
        g, d = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected GxD, e.g. 16x128") from None
    if g < 1 or d < 16 or d % 2:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: G >= 1 and an even D >= 16")
    return g, d


def _ptxas_report(ptx: str, arch: int) -> dict[str, int]:
    """Registers, spill bytes and static shared memory from running the wheel's `ptxas -v` on the PTX
    (the fallback when triton printed no ptxas log)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        cmd = [
            get_ptxas(arch).path,
            "-v",
            "--regAllocOptLevel=2",
            f"--gpu-name={sm_arch_from_capability(arch)}",
        ]
        proc = subprocess.run([*cmd, str(src), "-o", str(Path(d) / "k.o")], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed: {proc.stderr.strip()[-2000:]}")
    return _parse_ptxas(proc.stderr + proc.stdout)


def _parse_ptxas(log: str) -> dict[str, int]:
    """Registers, spill bytes and static shared memory from a `ptxas -v` log."""

    def num(pattern: str) -> int:
        found = re.findall(pattern, log)
        return max((int(x) for x in found), default=0)

    return {
        "registers": num(r"Used (\d+) registers"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
        "static_smem": num(r"(\d+) bytes smem"),
    }


def compile_spec(spec: KernelSpec, arch: int, **options):
    """Compile one spec for sm_`arch` with no GPU, as its launcher would (`options`: more compile
    options, e.g. a launcher's maxnreg): (the compiled kernel, its ptxas report: registers, spills,
    static shared memory). Raises what triton raises. The bench's SASS counters (bench/select_sass.py,
    bench/keys_proxy.py) compile through it too, so they count what gpucheck checks."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # The JIT specialises every 16-byte-aligned pointer argument (all torch allocations) as divisible
    # by 16 at launch; compile that same specialisation.
    aligned = {
        (i,): [["tt.divisibility", 16]]
        for i, name in enumerate(spec.fn.arg_names)
        if str(spec.signature.get(name, "")).startswith("*")
    }
    src = ASTSource(
        fn=spec.fn, signature=dict(spec.signature), constexprs=dict(spec.constexprs), attrs=aligned
    )
    opts = {"num_warps": spec.num_warps, "num_stages": spec.num_stages, **options}
    # Triton runs ptxas -v itself to build the cubin; with TRITON_DUMP_PTXAS_LOG (set by run() and the
    # bench counters) it prints that log: the registers of the exact ptxas flags this triton uses (3.9
    # adds --regAllocOptLevel=2, 3.6 does not), and no second ptxas run. A cached kernel prints none:
    # then ptxas runs once more on its PTX.
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=opts)
    rep = _parse_ptxas(log.getvalue()) if "Used " in log.getvalue() else None
    return k, rep or _ptxas_report(k.asm["ptx"], arch)


def check_spec(spec: KernelSpec, arch: int) -> dict:
    """Compile one spec for `arch`; the JSON record (ok false with `error` when it fails or breaks a limit)."""
    import triton

    rec: dict = {"kernel": spec.name, "arch": arch, "gpu": GPU_NAME.get(arch, f"sm_{arch}")}
    rec.update(num_warps=spec.num_warps, num_stages=spec.num_stages)
    if spec.maxnreg:
        rec["maxnreg"] = spec.maxnreg
    rec["constexprs"] = {k: v for k, v in spec.constexprs.items() if isinstance(v, int | float | str | bool)}
    if not isinstance(spec.fn, triton.runtime.jit.JITFunction):
        rec.update(ok=False, error=f"{spec.name}.fn is {type(spec.fn).__name__}, not a @triton.jit function")
        return rec
    t0 = time.perf_counter()
    try:
        # under the launcher's register cap: the registers and spills of what runs (a cap can spill)
        k, rep = compile_spec(spec, arch, **({"maxnreg": spec.maxnreg} if spec.maxnreg else {}))
    except Exception as e:  # a compile failure is a result to report, not a crash of the check
        rec.update(ok=False, error=f"{type(e).__name__}: {str(e).strip()[:1500]}")
        return rec
    smem = int(k.metadata.shared) + rep["static_smem"]
    rec.update(smem_bytes=smem, smem_limit=SMEM_LIMIT.get(arch), **rep)
    rec["compile_s"] = round(time.perf_counter() - t0, 2)
    problems = []
    if rep["spill_stores"] or rep["spill_loads"]:
        problems.append(f"spills ({rep['spill_stores']} B stores, {rep['spill_loads']} B loads)")
    if arch in SMEM_LIMIT and smem > SMEM_LIMIT[arch]:
        problems.append(f"shared memory {smem} B > {SMEM_LIMIT[arch]} B per block on {GPU_NAME[arch]}")
    rec["ok"] = not problems
    if problems:
        rec["error"] = "; ".join(problems)
    return rec


def _key(spec: KernelSpec, arch: int) -> tuple:
    return (spec.fn, arch, tuple(sorted(spec.signature.items())), repr(sorted(spec.constexprs.items())),
            spec.num_warps, spec.num_stages, spec.maxnreg)  # fmt: skip


_JOBS: list[tuple[KernelSpec, int]] = []  # read by forked workers (JITFunctions do not pickle)


def _check_job(i: int) -> dict:
    return check_spec(*_JOBS[i])


def _compile_all(jobs: dict[tuple, tuple[KernelSpec, int]], n: int) -> dict[tuple, dict]:
    """check_spec of every job, in `n` forked worker processes (compilation is CPU-bound, one core each)."""
    keys = list(jobs)
    _JOBS[:] = [jobs[k] for k in keys]
    if n <= 1 or len(keys) <= 1:
        return {k: _check_job(i) for i, k in enumerate(keys)}
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(min(n, len(keys))) as pool:
        return dict(zip(keys, pool.map(_check_job, range(len(keys)), chunksize=1), strict=True))


def run(
    configs: list[str],
    archs: list[int],
    modules: list[str],
    out=sys.stdout,
    jobs_n: int = 1,
    points: list[tuple[int, int]] = (),
) -> int:
    """Print the records; 0 when every kernel compiled within limits, 1 otherwise, 2 on bad input.

    `points` adds one shape per (G, D) at the first config's geometry (`grid_shapes`)."""
    from nsa.attention import triton as pkg

    if pkg.interpreting():
        print(
            "gpucheck: TRITON_INTERPRET is set, so the kernel modules would build interpreted functions "
            "that cannot be compiled. Fix: run `python -m nsa.attention.gpucheck` without TRITON_INTERPRET "
            "(as a program it re-executes itself without it).",
            file=sys.stderr,
        )
        return 2
    try:
        shapes = [shape_from_config(c) for c in configs]
        if points:
            shapes += grid_shapes(list(points), configs[0] if configs else REPO / DEFAULT_CONFIGS[0])
    except ValueError as e:  # ConfigError names file, key and fix
        print(f"gpucheck: {e}", file=sys.stderr)
        return 2
    try:
        mods = [importlib.import_module(m) for m in modules]
    except ImportError as e:
        print(f"gpucheck: cannot import a kernel module: {e}", file=sys.stderr)
        return 2
    if not os.environ.get("TRITON_CACHE_DIR"):  # compile for real every time; keep nothing around
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="nsa-gpucheck-")
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # read by triton at each compile (check_spec)
    rows: list[tuple[str, str, tuple | None, dict | None]] = []  # (config, module, job key, failure record)
    jobs: dict[tuple, tuple[KernelSpec, int]] = {}
    for shape in shapes:
        for arch in archs:
            for mod in mods:
                name = mod.__name__.rsplit(".", 1)[-1]
                try:
                    specs = mod.gpucheck_specs(shape, arch)
                except Exception as e:
                    rows.append(
                        (shape.name, name, None, {"arch": arch, "ok": False, "error": f"gpucheck_specs: {e}"})
                    )
                    continue
                for spec in specs:
                    key = _key(spec, arch)  # configs with the same layer geometry share their kernels
                    jobs.setdefault(key, (spec, arch))
                    rows.append((shape.name, name, key, None))
    done = _compile_all(jobs, jobs_n)
    failed = 0
    for config, name, key, failure in rows:
        rec = {"config": config, "module": name, **(failure if key is None else done[key])}
        failed += not rec["ok"]
        print(json.dumps(rec), file=out, flush=True)
    print(
        f"gpucheck: {len(done)} distinct compilations, {failed} failing record(s) of {len(rows)}",
        file=sys.stderr,
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nsa.attention.gpucheck", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--config", action="append", help="training config(s) (default: the M7C and long_context configs)"
    )
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90], choices=sorted(SMEM_LIMIT))
    ap.add_argument(
        "--module",
        action="append",
        help="kernel module(s) exposing gpucheck_specs (default: the four of nsa.attention.triton)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="parallel compilations (default: cores, max 4)",
    )
    ap.add_argument("--grid", action="store_true", help="also every (G, D) of GRID: G 1/2/6/16 x D 64/96/128")
    ap.add_argument(
        "--shape", action="append", type=parse_point, default=[], metavar="GxD",
        help="also this (G, D) at the first config's geometry (repeatable), e.g. 16x128",
    )  # fmt: skip
    args = ap.parse_args(argv)
    configs = args.config or [str(REPO / c) for c in DEFAULT_CONFIGS]
    points = list(dict.fromkeys([*(GRID if args.grid else ()), *args.shape]))
    return run(configs, args.arch, args.module or list(MODULES), jobs_n=args.jobs, points=points)


if __name__ == "__main__":
    from nsa.attention import triton as _pkg

    if _pkg.interpreting():  # nothing imported a kernel module yet: start over without the variable
        print("gpucheck: TRITON_INTERPRET is set; re-executing without it", file=sys.stderr, flush=True)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        os.execve(sys.executable, [sys.executable, "-m", "nsa.attention.gpucheck", *sys.argv[1:]], env)
    sys.exit(main())
