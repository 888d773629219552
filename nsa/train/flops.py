"""What one training token costs: NSA's causal key counts, FLOPs per token, GPU peaks per SKU, MFU.

Owns the FLOP account the trainer's MFU uses and `nsa-train --flops` prints: keys per query of each
NSA branch averaged over the positions of one sequence of `train.seq_len` (the causal counts the
kernels really attend, not the dense formula), the matmul FLOPs of the parameters (the compression
MLP counted once per compressed block and KV head, not per token), and the bf16 dense peak of the
GPU the run found, per SKU. It must not depend on a device: the model is built on the meta device.

    nsa-train --flops --config configs/m7c_125m.yaml [--set train.seq_len=32768]
"""

from __future__ import annotations

from typing import Any

from nsa.train.config import ModelConfig, TrainConfig

# bf16 dense (no sparsity) tensor-core peak FLOP/s per GPU, from NVIDIA's datasheets. Matched as
# substrings of torch.cuda.get_device_name(), most specific first ("NVIDIA H100 PCIe" must not
# take the SXM figure; the SXM part reports itself as "NVIDIA H100 80GB HBM3").
PEAK_BF16_FLOPS: tuple[tuple[str, str, float], ...] = (
    ("H100 PCIe", "H100 PCIe", 756e12),
    ("H100 NVL", "H100 NVL", 835e12),
    ("H100", "H100 SXM", 989e12),
    ("H200 NVL", "H200 NVL", 835e12),
    ("H200", "H200 SXM", 989e12),
    ("A100-SXM4-40GB", "A100 40GB SXM", 312e12),
    ("A100-PCIE-40GB", "A100 40GB PCIe", 312e12),
    ("A100 80GB PCIe", "A100 80GB PCIe", 312e12),
    ("A100-SXM4-80GB", "A100 80GB SXM", 312e12),
    ("A100", "A100", 312e12),
    ("L40S", "L40S", 362e12),
    ("A10G", "A10G", 125e12),
)


def peak_for(device_name: str) -> tuple[str, float] | None:
    """(SKU, bf16 dense peak FLOP/s) for a CUDA device name, or None when the GPU is not in the table."""
    for needle, sku, peak in PEAK_BF16_FLOPS:
        if needle.lower() in device_name.lower():
            return sku, peak
    return None


def nsa_keys_per_query(seq_len: int, block_len: int, block_stride: int, sel_block: int, n_sel: int,
                       window: int) -> dict[str, float]:  # fmt: skip
    """Keys each branch attends per query, averaged over positions 0..seq_len-1 (causal).

    Compressed: key i is visible to query t iff i*d + l - 1 <= t. Selected: every selection block up
    to t while there are at most n of them, else n blocks, one of which is the query's own partial
    block. Window: the last min(w, t+1) tokens.
    """
    T, bl, d, lp = seq_len, block_len, block_stride, sel_block
    cmp = sel = win = 0
    for t in range(T):
        cmp += (t - bl + 1) // d + 1 if t >= bl - 1 else 0
        blocks = t // lp + 1
        sel += t + 1 if blocks <= n_sel else (n_sel - 1) * lp + t % lp + 1
        win += min(window, t + 1)
    out = {"compressed": cmp / T, "selected": sel / T, "window": win / T}
    out["total"] = sum(out.values())
    return out


def dense_keys_per_query(seq_len: int) -> float:
    return (seq_len + 1) / 2


def _compression_params(m: ModelConfig) -> int:
    """Parameters of the two compression MLPs (phi of Eq. 7), which run per compressed block, not per token."""
    if m.attention != "nsa" or m.nsa.compression != "mlp":
        return 0
    d_in, d = m.nsa.block_len * m.head_dim, m.head_dim
    one = d_in * 2 * d + 2 * d + 2 * d * d + d
    return 2 * one


def flops_account(cfg: TrainConfig, vocab_size: int | None = None) -> dict[str, Any]:
    """The `--flops` JSON: params, training FLOPs per token (forward + backward), attention's share, keys."""
    import torch

    from nsa.model import Transformer

    m, T = cfg.model, cfg.train.seq_len
    vocab = vocab_size if vocab_size is not None else cfg.resolved_vocab_size()
    with torch.device("meta"):
        model = Transformer(m, vocab)
    params = model.num_params()
    embedding_lookup = 0 if m.tie_embeddings else model.tok_emb.weight.numel()  # a gather, not a matmul
    mlp_params = _compression_params(m) * m.n_layers
    cmp_pos = m.nsa.block_len * m.head_dim * 2 * m.n_layers if mlp_params else 0  # an add, not a matmul
    per_token = params - embedding_lookup - mlp_params - cmp_pos
    flops = 6.0 * per_token
    if m.attention == "nsa":
        n = m.nsa
        keys = nsa_keys_per_query(T, n.block_len, n.block_stride, n.sel_block, n.n_sel, n.window)
        # Each compressed block runs the MLP once per KV head: blocks per token = (#blocks) / T.
        n_blocks = max(0, (T - n.block_len) // n.block_stride + 1)
        flops += 6.0 * mlp_params * n_blocks * m.n_kv_heads / T
    else:
        keys = {"compressed": 0.0, "selected": 0.0, "window": 0.0, "total": dense_keys_per_query(T)}
    # q.k and p.v: 2 FLOPs per multiply-add, two products, x3 for forward + backward.
    attn = 12.0 * m.n_layers * m.n_heads * m.head_dim * keys["total"]
    return {
        "params": params,
        "flops_per_token": flops + attn,
        "attention_flops_per_token": attn,
        "keys_per_query": keys,
        "seq_len": T,
        "attention": m.attention,
    }
