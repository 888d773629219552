"""SASS counts of the selected branch's query-major gather loops for bench/gather_proxy.py: the token
tiles (`_sel_fwd_tok_kernel` / `_sel_bwd_dq_tok_kernel`) and the forced tiles (`_sel_forced_fwd_kernel`
/ `_sel_forced_dq_kernel`), no GPU.

Owns what the proxy reads from a kernel (issue 20, tokgather): it compiles a kernel as
selected.gpucheck_specs launches it (bench/select_sass.py's patched spec and nvdisasm listing) under
`_config` overrides applied to the measured loop's settings (`run_base`), and counts per program the
key loop's iteration (outside its data-dependent branches), its `take` path (the branchy loop's
`if take:`, once a union block) and the prologue / epilogue: warp instructions, dependent global-load
rounds (`load_rounds`: clusters of synchronous LDG a barrier or a conditional branch closes; cp.async
waited for with nothing in flight, one round), shared-memory accesses and bytes (`_smem_bytes`: LDS /
STS / LDSM by width, cp.async writes, wgmma operands read by descriptor), the cp.async groups left in
flight at the wait, and registers / shared memory from the same compile's ptxas. Asserts nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from nsa.attention.gpusuite.modelcheck import load_by_path

HERE = Path(__file__).resolve().parent
select_sass = load_by_path("select_sass", HERE / "select_sass.py")

# (G, D); l' 64, n 16. The model's two shapes (its B 1, heads and KV heads), then the other head_dims
# the token tiles run at G 16 (64 heads, 4 KV heads, as the paper's), priced only.
SHAPES = {"m7c": (6, 64), "paper": (16, 128), "g16d64": (16, 64), "g16d96": (16, 96)}
KERNELS = {  # proxy kernel -> (gpucheck spec name, profiler name, warps key, stages key)
    "tok_fwd": ("selected_fwd", "_sel_fwd_tok_kernel", "warps_tok", "stages_tok"),
    "tok_dq": ("selected_bwd_dq", "_sel_bwd_dq_tok_kernel", "warps_q", "stages_dq"),
    "forced_fwd": ("selected_forced_fwd", "_sel_forced_fwd_kernel", "warps_f", "stages_f"),
    "forced_dq": ("selected_forced_dq", "_sel_forced_dq_kernel", "warps_f", "stages_fdq"),
}

_WAIT = re.compile(r"SB0,\s*(0x[0-9a-f]+|\d+)")


def _sync_load(op: str) -> bool:
    return op.startswith("LDG") and not op.startswith(("LDGSTS", "LDGDEPBAR"))


def load_rounds(seq) -> int:
    """Dependent rounds of synchronous global loads in a stretch of SASS: clusters of LDG, a cluster
    closed by a barrier (the loaded values are stored to shared memory before it) or a conditional
    branch (it tests a loaded value). Each round waits a memory latency."""
    rounds, open_ = 0, False
    for op, _, pred in seq:
        if _sync_load(op):
            rounds += not open_
            open_ = True
        elif op.startswith("BAR.SYNC") or (op.startswith("BRA") and pred):
            open_ = False
    return rounds


def _classes(seq) -> dict:
    """Instructions, shared-memory accesses, sync-load rounds, asynchronous copies and the groups
    their waits leave in flight."""
    ops = [op for op, _, _ in seq if op != "NOP"]
    waits = [_WAIT.search(rest) for op, rest, _ in seq if op.startswith("DEPBAR")]
    return {
        "insns": len(ops),
        "smem": sum(op.startswith(("LDS", "STS")) for op in ops),  # LDSM included (sm_80's operands)
        "smem_bytes": sum(_smem_bytes(op, rest) for op, rest, _ in seq),
        "rounds": load_rounds(seq),
        "async": sum(op.startswith(("LDGSTS", "UTMALDG", "UBLKCP")) for op in ops),
        "in_flight": min((int(w.group(1), 0) for w in waits if w), default=0),
        "mma": sum(op.startswith(("HMMA", "HGMMA")) for op in ops),
    }


_COUNTS = ("insns", "smem", "smem_bytes", "rounds")


def _smem_bytes(op: str, rest: str) -> float:
    """Bytes one warp's instruction moves through shared memory (0 for anything but LDS / STS / LDSM /
    LDGSTS / HGMMA): 32 lanes x the access width (.128 16 B, .64 8 B, .U8 / .U16 1 / 2, else 4; LDSM .xN N x
    4 B a lane); a wgmma (HGMMA.64xNx16, the 64-row tiles' products on sm_90) reads its B operand
    (N x 16 bf16) and, where no register holds it, A (64 x 16) from shared memory by descriptor: a
    quarter of that each warp of the warp group."""
    if op.startswith("HGMMA"):
        n = re.match(r"x(\d+)x16", rest.strip())
        a_in_smem = re.match(r"x\d+x16\S*\s+R\d+,\s*gdesc", rest.strip()) is not None
        return ((64 * 16 * 2 if a_in_smem else 0) + int(n.group(1)) * 16 * 2) / 4 if n else 0
    if not op.startswith(("LDS", "STS", "LDGSTS")):  # cp.async writes shared memory as an STS would
        return 0
    if op.startswith("LDSM"):
        n = re.search(r"\.(\d)$", op) or re.search(r"\.M88\.(\d)", op)
        return 32 * 4 * (int(n.group(1)) if n else 1)
    for suffix, width in ((".128", 16), (".64", 8), (".U16", 2), (".S16", 2), (".U8", 1), (".S8", 1)):
        if suffix in op:
            return 32 * width
    return 32 * 4


def paths(lines: list[str], trips: int) -> dict:
    """A program's paths: `iter`, the key loop's body once an iteration outside its data-dependent
    branches; `take`, the branch regions that load or multiply (the branchy token tiles' `if take:`,
    run once a union block: empty in a branch-free loop), other short branch regions (divergent
    fallbacks) not counted; `program`, the prologue and epilogue once (a loop before the key loop, the
    forced tiles' role count over the table, counted `trips` times)."""
    insns, label_at = select_sass._parse(lines)
    lo, hi = select_sass._loop(insns, label_at, widest=False)
    inside, take = set(), []
    i = lo
    while i < hi - 1:
        op, rest, pred = insns[i]
        end = label_at.get(select_sass._target(rest), -1) if op.startswith("BRA") and pred else -1
        if i < end <= hi - 1:
            region = insns[i + 1 : end]
            inside.update(range(i + 1, end))
            if any(_sync_load(o) or o.startswith(("LDGSTS", "HMMA", "HGMMA")) for o, _, _ in region):
                take += region
            i = end
            continue
        i += 1
    body = [x for k, x in enumerate(insns[lo:hi], lo) if k not in inside]
    it, tk = _classes(body), _classes(take)
    loop = _classes(insns[lo:hi])
    if loop["async"]:
        it["rounds"] += loop["in_flight"] == 0  # the step's copies, waited for at its top
    extra = dict.fromkeys(_COUNTS, 0)
    for i, (op, r, _) in enumerate(insns[:lo]):
        t = label_at.get(select_sass._target(r), i)
        if op.startswith("BRA") and t < i:
            b = _classes(insns[t : i + 1])
            extra = {c: extra[c] + (trips - 1) * b[c] for c in _COUNTS}
    other = _classes(insns[:lo] + insns[hi:])
    return {
        "iter": {c: it[c] for c in _COUNTS},
        "take": {c: tk[c] for c in _COUNTS},
        "program": {c: other[c] + extra[c] for c in _COUNTS},
        "in_flight": loop["in_flight"], "async": loop["async"], "mma": loop["mma"],
    }  # fmt: skip


def compile_counts(kernel: str, shape: str, over: dict, arch: int = 90) -> dict:
    """Compile `kernel` at `shape` (bf16, l' 64, n 16) on sm_`arch` under `over` (selected._config
    keys over `run_base`, the measured loop's; "TP" also sets RP) and count its paths."""
    import triton

    from nsa.attention import gpucheck
    from nsa.attention.triton import selected as sel

    G, D = SHAPES[shape]
    spec = select_sass.patched_spec(sel, KERNELS[kernel][0], G, D, arch, _expand({**run_base(D), **over}, G))
    k, rep = gpucheck.compile_spec(spec, arch)
    return {"registers": rep["registers"], "spill": rep["spill_stores"] + rep["spill_loads"],
            "smem": int(k.metadata.shared) + rep["static_smem"], "warps": spec.num_warps,
            "stages": spec.num_stages, "pipe": spec.constexprs.get("PIPE", 0), "triton": triton.__version__,
            **paths(select_sass._disasm(k.asm["cubin"], arch), 16)}  # fmt: skip


def compiled_listing(kernel: str, shape: str, over: dict, arch: int = 90) -> list[str]:
    """The nvdisasm listing of `kernel` compiled as `compile_counts` compiles it."""
    from nsa.attention import gpucheck
    from nsa.attention.triton import selected as sel

    G, D = SHAPES[shape]
    spec = select_sass.patched_spec(sel, KERNELS[kernel][0], G, D, arch, _expand({**run_base(D), **over}, G))
    k, _ = gpucheck.compile_spec(spec, arch)
    return select_sass._disasm(k.asm["cubin"], arch)


def run_base(D: int) -> dict:
    """The token tiles' settings of the measured loop (every GPU run's, as 2b9778f shipped them): what
    a point's or a candidate's `over` is applied to, whatever selected._config ships today (its
    tok_pipe build is a candidate here: {"tok_pipe": 2, ...})."""
    small = D <= 64
    return {"tok_pipe": 0, "stages_tok": 2 if small else 1, "warps_tok": 4 if small else 2, "warps_q": 4,
            "stages_dq": 1}  # fmt: skip


def _expand(over: dict, G: int) -> dict:
    o = dict(over)
    if "TP" in o:
        o["RP"] = max(16, 1 << (o["TP"] * G - 1).bit_length())
    return o


def key(kernel: str, shape: str, over: dict, arch: int = 90) -> str:
    return f"{kernel}:{shape}:sm{arch}:" + ",".join(f"{k}={v}" for k, v in sorted(over.items()))


# ---- the shared-memory bytes of a key step, by role (tokshm) ----------------------------------------

_OFF = re.compile(r"\+(0x[0-9a-f]+)\]")
ROLES = (
    "kv_write",  # the K/V stage written: cp.async (LDGSTS) or the STS of a synchronous load's registers
    "kv_read",  # K / V read as an MMA operand by LDSM (the gathered block's own bytes, each warp its part)
    "invariant_read",  # Q / dO re-read every step (LDSM, or a wgmma's A by descriptor): triton sinks the load
    "mma_descriptor",  # a wgmma's B operand (K / V) read by descriptor (its A, Q / dO, counts as invariant_read)
    "conversion",  # P / dS (and a row vector) through a scratch buffer: the accumulator layout to an operand's
    "row_stats",  # 32-bit STS / LDS: a row max / sum reduced across the warps that split the keys
    "dummy",  # LDS RZ, [RZ]: the loads triton places beside cp.async (counted as one 4-byte access)
)


def smem_roles(lines: list[str], kv_bytes: int) -> dict:
    """Shared-memory bytes one warp moves in one iteration of the key loop, by role (ROLES), from the
    same listing and byte rule (`_smem_bytes`) as the proxy's. `kv_bytes`: the K/V stage's size (2 x BK
    x D x 2 B); immediate offsets below it address the stage, above it (up to the lowest offset the loop
    stores to) the loop-invariant operands, from there on the conversion scratch."""
    insns, label_at = select_sass._parse(lines)
    lo, hi = select_sass._loop(insns, label_at, widest=False)
    body = insns[lo:hi]

    def off(rest: str) -> int:
        m = _OFF.search(rest)
        return int(m.group(1), 16) if m else 0

    def src(rest: str) -> str:
        return rest.rsplit(",", 1)[-1].strip()

    loaded = {rest.split(",", 1)[0].strip() for op, rest, _ in body if _sync_load(op)}
    staged = {i for i, (op, r, _) in enumerate(body) if op.startswith("STS") and src(r) in loaded}
    stores = [off(r) for i, (op, r, _) in enumerate(body) if op.startswith("STS") and i not in staged]
    scratch = min((o for o in stores if o >= kv_bytes), default=1 << 30)
    out = dict.fromkeys(ROLES, 0.0)
    for i, (op, rest, _) in enumerate(body):
        b = _smem_bytes(op, rest)
        if not b:
            continue
        o = off(rest)
        if op.startswith("LDGSTS") or i in staged:
            role = "kv_write"
        elif op.startswith("HGMMA"):  # A by descriptor: the loop-invariant Q / dO, each step again
            a = re.match(r"x\d+x16\S*\s+R\d+,\s*gdesc", rest.strip()) is not None
            out["invariant_read"] += 64 * 16 * 2 / 4 if a else 0
            out["mma_descriptor"] += b - (64 * 16 * 2 / 4 if a else 0)
            continue
        elif rest.strip().startswith("RZ, [RZ]"):
            role = "dummy"
        elif o >= scratch:
            role = "row_stats" if op in ("STS", "LDS") else "conversion"
        elif op.startswith("LDSM"):
            role = "kv_read" if o < kv_bytes else "invariant_read"
        else:
            role = "row_stats" if op in ("STS", "LDS") else "conversion"
        out[role] += b
    return out
