"""bench/attention_model.py (the `--model` of bench/attention.py): row schemas, calibration within
+-30 %, and sanity properties of the cost model (cheap: pure arithmetic, no torch work)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")  # the model reads the kernels' `_config` (their modules import triton)

from nsa.attention.gpusuite.modelcheck import load_model
from tests.fixtures.bench import load_bench

m = load_model()  # the one loader (nsa.attention.gpusuite.modelcheck)


def test_calibration_rows_have_the_issue_schema_and_stay_within_30_percent() -> None:
    rows = m.calibration_rows()
    sources = {r["calibration"].split("/")[0] for r in rows}
    assert sources == {"nsa_paper_fig6", "scalable_flash_nsa"}  # two published figure sets
    for r in rows:
        assert list(r) == ["calibration", "gpu", "shape", "T", "published", "predicted", "error"]
        assert r["error"] == pytest.approx(r["predicted"] / r["published"] - 1, abs=2e-3)
        assert abs(r["error"]) <= 0.30, r


def test_prediction_rows_cover_the_gpus_and_shapes_with_the_issue_keys() -> None:
    rows = m.prediction_rows([8192, 32768, 65536])
    assert {(r["gpu"], r["shape"]) for r in rows} == {
        (g, s) for g in ("A100", "H100", "H200") for s in ("m7c", "paper")
    }
    for r in rows:
        assert list(r) == ["prediction", "gpu", "shape", "T", "fwd", "bwd", "fwd_bwd"]
        assert r["prediction"] == "nsa_over_fa2"
        assert min(r["fwd"], r["bwd"]) <= r["fwd_bwd"] <= max(r["fwd"], r["bwd"])


def test_padding_costs_flops_and_long_t_favours_nsa() -> None:
    """G = 6 pads the selected kernels' rows to 16: one token a program issues 16/6 of the useful
    FLOPs; two-token tiles take the union of their blocks (random tables: the union ratio, 0.849 at
    8k as bench/selected_key_steps.py counts; adjacent tokens sharing their blocks: half); the
    shipped 8-token tiles (ce226a4) 64 rows for 48 over the union of 8 (adjacent tokens sharing:
    an eighth); and the NSA/FA2 ratio falls as T grows (FA2 is quadratic, NSA's selected and window
    branches linear)."""
    shape = m.SHAPES["m7c"]

    def sel(T, **kw):  # the query-major path (at G <= 8 the code ships the key-major one)
        k = next(k for k in m.ours(T, shape, fwd_keys=False, **kw) if k.name == "sel_fwd")
        return k.flops / k.useful

    assert sel(65536, token_tiles=False) == pytest.approx(16 / 6)
    assert m._tokens_per_tile(6) == 2 and m._union_ratio(8192, shape, 2) == pytest.approx(0.849, abs=1e-3)
    assert sel(8192, tp=2) == pytest.approx(16 / 6 * m._union_ratio(8192, shape, 2))
    assert sel(8192, tp=2, selections="shared") == pytest.approx(16 / 6 / 2)
    assert m.shipped_launch(shape, 90)["tp"] == m.shipped_launch(shape, 80)["tp"] == 2  # 8 not shipped
    assert sel(8192) == sel(8192, tp=2)
    assert sel(8192, tp=8) == pytest.approx(64 / 6 * m._union_ratio(8192, shape, 8))
    assert sel(8192, tp=8, selections="shared") == pytest.approx(64 / 6 / 8)
    paper = next(k for k in m.ours(65536, m.SHAPES["paper"]) if k.name == "sel_fwd")
    assert paper.flops == pytest.approx(paper.useful)  # G = 16 fills the tile
    ratios = [r["fwd_bwd"] for r in m.prediction_rows([8192, 16384, 32768, 65536]) if r["gpu"] == "A100"][:4]
    assert ratios == sorted(ratios, reverse=True)


def test_transient_bytes_grow_linearly() -> None:
    # No [T, T/l'] score tensor any more: the largest scratch is linear in T. Query-major: the selected
    # backward's index and partials; key-major (shipped at G <= 8): the backward's dQ partials per
    # table entry, PDQ [BH*T*n, G, D] (fp32: 3.2 GB at M7C 64k; bf16 as shipped: 1.6 GB), beside delta and the partial dK/dV
    # (the index's order too where the backward builds it); the forward's PO / PL partials (bf16 +
    # fp32 lse) are smaller. The key-major forward's order is its op's output: not scratch.
    s = m.SHAPES["m7c"]
    for keys in (False, True):
        a, b = (m.transient_bytes(T, s, keys, keys) for T in (32768, 65536))
        assert b == pytest.approx(2 * a, rel=0.01)
    qm = m.transient_bytes(65536, s, False, False)
    assert qm < 4 * 2 * 65536 * 1024
    BH, P, rows = 2, 2 * 65536 * 16, 2 * 65536 * 6
    pdq = P * 6 * 64 * 4
    assert pdq == 3221225472  # 3.2 GB, as selected_keys_bwd.py says
    nseg = 2 * 1024 + P // 2048
    assert m.transient_bytes(65536, s) == m.transient_bytes(65536, s, True, True)  # shipped at G 6
    assert m.transient_bytes(65536, s, False, True, 32) == 4 * rows + 8 * P + 2 * nseg * 64 * 64 * 4 + pdq
    # as shipped (pdq_bits 16): the partials in bf16, half that
    assert m.transient_bytes(65536, s, False, True) == 4 * rows + 8 * P + 2 * nseg * 64 * 64 * 4 + pdq // 2
    assert m.transient_bytes(65536, s, True, False) == P * 6 * (64 * 2 + 4)  # the forward's PO + PL
    assert m.transient_bytes(65536, m.SHAPES["paper"]) == m.transient_bytes(
        65536, m.SHAPES["paper"], False, False
    )
    del BH


def test_saved_bytes_per_layer_grow_linearly_in_t() -> None:
    """Memory rows: what one M7C layer (triton path, bf16) saves for backward, traced on the meta
    device; no saved tensor grows faster than T (doubling T doubles the bytes, within the compressed
    tokens' rounding)."""
    bench = load_bench("attention")
    a, b = bench.saved_bytes(4096), bench.saved_bytes(8192)
    assert a["saved_bytes"] > 0 and a["rope_tables_bytes"] == 2 * 4 * 4096 * 64
    assert b["saved_bytes"] / a["saved_bytes"] == pytest.approx(2.0, rel=0.01)


def test_bound_rows_lie_below_every_prediction_and_name_the_efficiency_the_target_needs() -> None:
    """The ideal NSA (useful FLOPs only, FA2's 5 backward units) can never cost more than the modelled
    kernels; a dense-tile selected branch is cheaper than a gather one; the efficiency the target
    needs is the one that puts the ideal exactly on the target."""
    Ts = [8192, 32768, 65536]
    preds = {(r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows(Ts)}
    for r in m.bound_rows(Ts):
        assert r["selected_dense"] < r["selected_gather"] <= preds[(r["gpu"], r["shape"], r["T"])]
        need = r["gather_bwd_needed"]
        if need is not None:
            gpu, shape = m.GPUS[r["gpu"]], m.SHAPES[r["shape"]]
            saved = dict(m.EFF[gpu.arch])
            try:
                m.EFF[gpu.arch]["gather_bwd"] = need
                ratio = m.ideal_time(r["T"], shape, gpu) / m.total(m.flash2(r["T"], shape), gpu)
            finally:
                m.EFF[gpu.arch].update(saved)
            assert ratio == pytest.approx(r["target"], rel=0.01)


def test_union_ratio_is_what_the_token_tiles_count_on_random_tables() -> None:
    """The model's closed form for the token tiles' key steps agrees with the kernels' own count
    (selected_query.key_steps, the logic the interpreter tests tie to the dot calls) on top_blocks
    over random scores, and shared tables give 1/TP."""
    torch = pytest.importorskip("torch")
    from nsa.attention.selection import top_blocks
    from nsa.attention.triton.selected_query import key_steps

    T, lp, n = 4096, 64, 16
    shape = m.SHAPES["m7c"]
    g = torch.Generator().manual_seed(0)
    idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, n)
    for G in (2, 6):
        counted = key_steps(idx, valid, lp, G)
        TP = m._tokens_per_tile(G)
        assert counted["tokens_per_program"] == TP
        assert counted["ratio"] == pytest.approx(m._union_ratio(T, shape, TP), abs=0.01)


def test_short_t_counts_match_the_kernels_own_rule() -> None:
    """The counts the first GPU run showed short at 2k: the token tiles' steps (a token below 16 blocks
    lists fewer than n - 3 non-forced blocks) and the key-major dK/dV's rows (valid pairs only, min(n,
    t//l' + 1) a token), against selected_query.key_steps and top_blocks' valid entries."""
    torch = pytest.importorskip("torch")
    from nsa.attention.selection import top_blocks
    from nsa.attention.triton.selected_query import key_steps

    T, lp, n = 2048, 64, 16
    shape = m.SHAPES["m7c"]
    g = torch.Generator().manual_seed(1)
    idx, valid = top_blocks(torch.rand(1, 1, T, -(-T // lp), generator=g), torch.arange(T), lp, n)
    counted = key_steps(idx, valid, lp, shape.G)
    assert m._sel_steps(T, shape, 1) == counted["steps_one_token"] < (n - 3) * T * 0.75
    assert m._sel_steps(T, shape, 2) == pytest.approx(counted["steps_tiles"], rel=0.02)
    assert m._valid_pairs(T, shape) == int(valid.sum()) < n * T * 0.8
    dkdv = next(k for k in m.ours(T, shape, bwd_keys=False) if k.name == "sel_bwd_dkdv")
    BH = shape.B * shape.Hkv
    assert dkdv.useful == pytest.approx(4 * 2 * BH * int(valid.sum()) * shape.G * lp * shape.D)
    # autograd's sum over the 3 branches, as the committed runs measured it (since: RoPE's backward)
    assert "q_grad_sum" in {k.name for k in m.ours(T, shape, q_grad_fused=False)}


def test_the_compressed_forward_is_two_kernels_at_the_shipped_warps() -> None:
    """Since 45bc233: the flash attention (QK + PV over unpadded rows) and the selection (QK only,
    at the warps compressed.py ships for the GPU); the fused kernel only where a build asks for it."""
    shape = m.SHAPES["m7c"]
    kinds = {g: {k.name: k.kind for k in m.ours_on(32768, shape, m.GPUS[g])} for g in ("A100", "H100")}
    # sm_90: 1 warp under a register cap (2026-11-26c's H100 probe; 2 warps before), 2 tokens a tile
    # (ce226a4), merged in halves (2930e5c); sm_80: BTF = 4 tokens merged
    # in halves at 2 warps under a register cap (proxy-chosen, 2026-11-26; 4 warps at once before);
    # the int32 merge (cmp_sel32) since 2026-11-26b
    # (@cut: the loop's integer work in 32 bits and hoisted, select_cut: the proxy's factor on Hopper;
    # @shm@split: Eq. 9's key without gathers and the interior tiles unmasked, shipped as a pair at M7C;
    # @tma: the key tile as one bulk copy, since the second 2026-11-27 H100 call)
    assert kinds["H100"]["cmp_fwd"] == "cmp_attn@64"
    assert kinds["H100"]["cmp_select"] == "cmp_sel32@w1@bt2@h2@cut@shm@split@tma"
    measured_loop = {k.name: k.kind for k in m.ours(32768, shape, select_cut=0, select_one_warp=False)}
    assert measured_loop["cmp_select"] == "cmp_sel32@w2@bt2@h2"
    assert kinds["A100"]["cmp_select"] == "cmp_sel32@w2@h2"
    # dK/dV at 64 keys a tile on sm_90 (bench/flash_proxy.py's factor), sm_80 at the measured 32
    assert kinds["H100"]["cmp_bwd_dkv"] == "cmp_dkv@64@w4@bn64"
    assert kinds["A100"]["cmp_bwd_dkv"] == "cmp_dkv@64@w4"
    assert kinds["H100"]["sel_fwd_keys"] == "sel_keys_fwd@64@free"  # fwd_forced_merge's mask-free walk
    # 64 rows a step on sm_90 (its price's), the rows in 32 bits (keys_div32: the proxy's factor)
    assert kinds["H100"]["sel_bwd_keys"] == "sel_keys_bwd@64@div32"
    int64_rows = {k.name: k.kind for k in m.ours(32768, shape, keys_div32=False)}
    assert int64_rows["sel_bwd_keys"] == "sel_keys_bwd@64"
    # 64 rows on sm_80 too, with the per-row key limit (keys_rowlim); without it the launcher's rule
    # (selected_keys_bwd.keys_rows) runs 32, priced as such (x its probed factor where published)
    assert kinds["A100"]["sel_bwd_keys"] == "sel_keys_bwd@64"
    no_limit = {k.name: k.kind for k in m.ours_on(32768, shape, m.GPUS["A100"], keys_rowlim=False)}
    assert no_limit["sel_bwd_keys"] == "sel_keys_bwd@64@br32"
    assert "cmp_fwd_topn" not in kinds["H100"]
    qm = {k.name: k.kind for k in m.ours(32768, shape, fwd_keys=False, bwd_keys=False)}
    assert (qm["sel_fwd"], qm["sel_bwd_dq"], qm["sel_bwd_dkdv"]) == ("tok_fwd", "tok_dq", "sel_dkdv@64")
    ks = {k.name: k for k in m.ours(32768, shape)}
    assert ks["cmp_fwd"].flops / ks["cmp_fwd"].useful < 1.1  # no padded heads in the attention
    assert ks["cmp_select"].useful * 2 == pytest.approx(ks["cmp_fwd"].useful)
    fused = {k.name: k.kind for k in m.ours(32768, shape, **m.WHAT_IF["before_split"])}
    assert (fused["cmp_fwd"], fused["cmp_fwd_topn"], fused["sel_bwd_dkdv"]) == ("cmp_fused@64", "cmp_topn",
                                                                                "sel_dkdv_w8@64")  # fmt: skip
    assert "cmp_select" not in {k.name for k in m.ours(32768, shape, selection_free=True)}
    h100 = m.GPUS["H100"]
    w2, w4 = (m.total(m.ours(65536, shape, warps_sel=w), h100) for w in (2, 4))
    assert w2 < w4


def test_eight_token_tiles_pay_where_probed_and_cost_at_long_t() -> None:
    """ce226a4's 8-token tiles at G 6 (priced from the probe at 8k, B = 8: a gathered byte 1.45x /
    1.39x a 2-token tile's): faster there, as measured; at 64k (B = 1) the union of 8 random tables
    saves only 12 % of the gathers, so the model prices them slower, and main ships the 2-token tiles
    (the token_tiles_x4 what-if prices the 8-token ones)."""
    gpu = m.GPUS["H200"]

    def tok_ms(T: int, B: int, **kw) -> float:
        shape = m.Shape("m7c", B, 12, 2, 64)
        ks = m.ours(T, shape, fwd_keys=False, bwd_keys=False, **kw)  # the query-major path
        return sum(k.time(gpu) for k in ks if k.name in ("sel_fwd", "sel_bwd_dq")) * 1e3

    assert tok_ms(8192, 8, tp=8) < 0.9 * tok_ms(8192, 8)
    assert tok_ms(65536, 1, tp=8) > 1.15 * tok_ms(65536, 1)
    rows = m.what_if_rows([65536])
    what = {(r["what_if"], r["shape"]): r["fwd_bwd"] for r in rows if r["gpu"] == "H200"}
    assert what[("token_tiles_x4", "m7c")] > what[("query_major_selected", "m7c")]
    # one token a tile at G 16 either way, and the paper shape query-major as shipped
    pred = {(r["gpu"], r["shape"], r["T"]): r["fwd_bwd"] for r in m.prediction_rows([65536])}
    assert what[("token_tiles_x4", "paper")] == pred[("H200", "paper", 65536)]
