"""The GPU suite's training section (issue 23, item 10; issue 20, item 4): which runs it makes, that
every run's command line is one nsa-train accepts, and that the 64k run's memory prediction command
is one bench/memory.py accepts. The runs themselves need CUDA; their `--set` lists are checked here
by nsa-train's own `--check`, so a GPU's minutes are not spent finding a bad key."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from nsa.attention.gpusuite.checks import Plan
from nsa.attention.gpusuite.training import (
    LONG_SEQ,
    MEMORY_SCRIPT,
    REPO,
    memory_prediction_command,
    read_train_metrics,
    train_runs,
    train_summary,
)
from nsa.train.cli import main

FULL = train_runs(Plan.for_mode("full"))
QUICK = train_runs(Plan.for_mode("quick"))
LONG = ("nsa", "full", False, LONG_SEQ)


def _key(r: dict) -> tuple:
    return (r["attention"], r["activation_checkpointing"], r["compile"], r["seq_len"])


def test_full_mode_runs_dense_and_nsa_x_checkpointing_x_compile_at_2k_and_8k_and_nsa_at_64k() -> None:
    want = set(itertools.product(("dense", "nsa"), ("none", "full"), (False, True), (2048, 8192))) | {LONG}
    assert [_key(r) for r in FULL] and set(map(_key, FULL)) == want and len(FULL) == len(want)
    assert len({r["name"] for r in FULL}) == len(FULL)  # one run dir and log each
    # The shipped setting's pair first, then the 64k run (issue 20, item 4): time cuts the tail.
    assert [_key(r) for r in FULL[:3]] == [("dense", "none", True, 2048), ("nsa", "none", True, 2048), LONG]


def test_quick_mode_runs_the_shipped_pair_at_2k_then_nsa_at_64k_with_its_memory_prediction() -> None:
    assert [_key(r) for r in QUICK] == [("dense", "none", True, 2048), ("nsa", "none", True, 2048), LONG]
    long = QUICK[2]
    assert long["config"] == "configs/m7c_64k.yaml" and long["predict_memory"] and long["batch_size"] == 1
    assert not any(r.get("predict_memory") for r in QUICK[:2])


def test_the_64k_runs_memory_prediction_is_a_command_bench_memory_accepts(monkeypatch) -> None:
    """The prediction's own command line, run here at T 1024 with 2 layers (the same keys; the whole 64k step takes ~6 s on meta):
    bench/memory.py must accept every --set and count the run's checkpointing and batch."""
    import importlib.util

    cmd = memory_prediction_command(QUICK[2])
    assert cmd[1] == str(MEMORY_SCRIPT) and cmd[cmd.index("--checkpointing") + 1] == "full"
    assert f"train.seq_len={LONG_SEQ}" in cmd and not any(x.startswith("parallel.") for x in cmd)
    spec = importlib.util.spec_from_file_location("bench_memory", MEMORY_SCRIPT)
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    monkeypatch.chdir(REPO)
    rows: list[str] = []
    memory.main([*cmd[2:], "--T", "1024", "--set", "model.n_layers=2"], out=rows.append)
    (row,) = [json.loads(r) for r in rows]
    assert (row["T"], row["batch"], row["checkpointing"], row["attention"]) == (1024, 1, "full", "nsa")
    assert row["total_gib"] > 0


@pytest.mark.parametrize("run", FULL, ids=[r["name"] for r in FULL])
def test_every_run_is_a_valid_nsa_train_command_line(run: dict, capsys, monkeypatch) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    argv = ["--config", str(REPO / run["config"]), "--check"]
    for s in run["sets"]:
        argv += ["--set", s]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    for line in (
        f"attention: {run['attention']}",
        f"activation_checkpointing: {run['activation_checkpointing']}",
        f"compile: {str(run['compile']).lower()}",
        f"seq_len: {run['seq_len']}",
        f"batch_size: {run['batch_size']}",
    ):
        assert line in out, line


def test_records_and_summary_carry_rounded_figures(tmp_path) -> None:
    """The first GPU run's summary printed "442863.0 tok/s, 5.726212024688721 GiB": records keep GiB
    to 3 decimals and tokens/s whole, the summary prints 2 decimals and thousands separators, the 64k
    run its prediction, and a failed run why."""
    rows = [
        {"step": s, "loss": 3.0 - 0.1 * s, "tokens_per_s": tps, "memory/max_allocated_gb": 5.726212024688721,
         "memory/max_reserved_gb": 6.123456789, "throughput/mfu": tps / 4e6}
        for s, tps in enumerate([821.3, 185330.2, 442863.4, 440000.0, 450000.0, 442863.4], 1)
    ]  # fmt: skip
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = read_train_metrics(metrics)
    assert got["tokens_per_s_median"] == 442863 and isinstance(got["tokens_per_s_median"], int)
    assert got["peak_allocated_gib"] == 5.726 and got["peak_reserved_gib"] == 6.123
    assert got["first_loss"] == 2.9 and got["final_loss"] == rows[-1]["loss"] and got["mfu_median"] == 0.1107
    short = {**QUICK[0], **got, "ok": True}
    long = {**QUICK[2], **got, "predicted_gib": 6.8, "ok": True}
    failed = {**QUICK[1], "ok": False, "exit_code": 1}
    text = train_summary([short, long, failed], ["x-run"])
    assert text == (
        "dense-2048-ac_none-compiled: 442,863 tok/s, 5.73 GiB; "
        "nsa-65536-ac_full-eager: 442,863 tok/s, 5.73 GiB (bench/memory.py predicts 6.80); "
        "nsa-2048-ac_none-compiled: ? tok/s, ? GiB FAILED (exit code 1); skipped for time: x-run"
    )


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a GPU host would really train at 64k")
def test_the_train_section_on_a_host_without_a_gpu_records_why_and_still_predicts_the_64k_peak(
    tmp_path,
) -> None:
    """Section f for real, on CPU, with the 64k run only: nsa-train refuses `train.device: cuda` here
    (exit 2), so the record is a failure that says why (log tail, the log written), while
    bench/memory.py, started beside it, still predicts the step's peak (~9.7 GiB: 6.8 with the
    query-major selected backward, + its key-major successor's 3.2 GB of fp32 dQ partials)."""
    from nsa.attention.gpusuite.budget import Suite
    from nsa.attention.gpusuite.training import train

    plan = Plan.for_mode("quick")
    plan.train_seqs = []  # the 64k run alone
    suite = Suite(tmp_path, "quick", 120.0, ("train",), command="test")
    suite.start_section("train")
    res = train(plan, suite)
    (rec,) = res["records"]
    assert res["ok"] is False and rec["name"] == "nsa-65536-ac_full-eager" and rec["exit_code"] == 2
    assert any("train.device is 'cuda'" in line for line in rec["log_tail"])
    assert "FAILED (exit code 2)" in res["summary"]
    assert (tmp_path / "train-nsa-65536-ac_full-eager.log").read_text().strip()
    pred = rec["memory_predicted"]
    assert (pred["T"], pred["batch"], pred["checkpointing"]) == (LONG_SEQ, 1, "full") and 5 < pred[
        "total_gib"
    ] < 12
    assert [i["item"] for i in res["items"]] == ["nsa-65536-ac_full-eager"] and res["skipped_for_time"] == []
