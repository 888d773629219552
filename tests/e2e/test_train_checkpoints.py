"""Resume never destroys a good checkpoint: the real trainer (in-process, one rank) resumes from the
newest checkpoint whose manifest verifies, names what it skipped in a `checkpoint_fallback` event,
refuses (exit 2) when checkpoints exist but none is intact, and pruning keeps the intact one.
Each damage case is one the issue reproduced against a run dir of a finished tiny run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from nsa.runfiles import RunDir, verify_checkpoint
from nsa.train.cli import main
from tests.assets.trainrun import TINY, clean_env, events, explain, run_train

pytestmark = pytest.mark.e2e

SETS = [
    "train.seq_len=64", "train.eval_every=0", "train.log_every=1", "telemetry.tensorboard=false",
    "train.save_every=2", "train.keep_last=3",
]  # fmt: skip


def _train(run: Path, steps: int, resume: bool, extra: tuple[str, ...] = ()) -> int:
    argv = ["--config", str(TINY), "--run-dir", str(run)]
    for s in [*SETS, f"train.steps={steps}", *extra]:
        argv += ["--set", s]
    return main([*argv, "--resume"] if resume else argv)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A 6-step run: step-2, step-4, step-6 with manifests; `latest` names step-6."""
    mp = pytest.MonkeyPatch()
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        mp.delenv(k, raising=False)
    run = tmp_path_factory.mktemp("ckpt") / "run"
    assert _train(run, 6, False) == 0
    mp.undo()
    return run


def _damage(run: Path, case: str) -> str:
    """Damage step-6 (or the pointer) as the issue did; returns the file the reason must name."""
    c = run / "checkpoints" / "step-00000006"
    if case == "dir_removed":  # `latest` names a missing directory
        shutil.rmtree(c)
        return ""
    if case == "latest_empty":  # and the newest dir has no manifest (a save cut off)
        (run / "checkpoints" / "latest").write_text("")
        (c / "manifest.json").unlink()
        return "manifest.json"
    if case == "model_truncated":
        data = (c / "model.pt").read_bytes()
        (c / "model.pt").write_bytes(data[: len(data) // 2])
        return "model.pt"
    if case == "optim_empty":
        (c / "optim.pt").write_bytes(b"")
        return "optim.pt"
    if case == "rank_state_garbage":
        size = (c / "rank0.pt").stat().st_size
        (c / "rank0.pt").write_bytes(b"\x00garbage" * (size // 8) + b"x" * (size % 8))
        return "rank0.pt"
    if case == "meta_missing":
        (c / "meta.json").unlink()
        return "meta.json"
    raise AssertionError(case)


CASES = [
    "dir_removed",
    "latest_empty",
    "model_truncated",
    "optim_empty",
    "rank_state_garbage",
    "meta_missing",
]


@pytest.mark.parametrize("case", CASES)
def test_resume_falls_back_to_the_newest_intact_checkpoint(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch, case: str
) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    bad_file = _damage(run, case)
    before = {p.name: (p / "manifest.json").read_text() for p in RunDir(run).intact_checkpoints()}
    assert "step-00000004" in before and "step-00000002" in before
    capsys.readouterr()
    rc = _train(run, 8, True, ("train.keep_last=1",))
    err = capsys.readouterr().err
    assert rc == 0, err
    evs = [e for e in events(run) if e["kind"] in ("resumed", "checkpoint_fallback")]
    resumed = [e for e in evs if e["kind"] == "resumed"]
    assert resumed[-1]["step"] == 4 and resumed[-1]["detail"]["checkpoint"] == "step-00000004"
    falls = [e for e in evs if e["kind"] == "checkpoint_fallback"]
    if bad_file:
        assert len(falls) == 1, falls
        d = falls[0]["detail"]
        assert d["checkpoint"] == "step-00000006" and d["using"] == "step-00000004"
        assert bad_file in d["reason"] and "\n" not in d["reason"]
        assert bad_file in err and "skipping step-00000006" in err
    # Resumed at 4, saved 6 (replacing the damaged one) and 8: the run went on from step 5.
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-4:] == [5, 6, 7, 8]
    # keep_last=1 prunes down to step-8, which is intact; step-4 was only removed after 6 and 8 existed.
    assert [p.name for p in RunDir(run).checkpoints()] == ["step-00000008"]
    assert verify_checkpoint(run / "checkpoints" / "step-00000008") is None


def test_no_intact_checkpoint_is_exit_2_and_nothing_is_overwritten(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    for c in RunDir(run).checkpoints():
        (c / "optim.pt").write_bytes(b"")
    snapshot = {p: p.read_bytes() for p in (run / "checkpoints").rglob("*") if p.is_file()}
    capsys.readouterr()
    rc = _train(run, 8, True)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "none is intact" in err and "optim.pt" in err and "step-00000002" in err
    assert {p: p.read_bytes() for p in (run / "checkpoints").rglob("*") if p.is_file()} == snapshot
    errs = [e for e in events(run) if e["kind"] == "error"]
    assert errs[-1]["detail"]["error"] == "NoIntactCheckpoint"


def test_fresh_start_refuses_a_run_dir_whose_latest_is_gone(
    finished_run: Path, tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "checkpoints" / "latest").unlink()
    capsys.readouterr()
    rc = _train(run, 8, False)
    assert rc == 2 and "--resume" in capsys.readouterr().err


def test_prune_keeps_the_checkpoint_just_written_when_newer_damaged_dirs_exist(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Resumed at 2 past damaged 4 and 6; a save at step 3 with keep_last=1 must not prune itself."""
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    for s in (4, 6):
        (run / "checkpoints" / f"step-0000000{s}" / "model.pt").write_bytes(b"")
    rc = _train(run, 3, True, ("train.keep_last=1", "train.save_every=0"))
    assert rc == 0, capsys.readouterr().err
    assert RunDir(run).newest_intact_checkpoint() == run / "checkpoints" / "step-00000003"


# --- ckpt.async (issue 23): the same checkpoints, written in the background -------------------------


def test_async_run_writes_the_sync_runs_checkpoints_and_exit_waits_for_the_last(
    finished_run: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT"):
        monkeypatch.delenv(k, raising=False)
    run = tmp_path / "run"
    rc = _train(run, 6, False, ("ckpt.async=true",))
    assert rc == 0, capsys.readouterr().err
    # The final save (step 6) is still in flight when the loop ends: exit waited for it.
    assert (run / "checkpoints" / "latest").read_text() == "step-00000006\n"
    names = [p.name for p in RunDir(run).checkpoints()]
    assert names == [p.name for p in RunDir(finished_run).checkpoints()] == [
        "step-00000006", "step-00000004", "step-00000002",
    ]  # fmt: skip
    for name in names:
        got, want = run / "checkpoints" / name, finished_run / "checkpoints" / name
        assert verify_checkpoint(got) is None
        for f in ("model.pt", "optim.pt", "rank0.pt"):  # bit-identical: a resume from either is the same
            a, b = torch.load(got / f, weights_only=False), torch.load(want / f, weights_only=False)
            assert _same(a, b), f"{name}/{f}"
    saved = [e["step"] for e in events(run) if e["kind"] == "checkpoint"]
    assert saved == [2, 4, 6]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_gpu_suite_reads_the_metrics_the_trainer_writes(finished_run: Path) -> None:
    """The GPU suite's training section parses metrics.jsonl by name (issue 23): a rename in the
    trainer must fail here, on CPU, not on a rented GPU. (`memory/max_allocated_gb` is CUDA-only.)"""
    from nsa.attention.gpusuite.gpu import read_train_metrics

    rows = [json.loads(x) for x in (finished_run / "metrics.jsonl").read_text().splitlines()]
    got = read_train_metrics(finished_run / "metrics.jsonl")
    assert got["steps_measured"] == 4 and got["tokens_per_s_median"] > 0  # 6 log steps, 2 warm-up
    assert got["final_loss"] == rows[-1]["loss"] and isinstance(got["final_loss"], float)


def test_async_save_failing_on_one_of_two_ranks_stops_both_and_latest_stays(tmp_path: Path) -> None:
    """2 gloo ranks under the real torchrun: rank 1's background write of step 4 fails; both ranks
    learn it at a later boundary (rank 1 with its own cause), `latest` stays at step 2, no debris."""
    run = tmp_path / "run"
    sets = [*SETS, "train.steps=6", "ckpt.async=true", "train.device=cpu"]
    p = run_train(run, sets, nproc=2, env=clean_env(NSA_FAULT="ckpt:step=4:rank=1"), timeout=120)
    assert p.returncode != 0, explain(p)
    errs = {e["rank"]: e["detail"]["message"] for e in events(run) if e["kind"] == "error"}
    assert "injected by NSA_FAULT=ckpt:step=4" in errs[1], errs
    assert "step-00000004 failed on another rank" in errs[0], errs
    assert (run / "checkpoints" / "latest").read_text() == "step-00000002\n"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step-00000002"]
    assert verify_checkpoint(run / "checkpoints" / "step-00000002") is None
