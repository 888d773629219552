"""Whether triton pipelines the token tiles' gathered K/V loads: SASS of the token-tile kernels, no GPU.

Owns the GPU-free evidence behind `selected._config`'s `tok_pipe` (docs/attention.md, bench/RESULTS.md):
it compiles the forced split's token-tile forward (`_sel_fwd_tok_kernel`, spec "selected_fwd") and dQ
(`_sel_bwd_dq_tok_kernel`, "selected_bwd_dq") as `selected.gpucheck_specs` launches them, under
`--set KEY=VALUE` overrides of `selected._config` (default: as shipped, then tok_pipe with 2 and 3
stages, the tile's union at 3, and the measured branchy loop), disassembles the cubin with the triton wheel's `nvdisasm` (bench/select_sass.py) and reads the
key-step loop (the narrowest conditional backward branch around a tensor-core product): its asynchronous copies
(LDGSTS: cp.async, both archs; UTMALDG/UBLKCP: TMA), its synchronous global loads (LDG), the
cp.async waits (`DEPBAR.LE SB0, N`: N commit groups left in flight while the step computes, so N > 0
means the next steps' loads overlap this one's products), its conditional branches over loads or
products (the branchy loop's `if take:`), and registers, spills and shared memory from the same compile's
`ptxas -v`. Prints one JSON object per line; it asserts nothing.

  .venv/bin/python bench/tok_pipe_sass.py                                 # paper 16x128, sm_80 + sm_90
  .venv/bin/python bench/tok_pipe_sass.py --shape 6x64 --set tok_pipe=1 --set stages_tok=3
  PYTHONPATH=/path/to/triton-3.6 .venv/bin/python bench/tok_pipe_sass.py  # another triton
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")

KERNELS = {"selected_fwd": "stages_tok", "selected_bwd_dq": "stages_dq"}  # spec name -> its stages key
VARIANTS = [
    {},
    {"tok_pipe": 1, "stages_tok": 2, "stages_dq": 2},
    {"tok_pipe": 1, "stages_tok": 3, "stages_dq": 3},
    {"tok_pipe": 2, "stages_tok": 3, "stages_dq": 3},
    # the loop every GPU run measured at the paper shape (tok_pipe 2 ships at G > 8 on sm_90 since
    # bench/gather_proxy.py priced it; sm_80 ships this one)
    {"tok_pipe": 0, "stages_tok": 1, "stages_dq": 1, "warps_q": 4},
]
_WAIT = re.compile(r"SB0,\s*(0x[0-9a-f]+|\d+)")


def key_loop(insns, label_at) -> tuple[int, int]:
    """[lo, hi) of the key-step loop: the narrowest backward branch around a tensor-core product (the
    widest, select_sass's rule, can be a shuffle reduction's divergent fallback, `BRA.DIV` to a copy
    of the code that jumps back over the loop: triton 3.6 and 3.9 emit them here). On sm_80 the back
    edge is unconditional (a predicated CALL.REL.NOINC leaves the loop), so any branch counts."""
    return select_sass._loop(insns, label_at, widest=False)


def loop_pipeline(lines: list[str]) -> dict:
    """Counts in the key-step loop of an nvdisasm listing: instructions, tensor-core products,
    asynchronous copies, synchronous global loads, the cp.async waits' groups left in flight, and
    the conditional forward branches inside the loop that jump over a global load, an asynchronous
    copy or a product (the branchy loop's `if take:`; not the back edge, nor short hops over neither)."""
    insns, label_at = select_sass._parse(lines)
    lo, hi = key_loop(insns, label_at)
    body = insns[lo:hi]
    ops = [op for op, _, _ in body]
    waits = [_WAIT.search(rest) for op, rest, _ in body if op.startswith("DEPBAR")]
    guarded = 0  # forward conditional branches that skip a global load, an async copy or a product
    for i, (op, rest, pred) in enumerate(body[:-1], lo):
        t = label_at.get(select_sass._target(rest), -1)
        if op.startswith("BRA") and pred and i < t <= hi:
            guarded += any(
                o.startswith(("LDG", "UTMALDG", "UBLKCP", "HMMA", "HGMMA")) for o, _, _ in insns[i + 1 : t]
            )
    return {
        "loop_insns": sum(op != "NOP" for op in ops),
        "mma": sum(op.startswith(("HMMA", "HGMMA")) for op in ops),
        "async_copies": sum(op.startswith(("LDGSTS", "UTMALDG", "UBLKCP")) for op in ops),
        "sync_loads": sum(op.startswith("LDG") and not op.startswith(("LDGSTS", "LDGDEPBAR")) for op in ops),
        "waits_in_flight": [int(w.group(1), 0) for w in waits if w],
        "branches": sum(op.startswith("BRA") for op in ops),  # the back edge included
        "guarded_branches": guarded,
    }


def compile_tok(name: str, G: int, D: int, arch: int, over: dict) -> dict:
    """Compile token-tile spec `name` at G x D bf16 (l' 64, n 16) on sm_`arch` with `over` patched into
    selected._config, and read its loop."""
    import triton

    from nsa.attention import gpucheck
    from nsa.attention.triton import selected as sel

    spec = select_sass.patched_spec(sel, name, G, D, arch, over)
    k, rep = gpucheck.compile_spec(spec, arch)
    return {
        "kernel": name, "G": G, "D": D, "arch": arch, "triton": triton.__version__,
        "pipe": spec.constexprs["PIPE"], "warps": spec.num_warps, "stages": spec.num_stages,
        "registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"],
        "smem": int(k.metadata.shared) + rep["static_smem"], "smem_limit": gpucheck.SMEM_LIMIT[arch],
        **loop_pipeline(select_sass._disasm(k.asm["cubin"], arch)),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="GxD (default: the paper's 16x128)")
    ap.add_argument("--arch", type=int, nargs="+", default=[80, 90])
    ap.add_argument("--kernel", choices=sorted(KERNELS), action="append")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a _config key")
    args = ap.parse_args()
    over = {k: select_sass._value(v) for k, v in (s.split("=", 1) for s in args.set)}
    variants = [over] if over else VARIANTS
    points = [tuple(int(x) for x in s.split("x")) for s in args.shape] if args.shape else [(16, 128)]
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nsa-tok-pipe-sass-"))
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    for G, D in points:
        for arch in args.arch:
            for name in args.kernel or list(KERNELS):
                for v in variants:
                    print(json.dumps({**compile_tok(name, G, D, arch, v), "set": v}), flush=True)


if __name__ == "__main__":
    main()
