"""Asynchronous checkpoint saves (`ckpt.async`, issue 23): the state is copied at the step boundary
(training may go on mutating it), the files are the same as a synchronous save's, `latest` moves only
once everything is written, a background failure is raised at the next boundary with its own cause
and leaves no half checkpoint. One process, a tiny model: the same functions torchrun ranks call."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
import torch

from nsa.runfiles import CHECKPOINT_MANIFEST, LATEST, RunDir, verify_checkpoint
from nsa.train import ckpt
from nsa.train.ckpt_async import AsyncSaver
from nsa.train.dist import DistInfo

INFO = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend=None)


def _trained(width: int = 8) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(width, width)
    opt = torch.optim.AdamW(model.parameters())
    _train_step(model, opt)
    return model, opt


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    model(torch.randn(2, model.in_features)).sum().backward()
    opt.step()
    opt.zero_grad()


def _args(rd: RunDir, step: int, model, opt) -> tuple:
    return (rd, INFO, step, model, opt, {"tokens": step}, {"loader": {"pos": step}}, 3)


def _tensors(path: Path) -> dict:
    return torch.load(path, weights_only=False)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_async_save_writes_what_a_sync_save_writes_though_training_goes_on(tmp_path, monkeypatch):
    model, opt = _trained()
    sync_rd, async_rd = RunDir(tmp_path / "sync"), RunDir(tmp_path / "async")
    rng = torch.get_rng_state()
    want = ckpt.save(*_args(sync_rd, 2, model, opt))
    torch.set_rng_state(rng)  # both snapshots see the same RNG state
    done: list[tuple[int, Path]] = []
    trained_on = threading.Event()
    real = ckpt._save_durable

    def after_training(obj, path: Path) -> None:
        trained_on.wait(30)  # the writer starts only once training has mutated the live state
        real(obj, path)

    monkeypatch.setattr(ckpt, "_save_durable", after_training)
    saver = AsyncSaver(INFO, lambda step, path, s: done.append((step, path)))
    saver.start(ckpt.snapshot(*_args(async_rd, 2, model, opt), private=True), 0.0)
    for _ in range(3):  # training mutates parameters and moments in place meanwhile
        _train_step(model, opt)
    trained_on.set()
    saver.poll(block=True)
    got = async_rd.checkpoints_dir / want.name
    assert done == [(2, got)] and saver.flight is None
    assert verify_checkpoint(got) is None
    assert (async_rd.checkpoints_dir / LATEST).read_text() == want.name + "\n"
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in want.iterdir())
    for name in ("model.pt", "optim.pt", "rank0.pt"):  # bit-identical state: resume is the same
        assert _same(_tensors(got / name), _tensors(want / name)), name
    man_a = (got / CHECKPOINT_MANIFEST).read_text()
    assert '"required": ["meta.json", "model.pt", "optim.pt", "rank0.pt"]' in man_a
    # and it restores the state of the boundary, not the mutated one
    fresh, fresh_opt = _trained()
    _train_step(fresh, fresh_opt)
    ckpt.load(got, INFO, fresh, fresh_opt)
    assert torch.equal(fresh.weight, _tensors(want / "model.pt")["weight"])
    assert not torch.equal(fresh.weight, model.weight)


def test_latest_moves_only_after_the_write_and_a_background_failure_is_raised_at_the_next_boundary(
    tmp_path, monkeypatch
):
    rd = RunDir(tmp_path)
    model, opt = _trained()
    good = ckpt.save(*_args(rd, 2, model, opt))
    release = threading.Event()
    real = ckpt._save_durable

    def slow_then_full(obj, path: Path) -> None:
        release.wait(30)  # the writer is still busy while training goes on
        if path.name == "optim.pt":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(obj, path)

    monkeypatch.setattr(ckpt, "_save_durable", slow_then_full)
    saver = AsyncSaver(INFO)
    saver.start(ckpt.snapshot(*_args(rd, 4, model, opt), private=True), 0.0)
    saver.poll()  # a boundary while the writer runs: nothing moves, nothing raised
    assert saver.flight is not None
    assert (rd.checkpoints_dir / LATEST).read_text() == good.name + "\n"
    release.set()
    with pytest.raises(OSError, match="No space left on device") as err:
        while True:  # the next boundaries: the failure is reported at the first one after it
            saver.poll()
    assert err.value.errno == errno.ENOSPC  # the writer's own error: the cause a sync save reports
    assert saver.flight is None
    assert (rd.checkpoints_dir / LATEST).read_text() == good.name + "\n"
    assert [p.name for p in rd.checkpoints_dir.iterdir() if p.name.startswith(".tmp")] == []
    assert ckpt.choose_resume(rd) == (good, [])


def test_one_save_in_flight_at_a_time(tmp_path):
    model, opt = _trained()
    saver = AsyncSaver(INFO)
    rd = RunDir(tmp_path)
    saver.start(ckpt.snapshot(*_args(rd, 1, model, opt), private=True), 0.0)
    with pytest.raises(RuntimeError, match="already in flight"):
        saver.start(ckpt.snapshot(*_args(rd, 2, model, opt), private=True), 0.0)
    saver.poll(block=True)
    assert [p.name for p in rd.checkpoints()] == ["step-00000001"]
