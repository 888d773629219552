"""Recorder (heartbeats, events, metrics), the manifest's secret masking, and NSA_FAULT parsing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nsa.runfiles import RunDir, iter_jsonl
from nsa.telemetry import Recorder
from nsa.telemetry.manifest import build_manifest, masked_env
from nsa.train.faults import Fault, Pacer, parse_fault


def test_heartbeat_every_phase_and_progress_clock(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rec = Recorder(rd, rank=1, tensorboard=False)
    before = rec.progress_time
    rec.beat("data_wait", 7)
    hb = rd.heartbeats()[1]
    assert (hb.rank, hb.step, hb.phase) == (1, 7, "data_wait") and hb.pid > 0
    assert rec.progress_time > before
    rec.beat("optimizer")
    assert rd.heartbeats()[1].step == 7 and rd.heartbeats()[1].phase == "optimizer"


def test_only_rank0_writes_metrics_and_lifecycle_events(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    r0, r1 = Recorder(rd, 0, tensorboard=True), Recorder(rd, 1, tensorboard=True)
    for r in (r0, r1):
        r.metrics(3, {"loss": 2.5, "loss/train": 2.5, "lr": 1e-3, "throughput/tokens_per_s": 10.0})
        r.event("eval", loss=2.0)
        r.event("stalled", all_ranks=True, phase="data_wait")
    r0.metrics(4, {"loss": float("nan"), "loss/train": float("nan")})
    r0.close()
    recs = list(iter_jsonl(rd.metrics))
    assert [r["step"] for r in recs] == [3, 4]
    assert recs[0]["loss"] == 2.5 and "time" in recs[0] and recs[0]["throughput/tokens_per_s"] == 10.0
    assert recs[1]["loss"] == "nan"  # strict JSON, still visibly diverged
    evs = [(e["kind"], e["rank"]) for e in iter_jsonl(rd.events)]
    assert evs == [("eval", 0), ("stalled", 0), ("stalled", 1)]
    assert list(rd.tb_dir.glob("events.out.tfevents.*"))


def test_manifest_masks_secrets() -> None:
    env = {
        "HF_TOKEN": "hf_abc",
        "WANDB_API_KEY": "k",
        "NCCL_DEBUG": "INFO",
        "HOME": "/root",
        "NSA_RUN_ID": "r1",
    }
    assert masked_env(env) == {
        "HF_TOKEN": "***",
        "WANDB_API_KEY": "***",
        "NCCL_DEBUG": "INFO",
        "NSA_RUN_ID": "r1",
    }
    m = build_manifest({"config_hash": "abc"})
    assert m["config_hash"] == "abc" and m["versions"]["python"]
    json.dumps(m)  # serialisable as is


def test_fault_grammar() -> None:
    assert parse_fault(None) is None
    assert parse_fault("stall:step=3:rank=1") == Fault("stall", 3, 1)
    assert parse_fault("nan") == Fault("nan", 1, None)
    assert Fault("kill", 2, None).hits(2, 5) and not Fault("kill", 2, 0).hits(2, 5)
    ordered = parse_fault("kill:step=3:rank=1:ordered")
    assert ordered == Fault("kill", 3, 1, ordered=True)
    # The survivors wait at the kill's step, the killed rank does not; without `ordered` nobody waits.
    assert ordered.outlives(3, 0) and not ordered.outlives(3, 1) and not ordered.outlives(2, 0)
    assert not Fault("kill", 3, 1).outlives(3, 0)
    bad_ones = ("hang", "stall:step=x", "nan:when=3", "kill:ms=5", "pace:ms=0", "pace:once", "pace:ms=-1")
    for bad in (*bad_ones, "stall:rank=1:ordered", "kill:step=3:ordered", "kill:rank=1:once:ordered"):
        with pytest.raises(ValueError, match="NSA_FAULT"):
            parse_fault(bad)
    assert parse_fault("pace") == Fault("pace", 1, None, ms=250)
    assert parse_fault("pace:step=3:rank=1:ms=40") == Fault("pace", 3, 1, ms=40)


def test_pace_holds_each_step_to_its_length_from_its_step_on_and_only_on_its_rank() -> None:
    pacer = Pacer(Fault("pace", step=3, rank=1, ms=60))
    t0 = time.monotonic()
    for step in (1, 2, 3):  # not before step 3; the first paced step has nothing to wait for
        pacer.wait(step, 1)
    for step in (4, 5):
        pacer.wait(step, 0)  # another rank: never held
    assert time.monotonic() - t0 < 0.05
    pacer.wait(4, 1)
    pacer.wait(5, 1)
    assert time.monotonic() - t0 >= 0.12  # two steps of 60 ms after step 3's start
