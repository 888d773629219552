"""bench/select_proxy.py, the selection kernel's GPU-free time proxy, and bench/select_sass.py's split
of the SASS into the paths a program takes: the split of a listing, the merge test against eager's
top-n (`selection.top_blocks`) on the suite's inputs, the dynamic count against a count program by
program, the measured points read from the committed GPU runs, and the fit (CPU, no compile)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from nsa.attention.selection import top_blocks
from tests.fixtures.bench import BENCH, load_bench

sp = load_bench("select_proxy")
ss = load_bench("select_sass")  # the module select_proxy loaded

# A listing in nvdisasm's form: prologue (3), loop with an MMA (always: 4 + branch + backedge), two
# predicated forward branches over merges of 2 and 3 instructions, epilogue to EXIT (2), and the
# trap loop after EXIT (not counted).
_LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_CTAID.X ;
        /*0020*/              @!P0 BRA `(.L_x_9) ;
.L_x_1:
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, RZ ;
        /*0040*/                   SHFL.BFLY PT, R5, R4, 0x10, 0x1f ;
        /*0050*/              @!P1 BRA `(.L_x_2) ;
        /*0060*/                   STS [R2], R5 ;
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_2:
        /*0080*/              @!P2 BRA `(.L_x_3) ;
        /*0090*/                   LDS R6, [R2] ;
        /*00a0*/                   IADD3 R7, R6, 0x1, RZ ;
        /*00b0*/                   SEL R7, R7, RZ, P3 ;
.L_x_3:
        /*00c0*/                   ISETP.GE.AND P4, PT, R0, R3, PT ;
        /*00d0*/               @P4 BRA `(.L_x_1) ;
.L_x_9:
        /*00e0*/                   STG.E [R8.64], R7 ;
        /*00f0*/                   EXIT ;
.L_x_4:
        /*0100*/                   BRA `(.L_x_4);
"""


def test_split_separates_the_merge_branches_from_the_always_run_loop():
    p = ss.split(_LISTING.splitlines())
    assert p["prologue"]["insns"] == 3
    assert p["epilogue"]["insns"] == 2
    assert [b["insns"] for b in p["branches"]] == [2, 3]
    assert (p["branches"][0]["bar"], p["branches"][0]["lds_sts"], p["branches"][1]["lds_sts"]) == (1, 1, 1)
    # HMMA, SHFL, the two branch instructions, ISETP, the backedge.
    assert p["always"]["insns"] == 6
    assert (p["always"]["mma"], p["always"]["shfl"]) == (1, 1)
    # By opcode class: HMMA, ISETP, the three BRA, SHFL (no class of its own: "int"); LDS/STS each.
    ops = p["always_ops"]
    assert (ops["mma"], ops["predicate"], ops["branch"], sum(ops.values())) == (1, 1, 3, 6)
    assert [b["smem"] for b in p["branch_ops"]] == [1, 1]
    whole = ss.count(_LISTING.splitlines())
    assert whole["loop"]["insns"] == 6 + 2 + 3


def test_by_line_attributes_the_always_run_loop_to_the_kernel_line_before_it():
    """select_sass.by_line (`--lines`): the loop's always-run part by the kernel source line that
    emitted it, triton's library lines (standard.py) going to the kernel line before them, the
    merge branches left out."""
    tagged = []
    for ln in _LISTING.splitlines():
        if "HMMA" in ln:
            tagged.append('\t//## File "/x/compressed_select.py", line 7')
        if "SHFL" in ln:
            tagged.append('\t//## File "/y/triton/language/standard.py", line 293')
        if "ISETP" in ln:
            tagged.append('\t//## File "/x/compressed_select.py", line 9')
        tagged.append(ln)
    rows = ss.by_line(tagged)
    # Line 7: HMMA, SHFL (standard.py) and the two forward branches; line 9: ISETP and the backedge.
    assert set(rows) == {7, 9}
    assert (rows[7]["insns"], rows[7]["mma"], rows[7]["shfl"], rows[7]["lds_sts"]) == (4, 1, 1, 0)
    assert rows[9]["insns"] == 2
    assert sum(r["insns"] for r in rows.values()) == ss.split(_LISTING.splitlines())["always"]["insns"]


@pytest.fixture(scope="module")
def small() -> tuple[torch.Tensor, torch.Tensor]:
    """Every token of M7C at T 640 (B 1, both KV heads): 80 windows of 8 per sequence."""
    return sp.window_scores("m7c", 640, 1, 160)


def test_merge_test_is_a_block_entering_eagers_top_n(small):
    """Tile jb merges for token t iff eager's top-n of the blocks up to the end of tile jb
    (`top_blocks`, forced blocks and tie-break included) holds a block of tile jb."""
    t, scores = small
    assert t.shape == (160, 8) and sorted(set(t.flatten().tolist())) == list(range(640))
    bj, ns = 2, scores.shape[-1]
    E = sp.enter_flags(sp.block_keys(t, scores), bj)
    assert E.shape == (160, 8, -(-ns // bj))
    tt = t.flatten()
    flat = scores.reshape(-1, ns)
    for jb in range(E.shape[-1]):
        idx, valid = top_blocks(flat[:, : (jb + 1) * bj], tt, 64, 16)
        want = ((idx >= jb * bj) & valid).any(1)
        assert torch.equal(E[..., jb].flatten(), want), jb
    assert E[..., 0].all()  # block 0 is forced: the first tile always merges
    assert not E.all() and E.any(-1).all()


def test_dynamic_count_is_the_program_by_program_count(small, monkeypatch):
    """With every token sampled, the count equals one taken program by program, for merged-at-once
    and halves, at 1, 2, 4 and 8 tokens a tile."""
    T, bj, lp = 640, 2, 64
    t, scores = small
    E = sp.enter_flags(sp.block_keys(t, scores), bj).reshape(2, 640, -1)  # [seq, token, tile]
    part = {"insns": 0, "lds_sts": 0}
    for bt, halves in [(1, 0), (2, 0), (2, 1), (4, 1), (8, 0), (8, 1)]:
        paths = {
            "prologue": {**part, "insns": 7},
            "epilogue": {**part, "insns": 5},
            "always": {"insns": 11, "lds_sts": 1},
            "branches": [{"insns": 13, "lds_sts": 2}] * (2 if halves else 1),
        }
        got = sp.dynamic_count("m7c", T, 1, bt, halves, paths, warps=2, windows=160, bj=bj)
        want = 0
        for seq in range(2):
            for pid in range(-(-T // bt)):
                tok = list(range(pid * bt, min(T, pid * bt + bt)))
                n = -(-((tok[-1]) // lp + 1) // bj)
                groups = [tok[: (bt + 1) // 2], tok[(bt + 1) // 2 :]] if halves else [tok]
                want += 12 + 11 * n
                want += sum(13 * int(E[seq, g][:, :n].any(0).sum()) for g in groups if g)
        assert got["warp_insns"] == pytest.approx(2 * want, rel=1e-9), (bt, halves)


def test_the_proxy_leaves_sys_path_alone():
    """bench/ never goes on sys.path (bench/launcher.py would shadow the launcher package)."""
    assert str(BENCH) not in sys.path and sp.select_sass is ss


def test_measured_points_are_the_gpu_runs_with_recorded_sass():
    pts = sp.measured_points()
    assert len(pts) == 37
    by = {(p["source"], p["shape"], p["T"], p["variant"]): p for p in pts}
    final = by[("speed-int32", "m7c", 65536, "shipped")]
    assert (final["kernel"], final["bt"], final["warps"], final["halves"], final["ms"]) == (
        "int32",
        2,
        2,
        1,
        6.942,
    )
    v0 = by[("probe", "paper", 32768, "select_v0=1")]
    assert (v0["kernel"], v0["bt"], v0["warps"], v0["ms"]) == ("v0", 2, 4, 22.8735)
    assert by[("probe", "paper", 32768, "bt_sel=4")]["bt"] == 4
    sass = json.loads(sp.SASS_FILE.read_text())
    for p in pts:
        c = sass[sp._key(p)]
        assert len(c["paths"]["branches"]) == (2 if p["halves"] else 1)
        assert c["triton"] == "3.6.0"


def test_fit_recovers_the_constants_of_exact_rows():
    unit = sp.H200["sms"] * sp.H200["sched"] * sp.H200["ghz"] * 1e6
    rows = []
    for i, (ins, lds) in enumerate([(4e9, 3e8), (6e9, 2e8), (2e9, 4e8), (5e9, 1e8)]):
        dyn = {"insns": ins, "lds_sts": lds, "ldl_stl": 0}
        rows.append(
            {"dyn": dyn, "resident_warps": 16, "ms": (1.4 * ins + 8.0 * lds) / unit, "source": str(i)}
        )
    f = sp.fit(rows)
    assert f["insn"] == pytest.approx(1.4) and f["smem"] == pytest.approx(8.0)
    assert all(abs(r["error"]) < 1e-9 for r in sp.predict(rows, f))
    # 2 warps a scheduler: latency, not issue, and that row alone sets `lat`.
    slow = {"dyn": rows[0]["dyn"], "resident_warps": 8, "ms": 6.0 * 4e9 / 2 / unit, "source": "x"}
    spilled = {**rows[1], "dyn": {**rows[1]["dyn"], "ldl_stl": 1}, "ms": 1.0}  # outside: not fitted
    f = sp.fit([*rows, slow, spilled])
    assert (f["insn"], f["smem"], f["lat"]) == pytest.approx((1.4, 8.0, 6.0))
    got = sp.predict([slow, rows[0], spilled], f)
    assert abs(got[0]["error"]) < 1e-9 and abs(got[1]["error"]) < 1e-9  # 16 warps: issue still bounds
    assert not got[2]["in_domain"] and got[0]["in_domain"]


# Two key-tile loops (select_split: the interior's, then the edge's), each with an MMA and one
# predicated merge branch, tile 0 straight-line before them with its own merge branch.
_LISTING_SPLIT = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, RZ ;
        /*0020*/              @!P1 BRA `(.L_x_7) ;
        /*0030*/                   IADD3 R7, R6, 0x1, RZ ;
.L_x_7:
        /*0040*/              @!P0 BRA `(.L_x_3) ;
.L_x_1:
        /*0050*/                   HMMA.16816.F32.BF16 R4, R8, R12, RZ ;
        /*0060*/              @!P1 BRA `(.L_x_2) ;
        /*0070*/                   STS [R2], R5 ;
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
.L_x_2:
        /*0090*/               @P4 BRA `(.L_x_1) ;
.L_x_3:
        /*00a0*/                   MOV R3, R2 ;
.L_x_4:
        /*00b0*/                   HMMA.16816.F32.BF16 R4, R8, R12, RZ ;
        /*00c0*/                   ISETP.GE.AND P4, PT, R0, R3, PT ;
        /*00d0*/              @!P2 BRA `(.L_x_5) ;
        /*00e0*/                   LDS R6, [R2] ;
        /*00f0*/                   IADD3 R7, R6, 0x1, RZ ;
        /*0100*/                   SEL R7, R7, RZ, P3 ;
.L_x_5:
        /*0110*/               @P4 BRA `(.L_x_4) ;
        /*0120*/                   STG.E [R8.64], R7 ;
        /*0130*/                   EXIT ;
.L_x_6:
        /*0140*/                   BRA `(.L_x_6);
"""


def test_split_loops_gives_each_key_tile_loop_its_paths():
    p = ss.split_loops(_LISTING_SPLIT.splitlines())
    i, e = p["loops"]
    # Interior: HMMA, its branch, the backedge always; STS + BAR on merges.
    assert (i["always"]["insns"], [b["insns"] for b in i["branches"]]) == (3, [2])
    # Edge: HMMA, ISETP, its branch, the backedge always; LDS, IADD3, SEL on merges.
    assert (e["always"]["insns"], [b["insns"] for b in e["branches"]]) == (4, [3])
    assert e["branches"][0]["lds_sts"] == 1 and i["branches"][0]["bar"] == 1
    # Once: MOV, tile 0's HMMA, BRA and merge (IADD3), the guard BRA, the MOV between, STG, EXIT.
    assert p["once"]["insns"] == 8 and p["once"]["mma"] == 1


def _interior_end_by_definition(t0: int, t_last: int, bj: int, bl=32, d=16, lp=64) -> int:
    """The first key tile from 1 on that some token of the program sees partly, or holds a block
    that is no candidate or forced (block 0, t0 // l' - 1 and later), or the tile count."""
    r, n = lp // d, -(-(t_last // lp + 1) // bj)
    end = 1
    while end < n:
        blocks = range(end * bj, (end + 1) * bj)
        if ((end + 1) * bj * r - 1) * d + bl - 1 > t0 or any(
            j * lp > t0 or j >= t0 // lp - 1 for j in blocks
        ):
            break
        end += 1
    return end


def test_dynamic_count_split_is_the_program_by_program_count(small):
    """select_split's count with every token sampled equals one taken program by program: the code
    outside the loops (tile 0's among it) once a program, the interior tiles [1, end) and the edge
    tiles [end, n) each on their loop's path, their merge branches on the tiles that merge; at 1, 2
    and 4 tokens a tile, merged at once and in halves."""
    T, bj, lp = 640, 2, 64
    t, scores = small
    E = sp.enter_flags(sp.block_keys(t, scores), bj).reshape(2, 640, -1)  # [seq, token, tile]
    z = {"insns": 0, "lds_sts": 0}
    for bt, halves in [(1, 0), (2, 1), (4, 0), (4, 1)]:
        nb = 2 if halves else 1
        loops = [
            {"always": {"insns": 11, "lds_sts": 1}, "branches": [{**z, "insns": 13}] * nb},
            {"always": {"insns": 17, "lds_sts": 1}, "branches": [{**z, "insns": 19}] * nb},
        ]
        paths = {"loops": {"once": {**z, "insns": 7}, "loops": loops}}
        got = sp.dynamic_count_split("m7c", T, 1, bt, paths, warps=2, windows=160, bj=bj)
        want, n_int = 0, 0
        for seq in range(2):
            for pid in range(-(-T // bt)):
                tok = list(range(pid * bt, min(T, pid * bt + bt)))
                n = -(-((tok[-1]) // lp + 1) // bj)
                end = _interior_end_by_definition(tok[0], tok[-1], bj)
                assert sp.interior_end(tok[0], tok[-1], bj) == end
                n_int += end - 1
                groups = [tok[: (bt + 1) // 2], tok[(bt + 1) // 2 :]] if halves else [tok]
                want += 7 + 11 * (end - 1) + 17 * (n - end)
                for g in groups:
                    if g:
                        m = E[seq, g][:, :n].any(0)
                        want += 13 * int(m[1:end].sum()) + 19 * int(m[end:].sum())
        assert n_int > 0 and got["interior_tiles"] == n_int
        assert got["warp_insns"] == pytest.approx(2 * want, rel=1e-9), (bt, halves)


def test_the_a100_count_of_the_split_loop_reads_its_record():
    """bench/attention_cost/sass80.py prices select_split (and with select_shm) from the A100 record's
    split entries (no compile): its interior and edge tiles and tile 0 are the launch's key tiles, each counted once;
    at M7C 64k it issues fewer instructions than the CUT loop at the same setting, more than none."""
    from nsa.attention.gpusuite.modelcheck import load_model

    m = load_model()
    sass80, counts = sys.modules["attention_cost.sass80"], sys.modules["attention_cost.counts"]
    s = m.SHAPES["m7c"]
    bj = counts._sel_tiles(s)["BJ"]
    for T, bt in [(8192, 4), (65536, 4), (3000, 2)]:
        progs, n_int, n_edge = sass80.split_tiles(T, s, bt, bj)
        assert progs + n_int + n_edge == counts._cmp_select_work(T, s, 1, bt)["steps"]
        assert n_int > 0
    launch = {"bt_sel": 4, "warps_sel": 2, "halves_sel": 1, "maxnreg_sel": 168}
    cut = sass80.select_work(65536, s, launch)
    split = sass80.select_work(65536, s, {**launch, "select_split": 1})
    assert 0.8 * cut["warp_insns"] < split["warp_insns"] < 0.97 * cut["warp_insns"]
    assert split["resident_warps"] == cut["resident_warps"]
    # select_shm beside it (sm_80's shipped pair, its own record): Eq. 9 without the two gathers, a
    # quarter fewer shared-memory accesses, about the same instructions; neither switch off the CUT
    # loop (the kernel runs them on it only, compressed._split_of)
    pair = sass80.select_work(65536, s, {**launch, "select_split": 1, "select_shm": 1})
    assert pair["warp_smem"] < 0.8 * split["warp_smem"]
    assert 0.95 * split["warp_insns"] < pair["warp_insns"] < 1.05 * split["warp_insns"]
    assert (
        sass80.select_work(65536, s, {**launch, "select_split": 1, "select_shm": 1, "select_cut": 0}) == cut
    )


def test_predict_refuses_the_shipped_insertion_build_with_exit_2(capsys, monkeypatch):
    """--predict on the shipped M7C selection on sm_90 (1 warp, select_insert 2) exits 2 naming the
    setting and the way to predict without it, before compiling or fitting anything (it asserted 2
    loops on triton 3.6's SASS and crashed, and on 3.9 priced the insertion paths as merges of halves);
    --variants names such a point instead of its rows; the build without the insertion is counted."""
    from nsa.attention.triton import compressed as cmp

    assert cmp._config(6, 64, 16, 32, 16, 64, 90)["select_insert"] == 2  # the shipped build
    monkeypatch.setattr(sp, "sass_counts", lambda *a, **k: pytest.fail("compiled"))
    monkeypatch.setattr(sp, "measured_points", lambda: pytest.fail("fitted"))
    assert sp.main(["--predict", "m7c:8192:1"]) == 2
    err = capsys.readouterr().err
    assert "m7c:8192:1 on sm_90" in err and "select_insert 2" in err and "--set select_insert=0" in err
    skipped: list = []
    with pytest.raises(sp.Unpredictable, match="select_insert 1"):
        sp.candidate_rows(["m7c:8192:1"], {"select_insert": 1}, "int32", 8)
    assert sp.candidate_rows(["m7c:8192:1", "m7c:65536:1"], {}, "int32", 8, skipped=skipped) == []
    assert [s for s, _ in skipped] == ["m7c:8192:1", "m7c:65536:1"]
    # without it (the paper's 4-warp build): counted (the compile stubbed by a recorded split)
    z = {"insns": 0, "lds_sts": 0}
    paths = {"prologue": {**z, "insns": 5}, "epilogue": {**z, "insns": 3}, "always": {**z, "insns": 11},
             "branches": [{**z, "insns": 13}]}  # fmt: skip
    rec = {"registers": 128, "spill": 0, "smem": 0, "triton": "x", "paths": paths}
    monkeypatch.setattr(sp, "sass_counts", lambda *a, **k: rec)
    (row,) = sp.candidate_rows(["paper:2048:1"], {"select_insert": 0}, "int32", 8, skipped=skipped)
    assert row["warps"] == 4 and row["warp_insns"] > 0 and len(skipped) == 2


def test_the_count_refuses_a_loop_whose_branches_are_not_its_merges(small):
    """A key-tile loop with other than 1 or 2 data-dependent branches (triton 3.9's listing of the
    insertion build: 4 a loop) or a split build's SASS with other than 2 loops (3.6's: the insertion
    paths laid out after the loop, jumping back, read as 64 overlapping loops) is refused, not priced
    as merges of halves."""
    z = {"insns": 1, "lds_sts": 0}
    four = {"always": z, "branches": [z] * 4}
    with pytest.raises(sp.Unpredictable, match="4 data-dependent branches"):
        sp.dynamic_count_split("m7c", 640, 1, 2, {"loops": {"once": z, "loops": [four, four]}}, 1, 160, 2)
    with pytest.raises(sp.Unpredictable, match="64 key-tile loops"):
        sp.dynamic_count_split("m7c", 640, 1, 2, {"loops": {"once": z, "loops": [four] * 64}}, 1, 160, 2)
    paths = {"prologue": z, "epilogue": z, "always": z, "branches": [z] * 3}
    with pytest.raises(sp.Unpredictable, match="3 data-dependent branches"):
        sp.dynamic_count("m7c", 640, 1, 2, 1, paths, 1, 160, 2)


def test_entry_counts_are_the_merge_test_and_groups_take_their_most():
    """bench/select_entries.py (the insertion's shares): a token's count of entering keys is nonzero
    exactly where `enter_flags` merges its tile; a group's share is of the most of its tokens' counts,
    over the tiles its program walks, and the four shares sum to 1 (M7C at 4k: 64 blocks, tiles of 4,
    so the top-16 fills and some tiles take one or two keys)."""
    se = load_bench("select_entries")
    t, scores = sp.window_scores("m7c", 4096, 1, 64)
    keys = sp.block_keys(t, scores)
    counts = se.entry_counts(t, keys, bj=4)
    assert torch.equal(counts > 0, sp.enter_flags(keys, 4))
    one = se.shares(t, counts, 1, bj=4)
    four = se.shares(t, counts, 4, bj=4)
    for sh in (one, four):
        assert sum(sh[k] for k in ("none", "one", "two", "more")) == pytest.approx(1, abs=1e-3)
    most = counts.reshape(64, 2, 4, -1).amax(2)  # [window, group, tile]
    walked = torch.arange(most.shape[-1]) < -(-(t[:, 3::4] // 64 + 1) // 4)[..., None]
    assert four["tiles"] == int(walked.sum())
    assert four["two"] == pytest.approx(float(((most == 2) & walked).sum()) / four["tiles"], abs=1e-4)
    assert one["one"] > 0 and one["two"] > 0
    assert four["none"] < one["none"] and four["more"] > one["more"]  # a group merges where one token does
