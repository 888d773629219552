"""Atomic, resumable checkpoints that are correct under a single process, DDP and FSDP2.

Layout of checkpoints/step-<N>/: model.pt and optim.pt (full, unsharded state dicts, written by
rank 0), meta.json (step, tokens, config hash, world size), rank<R>.pt (each rank's data-loader
position and RNG states), manifest.json (every file's size and sha256, written last). A checkpoint
is built in checkpoints/.tmp-step-<N>/ and renamed into place only after every rank has written its
part and the manifest is complete; `latest` is rewritten after the rename. Resume trusts the
manifests, not `latest` (`choose_resume`): a truncated or half-copied dir is skipped with a reason,
and pruning never removes the checkpoint just written. Only the last `keep_last` are kept.
A save is three stages: `snapshot` (collective: gather, room check), `write_part` (each rank's files)
and `publish` (manifest, rename, `latest`); `save` runs them in turn, ckpt_async.py (`ckpt.async`)
runs the last two in a background thread.

Gathering the full state is a collective under FSDP2, so every rank calls `save` and `load`; the
earlier trainer saved on rank 0 alone and deadlocked. On load, rank 0 reads the files and
broadcasts, so other hosts need no copy of model.pt. Run dirs are per host (the launcher's layout);
two hosts sharing one run dir over a network filesystem are not supported.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from nsa.runfiles import (
    LATEST,
    RunDir,
    checkpoint_bytes,
    checkpoint_name,
    durable_write_text,
    fsync_path,
    verify_checkpoint,
    write_checkpoint_manifest,
)
from nsa.train.dist import DistInfo, all_reduce_max, barrier

TMP_PREFIX = ".tmp-"


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _full_options(**kw: bool) -> StateDictOptions:
    return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)


@dataclass
class Snapshot:
    """One checkpoint's state, gathered at a step boundary, not yet on disk (`write_part`, `publish`)."""

    step: int
    root: Path
    tmp: Path
    final: Path
    model_sd: dict[str, Any]
    optim_sd: dict[str, Any]
    meta: dict[str, Any]
    rank_state: dict[str, Any]
    keep_last: int
    required: list[str]
    fault: str | None = None  # NSA_FAULT=ckpt: this rank's write fails with this message (tests)


def snapshot(
    run_dir: RunDir,
    info: DistInfo,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    rank_state: dict[str, Any],
    keep_last: int,
    progress: Callable[[], None] = lambda: None,
    *,
    private: bool = False,
) -> Snapshot:
    """Collective: gather the full state into CPU memory and check the room for it on every host.

    `private`: copy every tensor that still shares storage with the live model or optimizer (on CPU
    the offloaded state dict does), so training may go on while another thread writes it (async).
    """
    name = checkpoint_name(step)
    root = run_dir.checkpoints_dir
    tmp = root / f"{TMP_PREFIX}{name}"
    leader = info.local_rank == 0
    if leader:
        if tmp.exists():
            shutil.rmtree(tmp)  # a half-written leftover of a crashed save
        tmp.mkdir(parents=True)
    barrier(info)
    model_sd = get_model_state_dict(model, options=_full_options())
    optim_sd = get_optimizer_state_dict(model, optimizer, options=_full_options())
    if private:
        live = {p.untyped_storage().data_ptr() for p in model.parameters()}
        live |= {
            v.untyped_storage().data_ptr()
            for st in optimizer.state.values()
            for v in st.values()
            if isinstance(v, torch.Tensor)
        }
        model_sd, optim_sd = _private_copy(model_sd, live), _private_copy(optim_sd, live)
    progress()
    # Room first, on every host, agreed by all ranks: a save that runs out of space half-way leaves a
    # torn dir and a full disk; one refused here names the need and writes nothing.
    problem = _space_problem(root, _state_bytes(model_sd) + _state_bytes(optim_sd) if info.is_main else 0)
    if all_reduce_max(1.0 if problem else 0.0, info) > 0:
        if leader:
            shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(
            errno.ENOSPC, problem or "No space left on device on another host of this run (see its log)"
        )
    rank_state = {**rank_state, "rng": rng_state()}
    return Snapshot(
        step, root, tmp, root / name, model_sd, optim_sd, meta, rank_state, keep_last, _required(info)
    )


def _private_copy(sd: Any, live: set[int]) -> Any:
    if isinstance(sd, torch.Tensor):
        return sd.detach().clone() if sd.untyped_storage().data_ptr() in live else sd
    if isinstance(sd, dict):
        return {k: _private_copy(v, live) for k, v in sd.items()}
    if isinstance(sd, list):
        return [_private_copy(v, live) for v in sd]
    if isinstance(sd, tuple):
        return tuple(_private_copy(v, live) for v in sd)
    return sd


def write_part(snap: Snapshot, info: DistInfo) -> None:
    """This rank's files of the checkpoint, each fsynced by its writer; no collective (async-safe)."""
    # Durable: each writer fsyncs its own files before the ranks agree; the leader then writes the
    # manifest (fsynced) and only after that renames the dir and moves `latest` (`publish`).
    if info.is_main:
        _save_durable(snap.model_sd, snap.tmp / "model.pt")
        _save_durable(snap.optim_sd, snap.tmp / "optim.pt")
    if snap.fault:  # after a first file: a half-written part, as a disk failing mid-save leaves
        raise OSError(errno.EIO, snap.fault)
    if info.local_rank == 0:  # every host's copy says which step it is; only rank 0's host holds the weights
        body = json.dumps({"step": snap.step, "time": time.time(), **snap.meta}) + "\n"
        durable_write_text(snap.tmp / "meta.json", body)
    _save_durable(snap.rank_state, snap.tmp / f"rank{info.rank}.pt")


def publish(snap: Snapshot, progress: Callable[[], None] = lambda: None) -> Path:
    """Host leader, once every rank wrote its part: manifest, rename, `latest`, prune; no collective."""
    # last: a dir with a valid manifest is complete; it names what it must hold (required)
    write_checkpoint_manifest(snap.tmp, snap.step, snap.required, durable=True)
    progress()
    if snap.final.exists():
        shutil.rmtree(snap.final)  # same step saved again (e.g. end of a resumed run): replace it
    snap.tmp.rename(snap.final)
    fsync_path(snap.root, directory=True)  # the rename itself reaches the disk before `latest` names it
    durable_write_text(snap.root / LATEST, snap.final.name + "\n")
    _prune(snap.root, snap.keep_last, keep=snap.final)
    return snap.final


def save(
    run_dir: RunDir,
    info: DistInfo,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    rank_state: dict[str, Any],
    keep_last: int,
    progress: Callable[[], None] = lambda: None,
    fault: str | None = None,
) -> Path:
    """Collective: every rank calls it. Returns the final checkpoint dir (synchronous save).

    `progress` is called between the stages (gather, write, rename) so a long save keeps beating.
    """
    snap = snapshot(run_dir, info, step, model, optimizer, meta, rank_state, keep_last, progress)
    snap.fault = fault
    leader = info.local_rank == 0
    try:
        write_part(snap, info)
        progress()
        barrier(info)
        if leader:
            publish(snap, progress)
    except OSError:
        if leader:  # a torn save must not hold the space the run's logs and exit code need
            shutil.rmtree(snap.tmp, ignore_errors=True)
        raise
    barrier(info)
    return snap.final


# Kept free beyond the checkpoint itself: the logs, heartbeats and exit code written after it.
SPACE_MARGIN_BYTES = 16 * 2**20


def _state_bytes(sd: Any) -> int:
    """Bytes of the tensors in a (nested) state dict: what torch.save is about to write, near enough."""
    if isinstance(sd, torch.Tensor):
        return sd.numel() * sd.element_size()
    if isinstance(sd, dict):
        return sum(_state_bytes(v) for v in sd.values())
    if isinstance(sd, (list, tuple)):
        return sum(_state_bytes(v) for v in sd)
    return 0


def _space_problem(root: Path, state_bytes: int) -> str | None:
    """None when the checkpoints' filesystem has room for one more checkpoint: the size of the last
    one on this host (or of the state about to be written, if larger) plus 5% and a margin."""
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return None
    done = RunDir(root.parent).checkpoints()
    last = checkpoint_bytes(done[0]) if done else 0
    need = int(max(last, state_bytes) * 1.05) + SPACE_MARGIN_BYTES
    if free >= need:
        return None
    return (
        f"No space left on device for a checkpoint: {root} has {free / 2**20:.1f} MB free, a checkpoint "
        f"needs about {need / 2**20:.1f} MB (the last one {last / 2**20:.1f} MB, plus "
        f"{SPACE_MARGIN_BYTES // 2**20} MB and 5%)"
    )


def _save_durable(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _required(info: DistInfo) -> list[str]:
    """The files this host's checkpoint dir must hold: the step's metadata, the data-loader state of
    each of its ranks and, on rank 0's host, the model and the optimizer."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if info.distributed else 1
    first = info.rank - info.local_rank
    files = ["meta.json", *(f"rank{r}.pt" for r in range(first, first + local))]
    return files + (["model.pt", "optim.pt"] if first == 0 else [])


def _prune(root: Path, keep_last: int, keep: Path) -> None:
    """Keep the newest `keep_last` step dirs, and always `keep` (the one just written and hashed).

    After a fallback resume, dirs of higher steps than the current one can be damaged leftovers of
    the interrupted run; counting them alone would prune the only intact checkpoint.
    """
    done = RunDir(root.parent).checkpoints()  # newest first
    for old in done[keep_last:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


class NoIntactCheckpoint(ValueError):
    """Checkpoints exist but none verifies: resuming would silently start over (bad input: exit 2)."""


def choose_resume(run_dir: RunDir) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint of this host's run dir that verifies, and the (dir, reason) it skipped.

    No checkpoint dir at all is (None, []): a fresh start. Dirs that all fail raise
    NoIntactCheckpoint naming each one and why.
    """
    skipped: list[tuple[Path, str]] = []
    for p in run_dir.checkpoints():
        reason = verify_checkpoint(p)
        if reason is None:
            return p, skipped
        skipped.append((p, reason))
    if skipped:
        lines = "; ".join(f"{p.name}: {r}" for p, r in skipped)
        raise NoIntactCheckpoint(
            f"--resume: {len(skipped)} checkpoint(s) in {run_dir.checkpoints_dir} and none is intact ({lines}). "
            "Fix: restore an intact step-* dir (a copy or the mirror), or start a new run dir without --resume"
        )
    return None, skipped


class ShapeMismatch(ValueError):
    """A checkpoint whose tensors do not fit the model being trained (bad input: exit 2)."""

    def __init__(self, message: str, quiet: bool = False):
        super().__init__(message)
        self.quiet = quiet  # another rank printed the details


def fit_problem(saved: dict[str, Any], expected: dict[str, Any]) -> str:
    """'' when the saved model state has exactly the expected names and shapes, else the first few
    differences in one line."""

    def shape(t: Any) -> str:
        return "[" + ", ".join(str(d) for d in t.shape) + "]"

    diffs = [f"{k} {shape(saved[k])} in the checkpoint, {shape(v)} here"
             for k, v in expected.items() if k in saved and tuple(saved[k].shape) != tuple(v.shape)]  # fmt: skip
    diffs += [f"{k} missing from the checkpoint" for k in expected if k not in saved]
    diffs += [f"{k} in the checkpoint, not in this model" for k in saved if k not in expected]
    if not diffs:
        return ""
    more = f"; and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return "; ".join(diffs[:3]) + more


def read_meta(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / "meta.json").read_text())


def load(
    ckpt: Path, info: DistInfo, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Collective. Restores model + optimizer in place and this rank's RNG; returns (meta, rank_state)."""
    rank_file = ckpt / f"rank{info.rank}.pt"
    own = rank_file.exists()
    if not own:
        # Resharding (another world size): any rank file of this host carries every data stream's
        # position (the trainer gathers them at save); this rank's RNG starts fresh.
        others = sorted(ckpt.glob("rank*.pt"))
        if not others:
            raise FileNotFoundError(
                f"{ckpt} holds no rank*.pt file on this host: copy the checkpoint dir from the host that "
                "wrote it (any rank's file carries the data position), or resume there"
            )
        rank_file = others[0]
    meta = read_meta(ckpt)
    if info.is_main:
        model_sd = torch.load(ckpt / "model.pt", map_location="cpu", weights_only=True)
        optim_sd = torch.load(ckpt / "optim.pt", map_location="cpu", weights_only=True)
    else:
        model_sd, optim_sd = {}, {}
    # Shapes and names first, agreed by every rank: a checkpoint of another model (a changed `model:`
    # on --resume) failed inside the load with a RuntimeError per tensor (exit 1, restarted in a loop by
    # nsa-launch), or, under FSDP2's broadcast, with an unrelated-looking size error on every rank.
    problem = fit_problem(model_sd, getattr(model, "module", model).state_dict()) if info.is_main else ""
    if all_reduce_max(1.0 if problem else 0.0, info):
        raise ShapeMismatch(problem or "rank 0 names the tensors", quiet=not info.is_main)
    bcast = info.distributed
    set_model_state_dict(model, model_sd, options=_full_options(broadcast_from_rank0=bcast))
    set_optimizer_state_dict(model, optimizer, optim_sd, options=_full_options(broadcast_from_rank0=bcast))
    rank_state = torch.load(rank_file, map_location="cpu", weights_only=False)
    rng = rank_state.pop("rng")
    if own:
        set_rng_state(rng)
    return meta, rank_state
