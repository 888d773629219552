"""Recorder (heartbeats, events, metrics), the manifest's secret masking, and NSA_FAULT parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.runfiles import RunDir, iter_jsonl
from nsa.telemetry import Recorder
from nsa.telemetry.manifest import build_manifest, masked_env
from nsa.train.faults import Fault, parse_fault


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
    for bad in ("hang", "stall:step=x", "nan:when=3"):
        with pytest.raises(ValueError, match="NSA_FAULT"):
            parse_fault(bad)
