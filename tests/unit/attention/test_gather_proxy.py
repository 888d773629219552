"""bench/gather_proxy.py, the query-major gather loops' GPU-free time proxy: what it reads from an
nvdisasm listing (bench/gather_sass.py) (latency rounds, shared-memory bytes of LDS / STS / LDSM / cp.async / wgmma, the
take path of a branchy loop), the measured points it takes from the committed GPU runs, the fit of its
constants from the recorded SASS counts, and the decision it gives selected.py's `tok_pipe`; the
shared-memory breakdown by role and the candidates' record (bench/gather_smem.py) (CPU, no compile)."""

from __future__ import annotations

import json

from tests.fixtures.bench import load_bench

gp = load_bench("gather_proxy")
gs = load_bench("gather_sass")

# nvdisasm's form: a prologue (a table load), a loop over entries holding an index load and a branch
# (`if take:`) over a round of K loads, a barrier, a round of V loads, shared-memory traffic and a
# product; then cp.async copies waited for with nothing in flight; the epilogue's store.
_LISTING = """
        /*0000*/                   LDG.E R2, desc[UR8][R4.64] ;
        /*0010*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0020*/                   DEPBAR.LE SB0, 0x0 ;
        /*0030*/                   LDG.E R20, desc[UR8][R22.64] ;
        /*0040*/               @P1 BRA `(.L_x_2) ;
        /*0050*/                   LDG.E.128 R24, desc[UR8][R26.64] ;
        /*0060*/                   LDG.E.128 R28, desc[UR8][R26.64+0x10] ;
        /*0070*/                   STS.128 [R5], R24 ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0090*/                   LDG.E.128 R32, desc[UR8][R30.64] ;
        /*00a0*/                   LDSM.16.M88.4 R12, [R5] ;
        /*00b0*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*00c0*/                   HGMMA.64x64x16.F32.BF16 R40, gdesc[UR4], R40 ;
        /*00d0*/                   HGMMA.64x128x16.F32.BF16 R56, R24, gdesc[UR8].tnspB, R56 ;
.L_x_2:
        /*00e0*/                   LDS.U16 R3, [R6] ;
        /*00f0*/                   LDGSTS.E.BYPASS.LTC128B.128 [R5], desc[UR8][R6.64] ;
        /*0100*/                   LDGDEPBAR ;
        /*0110*/               @P4 BRA `(.L_x_1) ;
        /*0120*/                   STG.E [R2.64], R3 ;
        /*0130*/                   EXIT ;
"""


def test_paths_split_the_take_branch_and_count_rounds_and_shared_bytes():
    got = gs.paths(_LISTING.splitlines(), trips=16)
    # Every entry: the index load (a round), the wait at the top for the copies issued with nothing
    # left in flight (a round), a 2-byte LDS and a 16-byte cp.async a lane.
    assert got["iter"] == {"insns": 7, "smem": 1, "smem_bytes": 32 * 2 + 32 * 16, "rounds": 2}
    # The take path: two rounds of loads (K, then V after the barrier), a 16-byte STS, an LDSM of 4
    # 8x8 matrices (16 B a lane), a wgmma with A and B from shared memory (64x16 + 64x16 bf16) and one
    # with A in registers (B: 128x16), each a quarter a warp of the warp group.
    hg = (64 * 16 * 2 + 64 * 16 * 2) / 4 + (128 * 16 * 2) / 4
    assert got["take"] == {"insns": 9, "smem": 2, "smem_bytes": 32 * 16 + 32 * 16 + hg, "rounds": 2}
    assert got["program"] == {"insns": 4, "smem": 0, "smem_bytes": 0, "rounds": 1}
    assert got["async"] == 1 and got["in_flight"] == 0 and got["mma"] == 3


def test_measured_points_come_from_the_runs_at_their_builds():
    pts = gp.measured_points()
    confs = {gp.configuration(p) for p in pts}
    assert len(pts) == 217 and len(confs) == 30
    # the suites: the paper's token-tile forward at 8 warps before ce226a4, at 2 after
    h100 = [p for p in pts if p["source"] == "2026-11-26-h100-speed.json" and p["kernel"] == "tok_fwd"]
    assert {p["shape"]: p["over"] for p in h100} == {"m7c": {}, "paper": {"warps_tok": 8}}
    # a probe variant: its base build's suite time plus the probe's change of the forward
    w2 = [p for p in pts if p["source"].endswith("probe-final.jsonl") and p["over"] == {"warps_tok": 2}]
    paper = next(p for p in w2 if p["shape"] == "paper")
    assert abs(paper["ms"] - (28.744 + 20.5752 - 31.6036)) < 1e-3
    # the dQ kernel does not read the forward's warps: its points at either build are one configuration
    assert gp.key("tok_dq", "paper", {}) in confs and not any(
        c.startswith("tok_dq") and "warps_tok" in c for c in confs
    )


def test_fit_reproduces_its_constants_and_calibrates():
    rows = gp.rows_of(gp.measured_points(), gp.load_sass())
    form = gp.FORMS["lat+serial+smem_bytes"]
    f = gp.fit(rows, form)
    for k, v in gp.FITTED.items():
        assert abs(f[k] - v) <= 0.002 * v, (k, f[k], v)
    s = gp.summary("lat+serial+smem_bytes", rows, form)
    assert s["points"] == s["within_30pct"] == s["held_out_within_35pct"] == 217
    # the branch-free loop's in-flight latency hiding never makes a term negative
    ln = {**rows[0], "in_flight": 2}
    assert all(v >= 0 for v in gp.proxy_cycles(ln, f).values())


def test_decision_is_what_selected_ships_and_the_model_prices():
    """The proxy ships tok_pipe 2 at 2 stages with the dQ at 2 warps at every G 16 shape on sm_90
    (0.86x the token tiles at the paper shape, 8k and 64k); `_config` ships exactly those settings
    at G > 8 on sm_90 and the measured loop on sm_80 and at G <= 8; CONFIG_FACTOR holds the proxy's
    ratios and the cost model applies them to the paper shape on Hopper only."""
    from nsa.attention.triton import selected as sel

    m = load_bench("attention_model")
    rows = gp.rows_of(gp.measured_points(), gp.load_sass())
    form = gp.FORMS["lat+serial+smem_bytes"]
    calib = gp.summary("lat+serial+smem_bytes", rows, form)
    priced = gp.price_rows(gp.fit(rows, form), gp.load_sass())
    for shape in ("paper", "g16d64", "g16d96"):
        d = gp.decision(calib, priced, shape)
        assert d["calibrated"] and d["ship"] == "tok_pipe 2, 1 token(s)", shape
        v = d["token_tiles"][d["ship"]]
        assert v["calibrated_domain"] and max(v["ratio"].values()) <= 0.9
        G, D = gp.SHAPES[shape]
        base = gp.run_base(D)
        want = {k: x for s in v["settings"].values() for k, x in s.items() if k != "TP" and base.get(k) != x}
        assert gp.shipped_settings(G, D, 90) == want, shape
        assert d["token_tiles"]["tok_pipe 2, 1 token(s)"]["settings"]["tok_dq"]["TP"] == 1
        if shape == "paper":
            assert {k: m.CONFIG_FACTOR[k] for k in ("tok_fwd@pipe", "tok_dq@pipe")} == gp.ship_factors(d)
    for G, D in ((16, 128), (6, 64), (1, 128)):
        assert gp.shipped_settings(G, D, 80) == {}
    assert gp.shipped_settings(6, 64, 90) == {}
    paper = m.SHAPES["paper"]
    kinds = {g: {k.name: k.kind for k in m.ours_on(8192, paper, m.GPUS[g])} for g in ("H100", "A100")}
    assert kinds["H100"]["sel_fwd"].endswith("@pipe") and kinds["H100"]["sel_bwd_dq"].endswith("@pipe")
    assert "@pipe" not in kinds["A100"]["sel_fwd"] + kinds["A100"]["sel_bwd_dq"]
    off = {k.name: k.kind for k in m.ours_on(8192, m.SHAPES["paper"], m.GPUS["H100"], tok_pipe=0)}
    assert "@pipe" not in off["sel_fwd"] + off["sel_bwd_dq"]
    assert sel._config(16, 128, 64, arch=90)["tok_pipe"] == 2
    # the measured loop stays a probe variant (bench/kernel_probe.py), as does its SASS (tok_pipe_sass)
    probe = load_bench("kernel_probe")
    measured = {k: v for k, v in gp.run_base(128).items() if k != "warps_tok"}
    assert {"shape": "paper", **measured} in probe.SEL_VARIANTS


# A key step's shared-memory traffic, one of each role (tokshm): a cp.async K/V write, an LDSM of the
# stage (K), an LDSM of Q above the stage, P through the scratch (STSM + LDSM), a row max across warps
# (32-bit STS / LDS), the dummy LDS beside cp.async, a synchronous load staged by STS, a wgmma with A
# (Q) and B (K) by descriptor.
_ROLES = """
.L_x_1:
        /*0000*/                   LDGSTS.E.BYPASS.128 [R115+0x800], desc[UR6][R8.64], P1 ;
        /*0010*/                   LDSM.16.M88.4 R36, [R108+UR4+0x1000] ;
        /*0020*/                   LDSM.16.M88.4 R32, [R106+UR4+0x8000] ;
        /*0030*/                   STSM.16.M88.4 [R96+0x9000], R8 ;
        /*0040*/                   LDSM.16.M88.4 R80, [R94+UR4+0x9000] ;
        /*0050*/                   STS [R100+0x9000], R35 ;
        /*0060*/                   LDS R86, [R97+0x9000] ;
        /*0070*/                   LDS RZ, [RZ] ;
        /*0080*/                   LDG.E.128 R112, desc[UR8][R26.64] ;
        /*0090*/                   STS.128 [R3+0xa000], R112 ;
        /*00a0*/                   HGMMA.64x64x16.F32.BF16 R88, gdesc[UR12], RZ, !UPT ;
        /*00b0*/               @P4 BRA `(.L_x_1) ;
        /*00c0*/                   EXIT ;
"""


def test_smem_roles_split_a_steps_bytes_by_what_they_move():
    got = gs.smem_roles(_ROLES.splitlines(), kv_bytes=0x8000)
    assert got == {
        "kv_write": 512 + 512,  # the cp.async and the STS of a synchronous load's registers
        "kv_read": 512,
        "invariant_read": 512 + 64 * 16 * 2 / 4,  # Q by LDSM above the stage; the wgmma's A
        "mma_descriptor": 64 * 16 * 2 / 4,  # its B (K)
        "conversion": 128 + 512,
        "row_stats": 128 + 128,
        "dummy": 128,
    }
    # the same byte rule as the proxy's features
    assert sum(got.values()) == gs.paths(_ROLES.splitlines(), trips=1)["iter"]["smem_bytes"]


def test_smem_record_matches_the_proxy_counts_and_config_ships_only_a_passing_candidate():
    gsm = load_bench("gather_smem")
    rows = json.loads(gsm.RECORD.read_text())
    roles = {r["smem_roles"]: r for r in rows if "smem_roles" in r}
    cands = [r for r in rows if "candidate" in r]
    assert set(roles) == set(gs.KERNELS)
    # The breakdown is the proxy's own byte count, split: the recorded SASS counts of the same builds.
    sass = gp.load_sass()
    same = 0
    for k, r in roles.items():
        c = sass.get(gp.key(k, "paper", gsm.shipped(k)))
        if c:
            assert c["iter"]["smem_bytes"] + c["take"]["smem_bytes"] == r["total_per_warp_step"]
            same += 1
    assert same >= 3
    assert [(r["candidate"], r["change"]) for r in cands] == gsm.CANDIDATES
    for r in cands:
        bar = all(x <= 1 - gsm.SHIP_GAIN for x in r["ratio"].values())
        assert r["passes"] == (r["domain"] == "calibrated" and not r["spill"] and bar)
        # selected._config takes a candidate's setting exactly where the proxy passes it
        assert (gsm._setting(r["candidate"], gsm.shipped(r["candidate"])) == r["setting"]) == r["passes"]
