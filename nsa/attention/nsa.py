"""NSAAttention: Native Sparse Attention (Yuan et al. 2025, arXiv 2502.11089) as a drop-in attention.

Owns the parameters (query projection, per-branch key/value projections [3.3.3], the compression MLP
with its intra-block position encoding [Eq. 7], the gate projection [Eq. 5], the output projection),
RoPE, the wiring of the three branches, and the choice of backend per forward: `eager` (compressed.py,
selected.py, window.py: plain PyTorch plus custom ops, the CPU path and the kernels' oracle) or
`triton` (nsa/attention/triton/). The branch functions are bound when the module is constructed, one
table per device type, never looked up or imported inside `forward`: a lazy import or a namespace
built in `forward` is untraceable, and torch.compile of a checkpointed block then compiled nothing,
silently. The kernel modules are imported at construction only where they can run (a CUDA device is
present, or TRITON_INTERPRET=1: `@triton.jit` decides at import whether to interpret). It must not loop over tokens, blocks or heads, must not build a [T, T] tensor,
and must not sync with the device in the forward/backward (telemetry is computed only when
`collect_stats` is set, and stays on-device as 0-dim tensors). The slow spelled-out version of the
same math is reference.py; docs/attention.md explains the choices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from nsa.attention import triton as _triton_pkg
from nsa.attention.compressed import compressed_attention_and_selection
from nsa.attention.rope import rope_tables, rope_to_layout
from nsa.attention.selected import selected_attention
from nsa.attention.window import window_attention

Compression = Literal["mlp", "mean"]
Backend = Literal["auto", "eager", "triton"]
BACKENDS: tuple[str, ...] = ("auto", "eager", "triton")


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """The backend a forward on `device` runs: "eager" or "triton"; ValueError when `backend` cannot run there.

    auto: triton on CUDA tensors when triton is importable, eager elsewhere (CPU, meta, MPS).
    triton: CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (the kernels then run in
    triton's interpreter: slow, fp32/fp16 only; the tests use it).
    """
    dev = torch.device(device).type
    if backend == "eager":
        return "eager"
    if backend == "auto":
        if dev == "cuda" and _triton_pkg.available():
            _triton_pkg.require_supported()  # an old triton is refused, never silently slow
            return "triton"
        return "eager"
    if backend != "triton":
        raise ValueError(f"NSAAttention: backend={backend!r} must be one of {', '.join(BACKENDS)}")
    if not _triton_pkg.available():
        raise ValueError(
            "NSAAttention: backend='triton' needs the triton package, which is not installed. "
            "Fix: install a CUDA build of torch (it brings triton) or `pip install triton`, or use "
            "backend='auto'/'eager' (model.nsa.backend in the config)."
        )
    _triton_pkg.require_supported()
    if dev == "cuda" or (dev == "cpu" and _triton_pkg.interpreting()):
        return "triton"
    if dev == "cpu":
        raise ValueError(
            "NSAAttention: backend='triton' got CPU tensors; its kernels run on CUDA, or on the CPU only "
            "in triton's interpreter (TRITON_INTERPRET=1 set before the kernels are first imported; "
            "slow, for tests). Fix: move the model and inputs to a CUDA device, set TRITON_INTERPRET=1 "
            "in the environment, or use backend='auto'/'eager' (model.nsa.backend in the config)."
        )
    raise ValueError(
        f"NSAAttention: backend='triton' cannot run on {dev} tensors (CUDA only). "
        "Fix: use backend='auto' or 'eager' there."
    )


class BranchOps(NamedTuple):
    """The functions one backend runs: the three branches, RoPE into the kernels' layout, the gate mix."""

    compressed: Callable[..., Any]
    selected: Callable[..., Any]
    window: Callable[..., Any]
    rope: Callable[..., Any]
    gate_mix: Callable[..., Any] | None  # None: the module's own _gate_mix
    # q's RoPE as one output per branch (x, cos, sin, n) -> n tensors, whose backward sums the
    # branches' gradients itself; None: `rope`, its one output shared (autograd sums them)
    rope_q: Callable[..., Any] | None = None
    # the branches and the gate mix as one node, (inp, g, geometry) -> (y, idx, valid) or None where it
    # does not apply (then the above one by one); None: always one by one
    gated: Callable[..., Any] | None = None


_EAGER = BranchOps(
    compressed=compressed_attention_and_selection,
    selected=selected_attention,
    window=window_attention,
    rope=rope_to_layout,
    gate_mix=None,
)
_TRITON: BranchOps | None = None


def _ops(backend: str) -> BranchOps:
    """The branch functions of a resolved backend; imports the triton kernel modules on the first call.

    Called at construction (and by tests), never in `forward`.
    """
    global _TRITON
    if backend == "eager":
        return _EAGER
    if _TRITON is None:
        from nsa.attention.triton import compressed, fused, gated, selected, window

        _TRITON = BranchOps(
            compressed=compressed.compressed_attention_and_selection,
            selected=selected.selected_attention,
            window=window.window_attention,
            rope=fused.rope_to_layout,
            gate_mix=fused.gate_mix,
            rope_q=fused.rope_q_fanout,
            gated=gated.gated_branches,
        )
    return _TRITON


def dispatch_table(backend: str) -> dict[str, BranchOps]:
    """Device type -> the ops a forward there runs, for the device types this process can hold.

    CUDA enters only when a CUDA device is present (binding triton imports its kernels); a device
    type missing here (or whose backend cannot run there) is resolved at the forward, which raises
    the ValueError of `resolve_backend` for an impossible combination.
    """
    table: dict[str, BranchOps] = {}
    for dev in ("cpu", "meta", "cuda"):
        if dev == "cuda" and not torch.cuda.is_available():
            continue
        try:
            table[dev] = _ops(resolve_backend(backend, dev))
        except ValueError:
            continue
    return table


class NSAAttention(nn.Module):
    """x [B, T, dim] -> y [B, T, dim] with compressed + selected + sliding-window branches.

    Defaults are the paper's: l=32, d=16, l'=64, n=16 (incl. the initial and 2 local blocks), w=512.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        block_len: int = 32,
        block_stride: int = 16,
        sel_block: int = 64,
        n_sel: int = 16,
        window: int = 512,
        *,
        rope_theta: float = 10000.0,
        compression: Compression = "mlp",
        sel_chunk: int | None = None,
        cmp_chunk: int | None = None,
        backend: Backend = "auto",
    ) -> None:
        super().__init__()
        _validate(
            n_heads,
            n_kv_heads,
            head_dim,
            block_len,
            block_stride,
            sel_block,
            n_sel,
            window,
            compression,
            backend,
        )
        self.dim, self.n_heads, self.n_kv_heads, self.head_dim = dim, n_heads, n_kv_heads, head_dim
        self.block_len, self.block_stride, self.sel_block = block_len, block_stride, sel_block
        self.n_sel, self.window, self.rope_theta, self.compression = n_sel, window, rope_theta, compression
        self.sel_chunk, self.cmp_chunk, self.backend = sel_chunk, cmp_chunk, backend
        self.wq = nn.Linear(dim, n_heads * head_dim, bias=False)
        # One matmul for all six key/value projections; layout [branch (cmp, sel, win)][k, v][Hkv][D].
        self.wkv = nn.Linear(dim, 6 * n_kv_heads * head_dim, bias=False)
        if compression == "mlp":
            # phi of Eq. 7: intra-block position encoding, then an MLP over the flattened block.
            self.cmp_pos = nn.Parameter(torch.randn(2, block_len, head_dim) * 0.02)
            self.cmp_k = _block_mlp(block_len * head_dim, head_dim)
            self.cmp_v = _block_mlp(block_len * head_dim, head_dim)
        # Eq. 5: per-head gate for each branch, g = sigmoid(linear(x)); layout [H][branch].
        self.gate = nn.Linear(dim, n_heads * 3)
        self.wo = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.collect_stats = False
        self.last_stats: dict[str, Tensor] | None = None
        self._dispatch = dispatch_table(backend)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, "
            f"l={self.block_len}, d={self.block_stride}, l'={self.sel_block}, n={self.n_sel}, "
            f"w={self.window}, compression={self.compression}, backend={self.backend}"
        )

    def resolved_backend(self, device: torch.device | str) -> str:
        """What a forward on `device` runs ("eager" or "triton"); ValueError when `backend` cannot run there."""
        return resolve_backend(self.backend, device)

    def ops_for(self, device: torch.device) -> BranchOps:
        """The ops bound at construction for `device`'s type (a dict lookup that dynamo traces)."""
        ops = self._dispatch.get(device.type)
        if ops is None:  # a device type this process had no table entry for; raises when impossible
            ops = _ops(self.resolved_backend(device))
            self._dispatch[device.type] = ops
        return ops

    def compress(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 7 on raw (un-rotated) keys/values [B, T, Hkv, D] -> [B, Nc, Hkv, D], Nc complete blocks."""
        B, T, Hkv, D = k.shape
        bl, d = self.block_len, self.block_stride
        if bl > T:
            return k.new_zeros(B, 0, Hkv, D), v.new_zeros(B, 0, Hkv, D)
        kb = k.unfold(1, bl, d).permute(0, 1, 2, 4, 3)  # [B, Nc, Hkv, l, D]
        vb = v.unfold(1, bl, d).permute(0, 1, 2, 4, 3)
        if self.compression == "mean":
            return kb.mean(dim=3), vb.mean(dim=3)
        kc = self.cmp_k((kb + self.cmp_pos[0]).flatten(3))
        vc = self.cmp_v((vb + self.cmp_pos[1]).flatten(3))
        return kc, vc

    def _branch_inputs(self, x: Tensor, ops: BranchOps) -> dict[str, Tensor]:
        """Projections, compression and RoPE, in the kernels' layouts ([B, Hkv, T, G, D] queries).

        The rotated queries as "q" (compressed branch), "q_sel" and "q_win": one tensor; with a
        backend's `rope_q` each branch holds its own output of it (views, no copy), so q's three
        gradients reach RoPE's backward apart and are summed there (triton: float32, one kernel)."""
        rope_to_layout = ops.rope
        B, T, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        rope_dtype = torch.promote_types(x.dtype, torch.float32)
        cos, sin = rope_tables(T, D, self.rope_theta, rope_dtype, x.device)
        # RoPE writes straight into the kernels' layouts: q [B, Hkv, T, G, D], keys [B, Hkv, T, D].
        xq = self.wq(x).view(B, T, Hkv, H // Hkv, D)
        if ops.rope_q is None:
            q = rope_to_layout(xq, cos, sin, (0, 2, 1, 3, 4))
            q_sel = q_win = q
        else:
            q, q_sel, q_win = ops.rope_q(xq, cos, sin, 3)
        # unbind, not indexing: its backward is one stack, where six selects would each allocate
        # and add a zero-filled gradient of the whole projection.
        kv_c, kv_s, kv_w = (b.unbind(2) for b in self.wkv(x).view(B, T, 3, 2, Hkv, D).unbind(2))
        kc, vc = self.compress(*kv_c)
        # Compressed key i is rotated to the position of its block's last token, i*d + l - 1, so
        # q.k_cmp depends on the distance from the query to the end of the block.
        ccos, csin = rope_tables(
            kc.shape[1],
            D,
            self.rope_theta,
            rope_dtype,
            x.device,
            step=self.block_stride,
            offset=self.block_len - 1,
        )
        to_heads = (0, 2, 1, 3)  # [B, N, Hkv, D] -> [B, Hkv, N, D]
        return {
            "q": q,
            "q_sel": q_sel,
            "q_win": q_win,
            "kc": rope_to_layout(kc, ccos, csin, to_heads),
            "vc": vc.permute(to_heads).contiguous(),
            "ks": rope_to_layout(kv_s[0], cos, sin, to_heads),
            "vs": kv_s[1].permute(to_heads).contiguous(),
            "kw": rope_to_layout(kv_w[0], cos, sin, to_heads),
            "vw": kv_w[1].permute(to_heads).contiguous(),
        }

    def _compressed(self, inp: dict[str, Tensor], ops: BranchOps) -> tuple[Tensor, Tensor, Tensor]:
        # The triton kernels pick their own tiles (chunk=None); the eager op's chunk is a row limit.
        return ops.compressed(
            inp["q"],
            inp["kc"],
            inp["vc"],
            block_len=self.block_len,
            block_stride=self.block_stride,
            sel_block=self.sel_block,
            n_sel=self.n_sel,
            scale=1.0 / math.sqrt(self.head_dim),
            chunk=self.cmp_chunk if ops is _EAGER else None,
        )

    def _sel_chunk(self, x: Tensor) -> int:
        """Bins (of up to l' queries sharing one selected block) per loop step of the selected branch.

        CPU: 64, measured (bench/RESULTS.md): the per-chunk tiles stay cache-sized. GPU: 2048, not
        measured: there the cost is kernel launches per chunk, so fewer, larger chunks.
        """
        if self.sel_chunk is not None:
            return self.sel_chunk
        return 64 if x.device.type == "cpu" else 2048

    @torch.no_grad()
    def selected_blocks(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The selection table the forward would use: (idx, valid), each [B, Hkv, T, min(n, ceil(T/l'))].

        idx[b, g, t] lists the selection blocks (block j = tokens [j*l', (j+1)*l')) shared by all heads
        of KV group g for query t (forced blocks first, then by importance); valid marks real entries (short prefixes have fewer).
        Computed by the same backend as the forward on x's device (the tables of both are identical).
        """
        ops = self.ops_for(x.device)
        _, idx, valid = self._compressed(self._branch_inputs(x, ops), ops)
        return idx, valid

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        H, Hkv = self.n_heads, self.n_kv_heads
        ops = self.ops_for(x.device)  # per forward: a model built on CPU may move to CUDA
        inp = self._branch_inputs(x, ops)
        g = torch.sigmoid(self.gate(x)).view(B, T, Hkv, H // Hkv, 3)
        scale = 1.0 / math.sqrt(self.head_dim)
        mixed = None
        if ops.gated is not None:  # the triton backend's one node (gates folded into the backwards' lse)
            geo = (self.block_len, self.block_stride, self.sel_block, self.n_sel, self.window)
            mixed = ops.gated(inp, g, *geo, scale=scale)
        y, idx, valid = self._branches_mixed(x, inp, g, ops) if mixed is None else mixed
        self.last_stats = _stats(g, idx, valid, self.sel_block) if self.collect_stats else None
        return self.wo(y)

    def _branches_mixed(
        self, x: Tensor, inp: dict[str, Tensor], g: Tensor, ops: BranchOps
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The three branches one by one and the gate mix: sum_c g_c * o_c [Eq. 5] as [B, T, H*D], idx, valid."""
        scale = 1.0 / math.sqrt(self.head_dim)
        eager = ops is _EAGER
        o_cmp, idx, valid = self._compressed(inp, ops)
        o_sel = ops.selected(
            inp["q_sel"],
            inp["ks"],
            inp["vs"],
            idx,
            valid,
            sel_block=self.sel_block,
            scale=scale,
            chunk=self._sel_chunk(x) if eager else None,
            forced_blocks=True,  # the table comes from top_blocks, which always lists the forced blocks
        )
        o_win = ops.window(inp["q_win"], inp["kw"], inp["vw"], window=self.window, scale=scale)
        mix = ops.gate_mix or _gate_mix  # None: the module's own (BranchOps)
        return mix(g.to(o_cmp.dtype), o_cmp, o_sel, o_win), idx, valid


def _gate_mix(g: Tensor, o_cmp: Tensor, o_sel: Tensor, o_win: Tensor) -> Tensor:
    """sum_c g_c * o_c [Eq. 5] as [B, T, H*D]; g [B, T, Hkv, G, 3], o_* [B, Hkv, T, G, D].

    Eager: `_GateMix` (fewer passes over memory). Under torch.compile the plain expression: dynamo
    refuses strided `out=`, and inductor fuses the plain spelling itself.
    """
    if not torch.compiler.is_compiling():
        return _GateMix.apply(g, o_cmp, o_sel, o_win)
    B, Hkv, T, G, D = o_cmp.shape
    gv = g.permute(0, 2, 1, 3, 4)
    o = gv[..., 0:1] * o_cmp + gv[..., 1:2] * o_sel + gv[..., 2:3] * o_win
    return o.permute(0, 2, 1, 3, 4).reshape(B, T, Hkv * G * D)


class _GateMix(torch.autograd.Function):
    """Eq. 5's gated sum of the branch outputs, written straight into the [B, T, H*D] layout of wo.

    g [B, T, Hkv, G, 3] gates; o_* [B, Hkv, T, G, D] branch outputs. Three passes forward (a product
    and two addcmul_) and, backward, three products and three row dot products: autograd's spelling
    of the same sum (products, adds, a layout copy) makes about twice as many passes over memory.
    """

    @staticmethod
    def forward(ctx, g: Tensor, o_cmp: Tensor, o_sel: Tensor, o_win: Tensor) -> Tensor:
        B, Hkv, T, G, D = o_cmp.shape
        gv = g.permute(0, 2, 1, 3, 4)[..., None]  # [B, Hkv, T, G, 3, 1]
        y = o_cmp.new_empty(B, T, Hkv, G, D)
        yv = y.permute(0, 2, 1, 3, 4)
        torch.mul(o_cmp, gv[..., 0, :], out=yv)
        yv.addcmul_(o_sel, gv[..., 1, :])
        yv.addcmul_(o_win, gv[..., 2, :])
        ctx.save_for_backward(g, o_cmp, o_sel, o_win)
        return y.view(B, T, Hkv * G * D)

    @staticmethod
    def backward(ctx, dy: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        g, *outs = ctx.saved_tensors
        B, Hkv, T, G, D = outs[0].shape
        dyv = dy.reshape(B, T, Hkv, G, D).permute(0, 2, 1, 3, 4)
        gv = g.permute(0, 2, 1, 3, 4)[..., None]
        d_outs = [torch.mul(dyv, gv[..., i, :], out=torch.empty_like(o)) for i, o in enumerate(outs)]
        # Row dot products dy . o_c as [N, 1, D] x [N, D, 1] bmm: ~3x faster than linalg.vecdot over
        # the strided dy on CPU (bench/RESULTS.md).
        rows = dyv.contiguous().view(-1, 1, D)
        dg = torch.stack([torch.bmm(rows, o.reshape(-1, D, 1)).view(B, Hkv, T, G) for o in outs], dim=-1)
        return (dg.permute(0, 2, 1, 3, 4), *d_outs)


def _block_mlp(d_in: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, 2 * d_out), nn.SiLU(), nn.Linear(2 * d_out, d_out))


@torch.no_grad()
def _stats(g: Tensor, idx: Tensor, valid: Tensor, sel_block: int) -> dict[str, Tensor]:
    """Telemetry as 0-dim on-device tensors: gate means per branch and how far selection reaches back."""
    T = idx.shape[2]
    t = torch.arange(T, device=idx.device)[None, None, :, None]
    reach = (t - idx * sel_block).float()  # tokens from the query back to the selected block's start
    vf = valid.float()
    return {
        "gate/cmp": g[..., 0].float().mean(),
        "gate/sel": g[..., 1].float().mean(),
        "gate/win": g[..., 2].float().mean(),
        "sel/reach_mean": (reach * vf).sum() / vf.sum().clamp_min(1.0),
        "sel/reach_max": torch.where(valid, reach, torch.zeros_like(reach)).amax(),
    }


def _validate(
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    block_len: int,
    block_stride: int,
    sel_block: int,
    n_sel: int,
    window: int,
    compression: str,
    backend: str = "auto",
) -> None:
    problems = []
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        problems.append(f"n_heads={n_heads} must be a positive multiple of n_kv_heads={n_kv_heads}")
    if head_dim % 2:
        problems.append(f"head_dim={head_dim} must be even (RoPE rotates pairs)")
    if block_stride < 1 or block_len % block_stride:
        problems.append(f"block_len={block_len} must be a multiple of block_stride={block_stride}")
    if block_stride >= 1 and sel_block % block_stride:
        problems.append(f"sel_block={sel_block} must be a multiple of block_stride={block_stride} (Eq. 9)")
    if n_sel < 3:
        problems.append(f"n_sel={n_sel} must be >= 3: it counts the initial block and the 2 local blocks")
    if window < 1:
        problems.append(f"window={window} must be >= 1")
    if compression not in ("mlp", "mean"):
        problems.append(f"compression={compression!r} must be 'mlp' or 'mean'")
    if backend not in BACKENDS:
        problems.append(f"backend={backend!r} must be one of {', '.join(map(repr, BACKENDS))}")
    if problems:
        raise ValueError("NSAAttention: " + "; ".join(problems))
