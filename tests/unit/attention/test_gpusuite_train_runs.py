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
    # The shipped setting's NSA run, the 64k run (issue 20, item 4), then NSA's dense reference: time
    # cuts the tail. In every pair NSA comes first.
    assert [_key(r) for r in FULL[:3]] == [("nsa", "none", True, 2048), LONG, ("dense", "none", True, 2048)]
    assert all(a["attention"] == "nsa" and b["attention"] == "dense" for a, b in zip(FULL[3::2], FULL[4::2]))


def test_quick_mode_runs_nsa_at_2k_then_at_64k_with_its_memory_prediction_then_dense_at_2k() -> None:
    assert [_key(r) for r in QUICK] == [("nsa", "none", True, 2048), LONG, ("dense", "none", True, 2048)]
    long = QUICK[1]
    assert long["config"] == "configs/m7c_64k.yaml" and long["predict_memory"] and long["batch_size"] == 1
    assert not any(r.get("predict_memory") for r in (QUICK[0], QUICK[2]))


def test_the_64k_runs_memory_prediction_is_a_command_bench_memory_accepts(monkeypatch) -> None:
    """The prediction's own command line, run here at T 1024 with 2 layers (the same keys; the whole 64k step takes ~6 s on meta):
    bench/memory.py must accept every --set and count the run's checkpointing and batch."""
    import importlib.util

    cmd = memory_prediction_command(QUICK[1])
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
    short = {**QUICK[2], **got, "ok": True}
    long = {**QUICK[1], **got, "predicted_gib": 6.8, "ok": True}
    failed = {**QUICK[0], "ok": False, "exit_code": 1}
    cut = {**QUICK[0], **got, "steps": 12, "ok": True, "cut_for_time": {"steps_logged": 9, "after_s": 54.04}}
    text = train_summary([short, long, failed, cut], ["x-run"])
    assert text == (
        "dense-2048-ac_none-compiled: 442,863 tok/s, 5.73 GiB; "
        "nsa-65536-ac_full-eager: 442,863 tok/s, 5.73 GiB (bench/memory.py predicts 6.80); "
        "nsa-2048-ac_none-compiled: ? tok/s, ? GiB FAILED (exit code 1); "
        "nsa-2048-ac_none-compiled: 442,863 tok/s, 5.73 GiB (cut for time after 54 s, 9 of 12 steps); "
        "skipped for time: x-run"
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


# A stand-in for nsa-train, run as a real subprocess by the section: it appends one metrics.jsonl row
# a step (as the trainer does with log_every 1) every 0.1 s, starts a child that would outlive it
# unless its process group is killed, and then, by mode: steps on for ever ("steps"), stops logging
# after 3 steps ("hang"), exits 1 after 3 ("crash"), or never logs a step ("stall0").
FAKE_TRAINER = """
import json, pathlib, subprocess, sys, time
run_dir, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
run_dir.mkdir(parents=True, exist_ok=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(run_dir / "child.pid").write_text(str(child.pid))
print("[nsa] compile: 1 graphs", flush=True)
if mode == "stall0":
    time.sleep(600)
for step in range(1, 100000):
    if step > 3 and mode == "hang":
        time.sleep(600)
    if step > 3 and mode == "crash":
        print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
        sys.exit(1)
    row = {"step": step, "loss": 3.0 / step, "tokens_per_s": 1000.0 * step, "memory/max_allocated_gb": 1.5}
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\\n")
    print(f"[nsa] step {step}/12", flush=True)
    time.sleep(0.1)
"""


def _gone(pid: int) -> bool:
    import time

    for _ in range(40):  # killed: gone, or a zombie until init reaps it
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split(") ")[-1].startswith("Z"):
            return True
        time.sleep(0.05)
    return False


def _section(tmp_path, monkeypatch, mode: str, budget: float) -> dict:
    """Section f for real with one run (estimate 0.5 s) whose process is FAKE_TRAINER in `mode`;
    the hang allowances cut to 1 s after a step and 2.5 s before the first (the floor: 0.01 x the
    run's 53 s start estimate is less)."""
    import sys

    from nsa.attention.gpusuite import training
    from nsa.attention.gpusuite.budget import Suite

    run = {**QUICK[0], "name": f"fake-{mode}", "steps": 12, "estimate_s": 0.5}
    monkeypatch.setattr(training, "train_runs", lambda plan: [run])
    monkeypatch.setattr(
        training, "train_command", lambda r, d: [sys.executable, "-c", FAKE_TRAINER, str(d), mode]
    )
    monkeypatch.setattr(training, "HANG_STEP_S", 1.0)
    monkeypatch.setattr(training, "HANG_FIRST_FACTOR", 0.01)
    monkeypatch.setattr(training, "HANG_FIRST_MIN_S", 2.5)
    monkeypatch.setattr(training, "POLL_S", 0.05)
    suite = Suite(tmp_path, "full", budget, ("train",), command="test")
    suite.start_section("train")
    res = training.train(Plan.for_mode("quick"), suite)
    assert len(res["records"]) == 1 and res["items"][0]["item"] == run["name"]
    assert _gone(int((tmp_path / "train" / run["name"] / "child.pid").read_text()))  # no orphan left
    assert (tmp_path / f"train-{run['name']}.log").read_text().startswith("[nsa] compile")
    return res


def test_a_run_the_budget_cuts_while_it_makes_steps_is_cut_for_time_not_failed(tmp_path, monkeypatch) -> None:
    """The 2026-11-26c H100 run: NSA compiled was making a step each ~0.12 s when the section's 54 s
    ended at step 9 of 12, and the section read FAILED "timed out". Now it is cut for time, with
    the tokens/s of the steps it made, and the section passes."""
    res = _section(tmp_path, monkeypatch, "steps", budget=2.0)
    (rec,) = res["records"]
    assert res["ok"] is True and rec["ok"] is True and rec["exit_code"] is None and "error" not in rec
    assert rec["cut_for_time"]["steps_logged"] >= 5 and rec["tokens_per_s_median"] > 2000
    assert 1.9 <= rec["cut_for_time"]["after_s"] <= 4.0 and "log_tail" not in rec
    assert "(cut for time after 2 s," in res["summary"] and "FAILED" not in res["summary"]


def test_a_run_that_stops_logging_steps_is_a_hang_killed_and_failed_with_its_log_tail(
    tmp_path, monkeypatch
) -> None:
    res = _section(tmp_path, monkeypatch, "hang", budget=20.0)
    (rec,) = res["records"]
    assert res["ok"] is False and rec["ok"] is False and "cut_for_time" not in rec
    assert rec["error"].startswith("hung: no new step for 1 s after step 3 of 12, killed")
    assert rec["hung"]["steps_logged"] == 3 and 1.0 <= rec["hung"]["idle_s"] <= 2.0
    assert rec["seconds"] < 5.0 and rec["log_tail"][-1] == "[nsa] step 3/12"  # not the 20 s budget
    assert rec["tokens_per_s_median"] == 3000 and "FAILED (hung: no new step" in res["summary"]


def test_a_run_that_never_logs_a_step_is_a_hang_once_past_its_first_step_allowance(
    tmp_path, monkeypatch
) -> None:
    res = _section(tmp_path, monkeypatch, "stall0", budget=20.0)
    (rec,) = res["records"]
    assert res["ok"] is False and "before its first step of 12, killed" in rec["error"]
    assert rec["hung"]["steps_logged"] == 0 and 2.5 <= rec["hung"]["idle_s"] <= 4.0  # the floor, not 0.53 s
    assert rec["seconds"] < 7.0 and "tokens_per_s_median" not in rec


def test_a_run_cut_for_time_before_its_first_step_leaves_the_section_skipped(tmp_path, monkeypatch) -> None:
    """Still within its first step's allowance (compiling) when the section's time ends: nothing to
    judge, so not a failure; the section has no figures and says why."""
    res = _section(tmp_path, monkeypatch, "stall0", budget=1.0)
    (rec,) = res["records"]
    assert res["ok"] is None and rec["ok"] is None and rec["cut_for_time"]["steps_logged"] == 0
    assert res["skipped"] == "time budget: all 1 run(s) cut for time before their first step"


def test_a_run_that_crashes_is_failed_with_its_exit_code_and_log_tail(tmp_path, monkeypatch) -> None:
    res = _section(tmp_path, monkeypatch, "crash", budget=20.0)
    (rec,) = res["records"]
    assert res["ok"] is False and rec["exit_code"] == 1 and "cut_for_time" not in rec
    assert "illegal memory access" in rec["log_tail"][-1] and "FAILED (exit code 1)" in res["summary"]
