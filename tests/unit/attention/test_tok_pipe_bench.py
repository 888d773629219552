"""The token tiles' pipelined loop's bench scripts: bench/tok_pipe_sass.py, what it reads from an
nvdisasm listing's key-step loop (no compile here; the committed table is bench/RESULTS.md's), and
bench/tok_pipe_whatif.py, the cost model's what-if (an assumption it labels as one)."""

from __future__ import annotations

from tests.fixtures.bench import load_bench

tps = load_bench("tok_pipe_sass")
twi = load_bench("tok_pipe_whatif")

# nvdisasm's form: a prologue (2), then a loop holding a product: a cp.async wait leaving 2 groups in
# flight, two async copies and their commit, one synchronous load, a short hop over an add (not a
# guard), a branch over a load and a product (a guard), the back edge; the epilogue; then a shuffle's
# divergent fallback jumping back unconditionally, wider than the loop (not the loop).
_LISTING = """
.L_x_0:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.64 R2, desc[UR8][R4.64] ;
.L_x_1:
        /*0020*/                   DEPBAR.LE SB0, 0x2 ;
        /*0030*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0040*/                   LDG.E R20, desc[UR8][R22.64] ;
        /*0050*/               @P1 BRA `(.L_x_2) ;
        /*0060*/                   IADD3 R3, R3, 0x1, RZ ;
.L_x_2:
        /*0070*/               @P2 BRA `(.L_x_3) ;
        /*0080*/                   LDG.E.128 R24, desc[UR8][R26.64] ;
        /*0090*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
.L_x_3:
        /*00a0*/                   LDGSTS.E.BYPASS.LTC128B.128 [R5], desc[UR8][R6.64] ;
        /*00b0*/                   LDGSTS.E.BYPASS.LTC128B.128 [R5+0x800], desc[UR8][R6.64+0x80] ;
        /*00c0*/                   LDGDEPBAR ;
        /*00d0*/               @P4 BRA `(.L_x_1) ;
        /*00e0*/                   EXIT ;
.L_x_5:
        /*00f0*/                   SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
        /*0100*/                   BRA `(.L_x_0) ;
.L_x_4:
        /*0110*/                   BRA `(.L_x_4);
"""


def test_loop_pipeline_reads_copies_waits_loads_and_guards():
    got = tps.loop_pipeline(_LISTING.splitlines())
    assert got == {
        "loop_insns": 12,
        "mma": 2,
        "async_copies": 2,
        "sync_loads": 2,  # LDG.E and LDG.E.128; the prologue's load and LDGDEPBAR are not counted
        "waits_in_flight": [2],
        "branches": 3,
        "guarded_branches": 1,
    }


def test_variants_are_shipped_then_the_pipelined_loop_at_two_and_three_stages():
    from nsa.attention.triton import selected as sel

    cfg = sel._config(16, 128, 64, arch=90)
    assert tps.VARIANTS[0] == {}
    for v in tps.VARIANTS[1:]:
        assert set(v) <= set(cfg) and "tok_pipe" in v
    # the last: the branchy loop the GPU runs measured, at their settings (bench/gather_proxy.py's base)
    gp = load_bench("gather_proxy")
    assert tps.VARIANTS[-1] == {k: v for k, v in gp.run_base(128).items() if k != "warps_tok"}
    assert set(tps.KERNELS.values()) <= set(cfg)


def test_whatif_reprices_only_the_token_tiles_and_labels_the_assumption():
    """At the paper's 8k on an H100: the shipped row is the model's own (its token tiles' time, NSA's
    total); the pipelined rows change only the token tiles, the union cheaper than the shipped loop
    and than every slot a step. (The shipped tiles are priced as the H100 of 2026-11-26c measured them
    since, H100C_COST: below the every-slot assumption, which the proxy's price was above.)"""
    m = twi._model()
    s, gpu = m.SHAPES["paper"], m.GPUS["H100"]
    ks = m.ours_on(8192, s, gpu)
    got = {r["what_if"]: r for r in twi.rows([8192], ["H100"])}
    tok = sum(k.time(gpu) for k in ks if k.name in twi.TOK_KINDS) * 1e3
    assert abs(got["shipped"]["tok_ms"] - tok) < 1e-3 and got["shipped"]["assumption"] == "model as shipped"
    assert abs(got["shipped"]["nsa_ms"] - m.total(ks, gpu) * 1e3) < 1e-3
    union, slots = got["pipelined_union"], got["pipelined_all_slots"]
    assert union["tok_ms"] < min(slots["tok_ms"], got["shipped"]["tok_ms"])
    for r in (union, slots):
        assert "not measured" in r["assumption"]
        rest = r["nsa_ms"] - r["tok_ms"]
        assert abs(rest - (got["shipped"]["nsa_ms"] - got["shipped"]["tok_ms"])) < 1e-2  # nothing else moved
