"""bench/bwd_split_whatif.py (bench/RESULTS.md "bwdsplit"): the backward forced split priced by the
model's own kernels; what the section's verdict (not built) rests on."""

from __future__ import annotations

from tests.fixtures.bench import load_bench

bs = load_bench("bwd_split_whatif")


def test_the_split_is_slower_on_hopper_and_takes_no_a100_target() -> None:
    """8k and 64k: the walk keeps at most 1 - the local share of its time (2 of 16 entries past the
    first blocks, mask-free on top), the H100 layer is not faster for it, the A100 is, but stays above
    every target."""
    rows = {(r["gpu"], r["T"]): r for r in bs.rows(Ts=(8192, 65536), gpus=("H100", "A100"))}
    for r in rows.values():
        assert 2 / 16 * 0.95 < r["local_share"] < 3 / 16, r
        shipped, split = r["keys_ms"]
        assert split < shipped * (1 - r["local_share"]), r
    assert rows["H100", 8192]["split"] >= rows["H100", 8192]["shipped"]
    for T, target in ((8192, 1.0), (65536, 0.2)):
        a = rows["A100", T]
        assert a["split"] < a["shipped"] and a["split"] > target, a
