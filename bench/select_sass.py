"""SASS of the selection kernel `_cmp_select` (and `_cmp_select_v0`) per key tile, no GPU.

Owns the GPU-free evidence behind docs/attention.md's selection paragraph: it compiles the selection
kernel as `compressed.gpucheck_specs` would launch it (or under `--set KEY=VALUE` overrides of
`compressed._config`), disassembles the cubin with the triton wheel's `nvdisasm`, finds the key-tile
loop (the backward branch with the widest span) and counts its SASS instructions by class: all,
shuffles (cross-lane reductions), barriers and shared-memory loads/stores (layout conversions: the
latency of a latency-bound kernel), 64-bit integer compares. Registers and spills from the same
compile's `ptxas -v`. Static counts: an instruction inside a data-dependent branch counts once,
whether or not it runs. Prints one JSON object per line; it asserts nothing.

  .venv/bin/python bench/select_sass.py                              # M7C and paper, sm_80 and sm_90
  .venv/bin/python bench/select_sass.py --shape 6x64 --arch 90 --set select_v0=1
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

SHAPES = {"m7c": (6, 64), "paper": (16, 128)}  # (G, D); l 32, d 16, l' 64, n 16 (configs/m7c_125m.yaml)


def _disasm(cubin: bytes, arch: int) -> list[str]:
    from triton.backends.nvidia.compiler import get_ptxas

    nvdisasm = Path(get_ptxas(arch).path).with_name("nvdisasm")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        out = subprocess.run([str(nvdisasm), "-c", str(p)], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def count(lines: list[str]) -> dict:
    """Instruction counts of the whole kernel and of its widest loop (a backward branch)."""
    insns = []  # (opcode, operands)
    label_at = {}  # label -> index of the next instruction
    for ln in lines:
        lab = re.match(r"\s*(\.L\w+):", ln)
        if lab:
            label_at[lab.group(1)] = len(insns)
        m = _INSN.search(ln)
        if m:
            insns.append((m.group(3), m.group(4)))
    loop, span = (0, len(insns)), -1
    for i, (op, rest) in enumerate(insns):
        t = re.search(r"\((\.L\w+)\)", rest)
        if op.startswith("BRA") and t and label_at.get(t.group(1), i) < i:
            lo = label_at[t.group(1)]
            has_mma = any(o.startswith(("HMMA", "HGMMA")) for o, _ in insns[lo:i])
            if has_mma and i - lo > span:  # the key-tile loop holds the QK product
                span, loop = i - lo, (lo, i + 1)
    body = insns[loop[0] : loop[1]]

    def classes(seq) -> dict:
        ops = [op for op, _ in seq if op != "NOP"]
        return {
            "insns": len(ops),
            "shfl": sum(op.startswith("SHFL") for op in ops),
            "bar": sum(op.startswith(("BAR", "WARPSYNC")) for op in ops),
            "lds_sts": sum(op.startswith(("LDS", "STS")) for op in ops),
            "isetp_ex": sum(op.startswith("ISETP") and ".EX" in op for op in ops),
            "mufu": sum(op.startswith("MUFU") for op in ops),
            "mma": sum(op.startswith(("HMMA", "HGMMA", "IMMA")) for op in ops),
        }

    return {"kernel": classes(insns), "loop": classes(body)}


def compile_select(G: int, D: int, arch: int, over: dict, triton_dtype: str = "bf16") -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from nsa.attention import gpucheck
    from nsa.attention.triton import compressed as cmp
    from nsa.attention.triton.spec import GpuShape

    shape = GpuShape("probe", head_dim=D, group=G, block_len=32, block_stride=16, sel_block=64, n_sel=16,
                     window=512, dtype=triton_dtype)  # fmt: skip
    real = cmp._config
    cmp._config = lambda *a, **k: {**real(*a, **k), **over}
    try:
        spec = next(s for s in cmp.gpucheck_specs(shape, arch) if s.name == "compressed_select")
    finally:
        cmp._config = real
    aligned = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(spec.fn.arg_names)
        if str(spec.signature.get(n, "")).startswith("*")
    }
    src = ASTSource(
        fn=spec.fn, signature=dict(spec.signature), constexprs=dict(spec.constexprs), attrs=aligned
    )
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})  # fmt: skip
    rep = (
        gpucheck._parse_ptxas(log.getvalue())
        if "Used " in log.getvalue()
        else gpucheck._ptxas_report(k.asm["ptx"], arch)
    )
    rec = {"fn": spec.fn.fn.__name__, "G": G, "D": D, "arch": arch, "warps": spec.num_warps,
           "BT": spec.constexprs["BT"], "registers": rep["registers"],
           "spill": rep["spill_stores"] + rep["spill_loads"], "triton": triton.__version__}  # fmt: skip
    rec.update(count(_disasm(k.asm["cubin"], arch)))
    return rec


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="GxD (default: m7c 6x64 and paper 16x128)")
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a _config key")
    args = ap.parse_args()
    over = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    points = (
        [tuple(int(x) for x in s.split("x")) for s in args.shape] if args.shape else list(SHAPES.values())
    )
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-select-sass-"))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    for G, D in points:
        for arch in args.arch:
            print(json.dumps({**compile_select(G, D, arch, over), "set": over}), flush=True)


if __name__ == "__main__":
    main()
