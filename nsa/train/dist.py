"""Process-group setup and the small rank helpers the trainer uses.

Owns reading torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE), choosing device and backend
(NCCL on CUDA, gloo on CPU), initialising the process group with a timeout (a peer that never
arrives is an error naming the timeout, not a hang), the NCCL error-handling / flight-recorder
defaults, `print0`, and the scalar all-reduces. It must not know about models or configs beyond
the `ParallelConfig`/`TrainSection` fields it is handed.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist

# Set only when absent: the environment (validated by the launcher) wins. Why each one:
# ASYNC_ERROR_HANDLING=3 tears a rank down on a NCCL error/timeout instead of hanging in a
# collective; the flight recorder keeps the last collectives per rank and dumps them on timeout,
# which is how a desynchronised rank is found after the fact.
NCCL_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
}


class InitTimeout(RuntimeError):
    """The process group could not be formed in time: a peer never arrived or was unreachable."""


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str | None  # None: single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def choose_device(device: str, local_rank: int) -> torch.device:
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("train.device is 'cuda' but torch.cuda.is_available() is False on this host")
    return torch.device("cuda", local_rank)


def init_distributed(device: str, timeout_s: float, trace_dir: str | None = None) -> DistInfo:
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = env_world_size()
    dev = choose_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world == 1:
        return DistInfo(rank, local_rank, 1, dev, None)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if backend == "nccl":
        for k, v in NCCL_DEFAULTS.items():
            os.environ.setdefault(k, v)
        if trace_dir:
            os.environ.setdefault(
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", os.path.join(trace_dir, "nccl_trace_rank_")
            )
    try:
        dist.init_process_group(
            backend=backend,
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=dev if dev.type == "cuda" else None,
        )
    except Exception as e:
        raise InitTimeout(
            f"rank {rank}: joining the {backend} process group of {world} ranks failed within "
            f"parallel.timeout_s={timeout_s:g} ({type(e).__name__}: {e}). Fix: check that every rank "
            "started (torchrun --nnodes / --rdzv-endpoint reachable from every host, same run id), "
            "or raise parallel.timeout_s"
        ) from e
    return DistInfo(rank, local_rank, world, dev, backend)


def barrier(info: DistInfo) -> None:
    if info.distributed:
        if info.backend == "nccl":
            dist.barrier(device_ids=[info.device.index])
        else:
            dist.barrier()


def all_reduce_mean(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.distributed:
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= info.world_size
    return t


def all_reduce_max(value: float, info: DistInfo) -> float:
    if not info.distributed:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def teardown(info: DistInfo, sync: bool = False) -> None:
    """Destroy the process group; with `sync`, after a barrier (use it only when every rank succeeded).

    Without the barrier a rank that finishes first tears down its gloo pairs while a peer is still
    writing (rank 0 saving, flushing TensorBoard). A failed rank must not wait on its peers. The
    barrier did not end the rare SIGABRT at exit of 2-rank runs it was first added for: that came
    from interpreter teardown beside gloo's still-running threads, see `exit_process`.
    """
    if info.distributed and dist.is_initialized():
        if sync:
            barrier(info)
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End a process that has joined a process group with `code`, skipping interpreter teardown.

    Once DDP or FSDP2 has been built over it, a gloo group outlives `destroy_process_group` (torch
    keeps a reference: its worker and tcp-loop threads are still running afterwards, checked on
    2.13). Python's finalisation and the C++ static destructors then run beside those threads:
    4 of 100 two-rank gradient-probe runs (CPU) ended in "terminate called without an active
    exception" (SIGABRT) after all their work was done, and torchrun reported them failed; with
    this exit, 0 of 100 (bench/torchrun_exit.py, bench/RESULTS.md). Flushing what Python would
    flush and leaving with os._exit avoids that teardown. Everything the run writes (logs,
    TensorBoard, checkpoints, the data loader's thread) is closed explicitly before this.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken pipe: nothing to save
            stream.flush()
    logging.shutdown()
    os._exit(code)


class Printer:
    """print0: rank 0 prints, other ranks stay quiet (a do-nothing printer, not ifs everywhere)."""

    def __init__(self, rank: int):
        self.enabled = rank == 0

    def __call__(self, *args: object) -> None:
        if self.enabled:
            print(*args, flush=True)

    def err(self, *args: object) -> None:
        if self.enabled:
            print(*args, file=sys.stderr, flush=True)


def all_gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's `obj` (small, picklable), in rank order; [obj] without a process group."""
    if not info.distributed:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


class StopVote:
    """Did SIGTERM reach any rank? An all-rank OR that never waits for the device or a whole step.

    Each step boundary starts an asynchronous all-reduce of this rank's flag on a CPU (gloo)
    group and reads the one started at the previous boundary, long finished by then: every rank
    learns the same answer at the same step, one step late, with no host-device sync and no
    blocking collective per step (a synchronous all-reduce of the flag cost one of each).
    """

    def __init__(self, info: DistInfo):
        self.info = info
        # Its own group: the vote in flight never queues behind (or ahead of) DDP's collectives.
        self.group = dist.new_group(backend="gloo") if info.distributed else None
        self.buf = torch.zeros(1, dtype=torch.float64)
        self.work: Any = None

    def poll(self, mine: bool) -> bool:
        if not self.info.distributed:
            return mine
        agreed = False
        if self.work is not None:
            self.work.wait()
            agreed = bool(self.buf.item() > 0)  # a CPU tensor: no device sync
        self.buf.fill_(1.0 if mine else 0.0)
        self.work = dist.all_reduce(self.buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        return agreed

    def drain(self) -> None:
        """Finish the vote in flight (before teardown, or a synchronous decision)."""
        if self.work is not None:
            self.work.wait()
            self.work = None
