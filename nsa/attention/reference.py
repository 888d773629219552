"""Slow, spelled-out NSA: the executable specification that the fast path is tested against.

Owns `nsa_reference(attn, x)` (and `reference_selection`), which read an `NSAAttention`'s own
parameters and recompute its output with explicit loops over batch, query position and KV group,
straight from the paper's equations (arXiv 2502.11089): Eq. 5 gates, Eq. 7 compression, Eq. 8-11
selection, the sliding window. It shares no code with the fast path (not even RoPE) so a bug cannot
hide in both. It must stay obviously correct rather than fast: use it only on small shapes in tests.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from nsa.attention.nsa import NSAAttention


def _rope(vec: Tensor, pos: int, theta: float) -> Tensor:
    """Rotate one [D] vector to position `pos`: pair (i, i + D/2) turns by pos * theta^(-2i/D)."""
    D = vec.shape[-1]
    half = D // 2
    out = []
    v32 = vec.to(torch.promote_types(vec.dtype, torch.float32))
    for i in range(half):
        angle = pos * theta ** (-(2 * i) / D)
        c, s = math.cos(angle), math.sin(angle)
        out.append((v32[i] * c - v32[i + half] * s, v32[i + half] * c + v32[i] * s))
    first = torch.stack([a for a, _ in out])
    second = torch.stack([b for _, b in out])
    return torch.cat([first, second]).to(vec.dtype)


def _rope_rows(m: Tensor, positions: list[int], theta: float) -> Tensor:
    """Rotate each row m[r] ([N, D]) to positions[r]: built from the per-vector formula above."""
    D = m.shape[-1]
    half = D // 2
    inv = torch.tensor([theta ** (-(2 * i) / D) for i in range(half)], dtype=torch.float64)
    ang = torch.tensor(positions, dtype=torch.float64)[:, None] * inv[None, :]
    work = torch.promote_types(m.dtype, torch.float32)
    c, s = ang.cos().to(work), ang.sin().to(work)
    mf = m.to(work)
    a, b = mf[:, :half], mf[:, half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1).to(m.dtype)


def _compress_block(attn: NSAAttention, block: Tensor, which: int) -> Tensor:
    """phi(block) for one [l, D] block of raw keys (which=0) or values (which=1)."""
    if attn.compression == "mean":
        return block.mean(dim=0)
    mlp = attn.cmp_k if which == 0 else attn.cmp_v
    h = (block + attn.cmp_pos[which]).reshape(-1)
    h = F.silu(F.linear(h, mlp[0].weight, mlp[0].bias))
    return F.linear(h, mlp[2].weight, mlp[2].bias)


def _overlap(i: int, j: int, attn: NSAAttention) -> int:
    """Eq. 9 weight: how many stride-sized pieces compressed block i shares with selection block j."""
    lo = max(i * attn.block_stride, j * attn.sel_block)
    hi = min(i * attn.block_stride + attn.block_len, (j + 1) * attn.sel_block)
    return max(0, hi - lo) // attn.block_stride


def _choose(scores: Tensor, t: int, attn: NSAAttention) -> list[int]:
    """Eq. 11 for one query and group: forced blocks first, then by score, ties to the later block."""
    lp = attn.sel_block
    cands = [j for j in range(len(scores)) if j * lp <= t]
    forced = {0, t // lp, t // lp - 1}
    ranked = sorted(cands, key=lambda j: (j in forced, float(scores[j]), j), reverse=True)
    return ranked[: attn.n_sel]


def _per_sequence(attn: NSAAttention, xb: Tensor) -> tuple[Tensor, list[list[list[int]]]]:
    T = xb.shape[0]
    H, Hkv, D = attn.n_heads, attn.n_kv_heads, attn.head_dim
    G = H // Hkv
    bl, d, lp, w = attn.block_len, attn.block_stride, attn.sel_block, attn.window
    theta = attn.rope_theta
    scale = 1.0 / math.sqrt(D)
    q = F.linear(xb, attn.wq.weight).view(T, H, D)
    kv = F.linear(xb, attn.wkv.weight).view(T, 3, 2, Hkv, D)
    gates = torch.sigmoid(F.linear(xb, attn.gate.weight, attn.gate.bias)).view(T, H, 3)
    positions = list(range(T))
    n_blocks = (T - bl) // d + 1 if bl <= T else 0
    n_sel_blocks = -(-T // lp)
    heads_out = []
    selection: list[list[list[int]]] = []
    for gk in range(Hkv):
        # Per KV head: rotated keys of the selection and window branches, compressed keys/values.
        k_sel = _rope_rows(kv[:, 1, 0, gk], positions, theta)
        v_sel = kv[:, 1, 1, gk]
        k_win = _rope_rows(kv[:, 2, 0, gk], positions, theta)
        v_win = kv[:, 2, 1, gk]
        kc = [
            _rope(_compress_block(attn, kv[i * d : i * d + bl, 0, 0, gk], 0), i * d + bl - 1, theta)
            for i in range(n_blocks)
        ]
        vc = [_compress_block(attn, kv[i * d : i * d + bl, 0, 1, gk], 1) for i in range(n_blocks)]
        group_rows = []
        group_sel = []
        for t in range(T):
            qs = [_rope(q[t, gk * G + h], t, theta) for h in range(G)]
            visible = [i for i in range(n_blocks) if i * d + bl - 1 <= t]
            o_cmp, p_cmp = [], []
            for h in range(G):
                if visible:
                    p = torch.softmax(torch.stack([kc[i] for i in visible]) @ qs[h] * scale, dim=0)
                    o_cmp.append(p @ torch.stack([vc[i] for i in visible]))
                    p_cmp.append(p.detach().float())
                else:
                    o_cmp.append(torch.zeros(D, dtype=xb.dtype))
            # Eq. 8-10: importance of selection block j, summed over the heads of this group.
            scores = torch.zeros(n_sel_blocks, dtype=torch.float32)
            for j in range(n_sel_blocks):
                for n, i in enumerate(visible):
                    wgt = _overlap(i, j, attn)
                    if wgt:
                        scores[j] += wgt * sum(p_cmp[h][n] for h in range(G))
            chosen = _choose(scores, t, attn)
            group_sel.append(chosen)
            sel_keys = sorted(s for j in chosen for s in range(j * lp, (j + 1) * lp) if s <= t)
            win_keys = [s for s in range(max(0, t - w + 1), t + 1)]
            rows = []
            for h in range(G):
                o_sel = torch.softmax(k_sel[sel_keys] @ qs[h] * scale, dim=0) @ v_sel[sel_keys]
                o_win = torch.softmax(k_win[win_keys] @ qs[h] * scale, dim=0) @ v_win[win_keys]
                g = gates[t, gk * G + h]
                rows.append(g[0] * o_cmp[h] + g[1] * o_sel + g[2] * o_win)
            group_rows.append(torch.stack(rows))
        heads_out.append(torch.stack(group_rows))  # [T, G, D]
        selection.append(group_sel)
    o = torch.stack(heads_out, dim=1).reshape(T, H * D)
    return F.linear(o, attn.wo.weight), selection


def nsa_reference(attn: NSAAttention, x: Tensor) -> Tensor:
    """The output of `attn(x)` computed by loops; differentiable w.r.t. x and all of attn's parameters."""
    return torch.stack([_per_sequence(attn, xb)[0] for xb in x])


def reference_selection(attn: NSAAttention, x: Tensor) -> list[list[list[list[int]]]]:
    """Selected block indices [b][kv_group][t] -> list of block ids, in the reference's rank order."""
    with torch.no_grad():
        return [_per_sequence(attn, xb)[1] for xb in x]
