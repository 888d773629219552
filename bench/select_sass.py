"""SASS of the selection kernel `_cmp_select` (and `_cmp_select_v0`) per key tile, no GPU.

Owns the GPU-free evidence behind docs/attention.md's selection paragraph: it compiles the selection
kernel as `compressed.gpucheck_specs` would launch it (or under `--set KEY=VALUE` overrides of
`compressed._config`), disassembles the cubin with the triton wheel's `nvdisasm`, finds the key-tile
loop (the backward branch with the widest span) and counts its SASS instructions by class: all,
shuffles (cross-lane reductions), barriers and shared-memory loads/stores (layout conversions: the
latency of a latency-bound kernel), 64-bit integer compares, local-memory (spill) loads/stores.
Registers, spills and shared memory from the same compile's `ptxas -v`. Static counts: an
instruction inside a data-dependent branch counts once, whether or not it runs; `split` gives the
paths apart (prologue, epilogue, the loop's always-run part and its branches, also by opcode class)
for the dynamic count of bench/select_proxy.py. Prints one JSON object per line; it asserts nothing.

  .venv/bin/python bench/select_sass.py                              # M7C and paper, sm_80 and sm_90
  .venv/bin/python bench/select_sass.py --shape 6x64 --arch 90 --set select_v0=1   # the kernel before
  .venv/bin/python bench/select_sass.py --shape 6x64 --arch 90 --set select_cut=0 --paths  # by path and class
  .venv/bin/python bench/select_sass.py --shape 6x64 --arch 90 --lines   # the loop by source line
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/select_sass.py              # another triton
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

SHAPES = {"m7c": (6, 64), "paper": (16, 128)}  # (G, D); l 32, d 16, l' 64, n 16 (configs/m7c_125m.yaml)


def _disasm(cubin: bytes, arch: int, line_info: bool = False) -> list[str]:
    """nvdisasm's listing of `cubin`; `line_info`: with `//## File ..., line N` comments (-g)."""
    from triton.backends.nvidia.compiler import get_ptxas

    nvdisasm = Path(get_ptxas(arch).path).with_name("nvdisasm")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        flags = ["-c", "-g"] if line_info else ["-c"]
        out = subprocess.run(
            [str(nvdisasm), *flags, str(p)], capture_output=True, text=True, check=True
        ).stdout
    return out.splitlines()


_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def _parse(lines: list[str]) -> tuple[list[tuple[str, str, bool]], dict[str, int]]:
    """(opcode, operands, predicated) of every instruction, and label -> index of the instruction
    after it."""
    insns, label_at = [], {}
    for ln in lines:
        lab = re.match(r"\s*(\.L\w+):", ln)
        if lab:
            label_at[lab.group(1)] = len(insns)
        m = _INSN.search(ln)
        if m:
            insns.append((m.group(3), m.group(4), bool(m.group(2))))
    return insns, label_at


def _target(rest: str) -> str | None:
    t = re.search(r"\((\.L\w+)\)", rest)
    return t.group(1) if t else None


def _loop(insns, label_at, widest: bool = True) -> tuple[int, int]:
    """[lo, hi) of the widest (or, `widest` False, the narrowest) backward branch around a tensor-core
    product: the key-tile loop (the whole listing where there is none)."""
    loop, span = (0, len(insns)), None
    for i, (op, rest, _) in enumerate(insns):
        t = _target(rest)
        if op.startswith("BRA") and t and label_at.get(t, i) < i:
            lo = label_at[t]
            has_mma = any(o.startswith(("HMMA", "HGMMA")) for o, _, _ in insns[lo:i])
            better = span is None or (i - lo > span if widest else i - lo < span)
            if has_mma and better:  # the key-tile loop holds the QK product
                span, loop = i - lo, (lo, i + 1)
    return loop


def _classes(seq) -> dict:
    ops = [x[0] for x in seq if x[0] != "NOP"]
    return {
        "insns": len(ops),
        "shfl": sum(op.startswith("SHFL") for op in ops),
        "bar": sum(op.startswith(("BAR", "WARPSYNC")) for op in ops),
        "lds_sts": sum(op.startswith(("LDS", "STS")) for op in ops),
        "isetp_ex": sum(op.startswith("ISETP") and ".EX" in op for op in ops),
        "mufu": sum(op.startswith("MUFU") for op in ops),
        "mma": sum(op.startswith(("HMMA", "HGMMA", "IMMA")) for op in ops),
        "ldl_stl": sum(op.startswith(("LDL", "STL")) for op in ops),  # spilled registers
        # shared-memory matrix loads (sm_80's mma operands; not in lds_sts): bench/a100_proxy.py's record
        "ldsm": sum(op.startswith("LDSM") for op in ops),
    }


def count(lines: list[str]) -> dict:
    """Instruction counts of the whole kernel and of its widest loop (a backward branch)."""
    insns, label_at = _parse(lines)
    lo, hi = _loop(insns, label_at)
    return {"kernel": _classes(insns), "loop": _classes(insns[lo:hi])}


def split(lines: list[str]) -> dict:
    """The kernel's SASS as the paths a program takes, for a dynamic count (bench/select_proxy.py):
    `prologue` (before the key-tile loop, once), `epilogue` (after it, to the last EXIT, once),
    `always` (the loop body outside its data-dependent branches, once a key tile) and `branches`
    (each forward conditional branch's skipped range inside the loop, outermost only, in order: the
    top-n merges, run only on tiles that merge). Each part is `_classes` counts per thread (= per
    warp: every warp of a program runs the same instruction stream)."""
    insns, label_at = _parse(lines)
    lo, hi = _loop(insns, label_at)
    regions = _branch_regions(insns, label_at, lo, hi)
    exits = [k for k, x in enumerate(insns) if x[0].startswith("EXIT")]
    last_exit = max(exits, default=len(insns) - 1)
    inside = set()
    for a, b in regions:
        inside.update(range(a, b))
    always = [x for k, x in enumerate(insns[lo:hi], lo) if k not in inside]
    # By opcode class (bench/keys_proxy.py's `opclasses`: integer, float, predicates, moves, memory,
    # conversions, MMA, sync), for the integer work a cut removes (bench/RESULTS.md "selcut").
    opclasses = load_by_path("keys_proxy", Path(__file__).with_name("keys_proxy.py")).opclasses
    return {
        "prologue": _classes(insns[:lo]),
        "epilogue": _classes(insns[hi : last_exit + 1]),
        "always": _classes(always),
        "branches": [_classes(insns[a:b]) for a, b in regions],
        "always_ops": opclasses(always),
        "branch_ops": [opclasses(insns[a:b]) for a, b in regions],
    }


def _mma_loops(insns, label_at) -> list[tuple[int, int]]:
    """[lo, hi) of every outermost backward branch around a tensor-core product, in program order:
    the key-tile loops (one, or select_split's three: tile 0, interior tiles, edge tiles)."""
    found = []
    for i, (op, rest, _) in enumerate(insns):
        t = _target(rest)
        if op.startswith("BRA") and t and label_at.get(t, i) < i:
            lo = label_at[t]
            if any(o.startswith(("HMMA", "HGMMA")) for o, _, _ in insns[lo:i]):
                found.append((lo, i + 1))
    outer = [x for x in found if not any(y != x and y[0] <= x[0] and x[1] <= y[1] for y in found)]
    return sorted(outer)


def _branch_regions(insns, label_at, lo: int, hi: int) -> list[tuple[int, int]]:
    """`split`'s branch regions of the loop [lo, hi): each outermost forward conditional branch's
    skipped range inside it."""
    regions, i = [], lo
    while i < hi - 1:
        op, rest, pred = insns[i]
        end = label_at.get(_target(rest), -1) if op.startswith("BRA") and pred else -1
        if i < end <= hi - 1:
            regions.append((i + 1, end))
            i = end
            continue
        i += 1
    return regions


def split_loops(lines: list[str]) -> dict:
    """`split` for a kernel of several key-tile loops (select_split): `once` (every instruction outside
    the loops, to the last EXIT: the prologue, the code between the loops and the epilogue, run once
    a program; their guards' skips are not subtracted, at most a few instructions) and `loops`, in
    program order, each with `split`'s `always` and `branches` (and by opcode class)."""
    insns, label_at = _parse(lines)
    loops = _mma_loops(insns, label_at)
    exits = [k for k, x in enumerate(insns) if x[0].startswith("EXIT")]
    last_exit = max(exits, default=len(insns) - 1)
    opclasses = load_by_path("keys_proxy", Path(__file__).with_name("keys_proxy.py")).opclasses
    inside = set()
    out = []
    for lo, hi in loops:
        inside.update(range(lo, hi))
        regions = _branch_regions(insns, label_at, lo, hi)
        skipped = {k for a, b in regions for k in range(a, b)}
        always = [x for k, x in enumerate(insns[lo:hi], lo) if k not in skipped]
        out.append({"always": _classes(always), "branches": [_classes(insns[a:b]) for a, b in regions],
                    "always_ops": opclasses(always), "branch_ops": [opclasses(insns[a:b]) for a, b in regions],
                    "span": [lo, hi]})  # fmt: skip
    once = [x for k, x in enumerate(insns[: last_exit + 1]) if k not in inside]
    return {"once": _classes(once), "loops": out}


def by_line(lines: list[str], source: str = "compressed_select.py", loop: int | None = None) -> dict:
    """The key-tile loop's always-run part (`split`'s `always`) of a -g listing (`_disasm` line_info)
    by the `source` line that emitted it: {line: _classes counts}. The cubin's line table names only
    the innermost frame, so what triton's library emits (tl.sum's shuffles and cross-warp
    shared-memory steps, in triton/language/standard.py) goes to the last `source` line before it in
    the listing: a heuristic that follows the order ptxas scheduled (bench/RESULTS.md "selshm").
    `loop`: the `loop`-th key-tile loop (`_mma_loops`, select_split's) instead of the widest."""
    where, cur, plain = [], None, []
    for ln in lines:
        m = re.search(r'//## File "([^"]+)", line (\d+)', ln)
        if m:
            if Path(m.group(1)).name == source:
                cur = int(m.group(2))
            continue
        if _INSN.search(ln):
            where.append(cur)
        plain.append(ln)
    insns, label_at = _parse(plain)
    lo, hi = _loop(insns, label_at) if loop is None else _mma_loops(insns, label_at)[loop]
    regions, i = [], lo
    while i < hi - 1:  # `split`'s branch regions
        op, rest, pred = insns[i]
        end = label_at.get(_target(rest), -1) if op.startswith("BRA") and pred else -1
        if i < end <= hi - 1:
            regions.append(range(i + 1, end))
            i = end
            continue
        i += 1
    groups: dict = {}
    for k in range(lo, hi):
        if not any(k in r for r in regions):
            groups.setdefault(where[k], []).append(insns[k])
    return {line: _classes(seq) for line, seq in sorted(groups.items(), key=lambda x: x[0] or 0)}


def resident_programs(registers: int, smem: int, warps: int, sm: dict) -> int:
    """Programs of `warps` warps an SM holds (`sm`: its "regs", "warps", "blocks" and "smem" limits):
    registers allocated per warp in 256s, shared memory with 1 KB reserved a program. The one
    occupancy rule of the bench's SASS proxies (select_proxy.py, keys_proxy.py, tiles_d128.py, the
    model's A100 prices in attention_cost/sass80.py)."""
    per_warp = -(-registers * 32 // 256) * 256
    blocks = min(sm["blocks"], sm["regs"] // (per_warp * warps), sm["warps"] // warps)
    if smem:
        blocks = min(blocks, sm["smem"] // (smem + 1024))
    return max(blocks, 0)


def patched_spec(
    module, name: str, G: int, D: int, arch: int, over: dict, sel_block: int = 64, n_sel: int = 16,
    dtype: str = "bf16",
):  # fmt: skip
    """`module`.gpucheck_specs' kernel `name` as launched for G x D (l 32, d 16, w 512, `dtype`) on
    sm_`arch`, with `over` patched into `module._config` while the spec is built (restored after):
    the one way the bench's SASS counters (this file, keys_proxy.py, tok_pipe_sass.py, tiles_d128.py,
    a100_proxy.py) build what they compile."""
    from nsa.attention.triton.spec import GpuShape

    shape = GpuShape("probe", head_dim=D, group=G, block_len=32, block_stride=16, sel_block=sel_block,
                     n_sel=n_sel, window=512, dtype=dtype)  # fmt: skip
    real = module._config
    module._config = lambda *a, **k: {**real(*a, **k), **over}
    try:
        return next(s for s in module.gpucheck_specs(shape, arch) if s.name == name)
    finally:
        module._config = real


def compile_select(
    G: int,
    D: int,
    arch: int,
    over: dict,
    triton_dtype: str = "bf16",
    fn=None,
    paths: bool = False,
    by_source: bool = False,
) -> dict:
    """Compile the selection kernel as launched for G x D on sm_`arch` (`over`: _config overrides;
    `fn`: another @triton.jit kernel with `_cmp_select`'s signature, e.g. an older version of it) and
    count its SASS; `paths` adds `split`'s prologue / epilogue / always / branches counts, `by_source`
    the loop's always-run part by source line (`by_line`)."""
    import triton

    from nsa.attention import gpucheck
    from nsa.attention.triton import compressed as cmp

    spec = patched_spec(cmp, "compressed_select", G, D, arch, over, dtype=triton_dtype)
    if over.get("select_v0"):  # the kernel before it, at its own shipped tokens and warps
        c = {**cmp._config(G, D, 16, 32, 16, 64, arch), **over}
        const = {**spec.constexprs, "BT": c["bt_sel_v0"]}
        spec = replace(spec, fn=cmp._cmp_select_v0, constexprs=const, num_warps=c["warps_sel_v0"], maxnreg=0)
    if fn is not None:
        spec = replace(spec, fn=fn)
    # Another kernel version may lack some of today's constexprs (v0: SP and HALVES).
    names = set(spec.fn.arg_names)
    spec = replace(
        spec,
        signature={k: v for k, v in spec.signature.items() if k in names},
        constexprs={k: v for k, v in spec.constexprs.items() if k in names},
    )
    # The split loop where the compiled kernel runs it (SPLIT: `_config`'s select_split on the CUT
    # loop, shipped at M7C's shape on sm_90), not only where `over` asks for it.
    split_run = bool(spec.constexprs.get("SPLIT"))
    # the launcher's cap: `_config`'s maxnreg_sel with `over` patched in (patched_spec's spec.maxnreg;
    # sm_80's and sm_90's M7C selection ship one; `over` maxnreg_sel 0 compiles uncapped)
    opts = {"maxnreg": spec.maxnreg} if spec.maxnreg else {}
    k, rep = gpucheck.compile_spec(spec, arch, **opts)
    rec = {"fn": spec.fn.fn.__name__, "G": G, "D": D, "arch": arch, "warps": spec.num_warps,
           "BT": spec.constexprs["BT"], "registers": rep["registers"],
           "spill": rep["spill_stores"] + rep["spill_loads"], "smem": k.metadata.shared,
           "triton": triton.__version__}  # fmt: skip
    lines = _disasm(k.asm["cubin"], arch)
    rec.update(count(lines))
    if paths:
        rec["paths"] = split(lines)
        if split_run:  # select_split: tile 0, the interior and the edge loops apart
            rec["paths"]["loops"] = split_loops(lines)
    if by_source:
        listing = _disasm(k.asm["cubin"], arch, line_info=True)
        rec["by_line"] = by_line(listing)
        if split_run:  # the interior loop's and the edge loop's apart
            rec["by_line_loops"] = [by_line(listing, loop=i) for i in range(len(_mma_loops(*_parse(lines))))]
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
    ap.add_argument("--paths", action="store_true", help="also split()'s paths, by opcode class too")
    ap.add_argument("--lines", action="store_true", help="also the loop's always-run part by source line")
    args = ap.parse_args()
    over = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    points = (
        [tuple(int(x) for x in s.split("x")) for s in args.shape] if args.shape else list(SHAPES.values())
    )
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-select-sass-"))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    for G, D in points:
        for arch in args.arch:
            print(
                json.dumps(
                    {**compile_select(G, D, arch, over, paths=args.paths, by_source=args.lines), "set": over}
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
