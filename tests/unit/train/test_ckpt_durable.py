"""Checkpoint saves (issue 21): the required files are named in the manifest and enforced by
verification, every file and the manifest are fsynced before `latest` moves (and the directory after
the rename), and a save that would not fit (the last checkpoint's size plus a margin) is refused
before it writes a byte. One process, a tiny model: the same `ckpt.save` torchrun ranks call."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from nsa.runfiles import CHECKPOINT_MANIFEST, LATEST, RunDir, verify_checkpoint
from nsa.train import ckpt
from nsa.train.dist import DistInfo

INFO = DistInfo(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend=None)


def _save(rd: RunDir, step: int, width: int = 8) -> Path:
    model = torch.nn.Linear(width, width)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    return ckpt.save(rd, INFO, step, model, opt, {"tokens": 1}, {"loader": {"pos": step}}, keep_last=3)


def test_manifest_names_its_required_files_and_verification_enforces_them(tmp_path):
    rd = RunDir(tmp_path)
    good, newer = _save(rd, 2), _save(rd, 4)
    man = json.loads((newer / CHECKPOINT_MANIFEST).read_text())
    assert man["required"] == ["meta.json", "model.pt", "optim.pt", "rank0.pt"]
    assert verify_checkpoint(newer) is None
    # A manifest that omits a required file (its size and hash gone with it) is not intact.
    del man["files"]["optim.pt"]
    (newer / CHECKPOINT_MANIFEST).write_text(json.dumps(man))
    (newer / "optim.pt").unlink()
    why = verify_checkpoint(newer)
    assert why is not None and "required file optim.pt" in why
    # ... nor one of an older format (no `required`): the trainer's layout is the floor.
    del man["required"]
    (newer / CHECKPOINT_MANIFEST).write_text(json.dumps(man))
    why = verify_checkpoint(newer)
    assert why is not None and "optim.pt" in why
    # Resume falls back to the newest that verifies and says which it skipped and why.
    chosen, skipped = ckpt.choose_resume(rd)
    assert chosen == good and [(p.name, "optim.pt" in r) for p, r in skipped] == [(newer.name, True)]


def test_save_fsyncs_files_and_manifest_before_the_rename_and_latest(tmp_path, monkeypatch):
    rd = RunDir(tmp_path)
    log: list[tuple[str, str]] = []
    real_fsync, real_rename, real_replace = os.fsync, os.rename, os.replace

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(a, b, **kw):
        log.append(("rename", str(b)))
        return real_rename(a, b, **kw)

    def replace(a, b, **kw):
        log.append(("replace", str(b)))
        return real_replace(a, b, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    final = _save(rd, 3)
    root = str(rd.checkpoints_dir)
    at = {ev: i for i, ev in enumerate(log)}
    moved = at[("rename", str(final))]
    for name in ("model.pt", "optim.pt", "rank0.pt", "meta.json", CHECKPOINT_MANIFEST):
        synced = [
            i for i, (k, p) in enumerate(log) if k == "fsync" and p.endswith(f"/.tmp-{final.name}/{name}")
        ]
        synced += [i for i, (k, p) in enumerate(log) if k == "fsync" and "/.tmp-" in p and f"/.{name}." in p]
        assert synced and min(synced) < moved, f"{name} not fsynced before the rename: {log}"
    assert any(k == "fsync" and p == root and i > moved for i, (k, p) in enumerate(log)), log
    latest = at[("replace", str(rd.checkpoints_dir / LATEST))]
    assert latest > moved
    assert any(k == "fsync" and f"/.{LATEST}." in p and i < latest for i, (k, p) in enumerate(log)), log
    assert log[-1] == ("fsync", root) or any(
        k == "fsync" and p == root and i > latest for i, (k, p) in enumerate(log)
    )


Usage = namedtuple("Usage", "total used free")


def test_space_check_uses_the_last_checkpoints_size_plus_a_margin(tmp_path, monkeypatch):
    rd = RunDir(tmp_path)
    first = _save(rd, 1, width=64)
    size = sum(f.stat().st_size for f in first.rglob("*") if f.is_file())
    need = int(size * 1.05) + ckpt.SPACE_MARGIN_BYTES
    free = {"bytes": need - 1}
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**12, 0, free["bytes"]))
    with pytest.raises(OSError) as e:
        _save(rd, 2, width=64)
    assert e.value.errno == errno.ENOSPC and "No space left on device" in str(e.value)
    assert f"{need / 2**20:.1f} MB" in str(e.value)
    assert [p.name for p in rd.checkpoints_dir.iterdir() if p.name.startswith(".tmp")] == []
    assert (rd.checkpoints_dir / LATEST).read_text().strip() == first.name
    free["bytes"] = need + 1
    assert _save(rd, 2, width=64).name == "step-00000002"
