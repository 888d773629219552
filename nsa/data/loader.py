"""The training/validation batch loader: source -> split filter -> packer -> prefetch queue -> caller.

This module owns `DataLoader` (built through `nsa.data.build_loader`): the held-out split (a document is `val` when a hash
of its text falls under `val_fraction`, so train and val are disjoint whatever the order, sharding or
epoch), the infinite epoch loop (a rank that runs out of documents starts the next epoch, file order
reshuffled from seed + epoch), the background thread with its bounded queue, the first-batch and
per-batch timeouts, retries with backoff, resumable state and statistics. It imports torch (batches
are LongTensors) and must therefore never be imported by `nsa.data.config` or the launcher.

Both splits are infinite; call `reset()` before each evaluation pass so every pass scores the same
batches (every rank gets exactly as many batches as it asks for, so DDP collectives stay matched).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from nsa.data.config import DataConfig, DataError, vocab_size_for
from nsa.data.packing import Packer, Position
from nsa.data.sources import build_source
from nsa.data.tokenizers import build_tokenizer

STATE_VERSION = 1
_TRANSIENT_MODULES = ("requests", "urllib3", "aiohttp", "httpx", "fsspec", "huggingface_hub", "http")


def is_val_document(text: str, val_fraction: float) -> bool:
    """Deterministic held-out membership from the document text alone."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).digest(), "little")
    return h < val_fraction * 2**64


def is_transient(e: BaseException) -> bool:
    """Worth retrying: I/O and network errors; never our own DataError or a missing file."""
    # BadGzipFile is an OSError, but a file's bytes do not heal: retrying it waited 1 + 2 + 4 s.
    if isinstance(e, (DataError, FileNotFoundError, PermissionError, IsADirectoryError, gzip.BadGzipFile)):
        return False
    if isinstance(e, (OSError, TimeoutError)):
        return True
    return type(e).__module__.split(".")[0] in _TRANSIENT_MODULES


# The fingerprint's keys as the training config names them (rank and world_size are not settings).
_KEYS = {
    "source": "data.source / data.paths / data.hf_*",
    "tokenizer": "data.tokenizer",
    "seq_len": "train.seq_len",
    "batch_size": "train.batch_size",
    "seed": "data.seed / train.seed",
    "val_fraction": "data.val_fraction",
}


def _relative(files: list[list[Any]]) -> dict[str, int]:
    """{path below the files' common directory: size}, in list order."""
    if not files:
        return {}
    root = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f, _ in files])
    return {os.path.relpath(os.path.abspath(f), root): int(n) for f, n in files}


class _Stop(Exception):
    pass


_NOTHING = object()


class DataLoader:
    """One rank's infinite stream of (x, y) LongTensor batches of shape [batch_size, seq_len]."""

    def __init__(
        self,
        cfg: DataConfig,
        *,
        seq_len: int,
        batch_size: int,
        rank: int,
        world_size: int,
        split: str,
        seed: int,
    ) -> None:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if seq_len < 1 or batch_size < 1:
            raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len}, {batch_size}")
        self.cfg = cfg
        self.seq_len, self.batch_size = seq_len, batch_size
        self.rank, self.world_size, self.split = rank, world_size, split
        self.seed = cfg.seed * 1_000_003 + seed
        self.tokenizer = build_tokenizer(cfg)
        # Val documents are dealt to ranks after the hold-out filter (see _documents), so the val
        # loader reads the whole source rather than this rank's train shard.
        src_rank, src_world = (rank, world_size) if split == "train" else (0, 1)
        self.source = build_source(cfg, rank=src_rank, world_size=src_world, seed=self.seed)
        # [[path, bytes], ...] of a local corpus, saved with the train stream's position; None otherwise
        # (a val loader is built afresh for every eval and never resumed: no stat of every file there).
        self._files = self._file_sizes() if split == "train" else None
        self._pos: Position | None = None  # where the batch after the last consumed one starts
        self._counters = self._zero_counters()
        self._fetch_wait_s = 0.0
        self._last_fetch_wait_s = 0.0
        self._batches = 0
        self._fresh = True  # the next batch is the first since start/load: first_batch_timeout_s applies
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[Any] | None = None
        self._stop = threading.Event()

    # --- public API ------------------------------------------------------------------------------
    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._thread is None:
            self._start()
        assert self._queue is not None
        timeout = self.cfg.first_batch_timeout_s if self._fresh else self.cfg.batch_timeout_s
        t0 = time.perf_counter()
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            which = "first batch (opening the source included)" if self._fresh else "next batch"
            raise DataError(
                f"data source {self.cfg.source!r} gave no {which} within {timeout:g} s on rank {self.rank} "
                f"({self.source.describe()}). Check that the source is reachable and readable, or raise "
                f"data.{'first_batch_timeout_s' if self._fresh else 'batch_timeout_s'}."
            ) from None
        wait = time.perf_counter() - t0
        if isinstance(item, BaseException):
            self._stop_thread()
            if isinstance(item, DataError):
                raise item
            raise DataError(
                f"data source {self.cfg.source!r} failed on rank {self.rank}: {type(item).__name__}: {item}"
            ) from item
        x, y, pos, counters = item
        if self._batches == 0 and self._pos is None and counters["epoch"] >= 1 and self.split == "train":
            self._say_small(counters["epoch"])
        self._pos, self._counters = pos, counters
        self._last_fetch_wait_s = wait
        self._fetch_wait_s += wait
        self._batches += 1
        self._fresh = False
        return x, y

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.next_batch()

    def _say_small(self, epochs: int) -> None:
        """The first batch went through the whole shard: the corpus is smaller than one batch and every
        step trains on the same text (a 3-document corpus on a 2-rank run, each batch ~20 copies of
        it, said nothing). Said once, by rank 0; the infinite stream goes on (docs/data.md)."""
        if self.rank == 0:
            print(
                f"[nsa] data: rank 0's training documents are fewer tokens than one batch "
                f"({self.batch_size} x {self.seq_len}): its first batch went through them {epochs} time(s) "
                "over, and every batch repeats them. Use a bigger corpus, or a smaller train.batch_size / "
                "train.seq_len",
                file=sys.stderr,
                flush=True,
            )

    def state_dict(self) -> dict[str, Any]:
        """Position after the last batch the caller consumed (prefetched batches are not counted)."""
        return {
            "version": STATE_VERSION,
            **self._fingerprint(),
            "position": self._pos,
            "counters": dict(self._counters),
            "batches": self._batches,
            **({"files": self._files} if self._files is not None else {}),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Continue exactly after the batch the saved loader had consumed last."""
        if sd.get("version") != STATE_VERSION:
            raise DataError(f"data loader state has version {sd.get('version')!r}, expected {STATE_VERSION}")
        mine = self._fingerprint()
        diff = {k: (sd.get(k), v) for k, v in mine.items() if sd.get(k) != v}
        if diff:
            detail = ", ".join(f"{_KEYS.get(k, k)}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            # Named by config key, with fixes nsa-train can follow (data.resume: fresh keeps the weights).
            raise DataError(
                f"cannot resume the data stream exactly ({detail}): exact resume needs the same data source, "
                "tokenizer, sequence length, batch size, seeds and held-out fraction. Fix: restore those "
                "settings to resume this run exactly, or set data.resume: fresh (--set data.resume=fresh) to "
                "keep the checkpoint's weights and step and start the data stream anew with the new ones"
            )
        if sd.get("files") is not None and self._files is not None:  # states saved before had no list
            self._check_files(sd["files"])
        self._stop_thread()
        self._pos = sd["position"]
        self._counters = dict(sd["counters"])
        self._batches = int(sd["batches"])
        self._fresh = True

    def reset(self) -> None:
        """Back to the very first batch (use before every evaluation pass on the val loader)."""
        self._stop_thread()
        self._pos, self._counters, self._batches, self._fresh = None, self._zero_counters(), 0, True

    def stats(self) -> dict[str, Any]:
        return {
            **self._counters,
            "batches": self._batches,
            "fetch_wait_s": self._fetch_wait_s,
            "last_fetch_wait_s": self._last_fetch_wait_s,
        }

    def describe(self) -> str:
        src = self.source.describe()
        if self.split == "val":
            src += f"; val documents dealt round-robin to {self.world_size} ranks, this is rank {self.rank}"
        return (
            f"{src}; split {self.split} (val_fraction {self.cfg.val_fraction:g} by text hash); "
            f"tokenizer {self.tokenizer.name} (vocab {vocab_size_for(self.cfg)}); "
            f"batch {self.batch_size}x{self.seq_len}; prefetch {self.cfg.prefetch}"
        )

    def close(self) -> None:
        self._stop_thread()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------------
    @staticmethod
    def _zero_counters() -> dict[str, int]:
        return {"docs_read": 0, "tokens_read": 0, "dropped_tokens": 0, "epoch": 0}

    def _fingerprint(self) -> dict[str, Any]:
        c = self.cfg
        ident = {
            "synthetic": "",
            "sample": "",
            "files": ",".join(c.paths),
            "fineweb_edu": f"{c.hf_path}:{c.hf_name}:{c.hf_split}",
        }[c.source]
        return {
            "source": f"{c.source}:{ident}",
            "tokenizer": c.tokenizer,
            "split": self.split,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "rank": self.rank,
            "world_size": self.world_size,
            "seed": self.seed,
            "val_fraction": c.val_fraction,
        }

    def _file_sizes(self) -> list[list[Any]] | None:
        files = getattr(self.source, "files", None)
        if files is None:
            return None
        out: list[list[Any]] = []
        for f in files:
            try:
                out.append([f, os.path.getsize(f)])
            except OSError:
                out.append([f, -1])
        return out

    def _check_files(self, saved: list[list[Any]]) -> None:
        """The saved position names a file by its place in the sorted file list: a file added, removed
        or renamed under the same data.paths moved it onto other documents without a word. Refused.
        A file that only changed size keeps every place; said (on the stream of rank 0), not refused:
        a line fixed in place must not block the resume."""
        # Compared below their common directory: the same corpus under another prefix (a new host's
        # workdir or home, the package's sample elsewhere) is the same list.
        was, now = _relative(saved), _relative(self._files or [])
        if list(was) != list(now):
            added, removed = [f for f in now if f not in was], [f for f in was if f not in now]

            def few(fs: list[str]) -> str:
                return ", ".join(fs[:3]) + (f" and {len(fs) - 3} more" if len(fs) > 3 else "")

            what = "; ".join(
                x
                for x in (
                    f"added: {few(added)}" if added else "",
                    f"removed: {few(removed)}" if removed else "",
                )
                if x
            )
            raise DataError(
                f"cannot resume the data stream exactly: data.paths {self.cfg.paths} resolve to {len(now)} "
                f"file(s), the checkpoint's stream read {len(was)} ({what or 'same files, another order'}); "
                "its position names a file by its place in that list. Fix: restore the files as they were "
                "at the checkpoint to resume exactly, or set data.resume: fresh (--set data.resume=fresh) to "
                "keep the checkpoint's weights and step and start the data stream anew over the new corpus"
            )
        changed = [f for f in now if now[f] != was[f]]
        if changed and self.rank == 0:
            detail = ", ".join(f"{f} ({was[f]} -> {now[f]} bytes)" for f in changed[:3])
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            print(
                f"[nsa] data: resuming the {self.split} stream although {len(changed)} file(s) changed size "
                f"since the checkpoint: {detail}{more}; the stream goes on at the saved file and document "
                "index, so documents edited before that point are not read again this epoch",
                file=sys.stderr,
                flush=True,
            )

    def _start(self) -> None:
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=max(1, self.cfg.prefetch))
        self._thread = threading.Thread(
            target=self._produce,
            args=(self._pos, dict(self._counters), self._stop, self._queue),
            name=f"nsa-data-{self.split}-rank{self.rank}",
            daemon=True,
        )
        self._thread.start()

    def _stop_thread(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        assert self._queue is not None
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        # A producer stuck in a blocking read cannot be interrupted; it is a daemon, so do not wait long.
        self._thread.join(timeout=2.0)
        self._thread, self._queue = None, None

    def _put(self, q: queue.Queue[Any], item: Any, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stop

    def _produce(
        self, pos: Position | None, counters: dict[str, int], stop: threading.Event, q: queue.Queue[Any]
    ) -> None:
        docs = None
        try:
            doc_pos, skip = pos if pos is not None else (None, 0)
            state = {"epoch": counters["epoch"]}
            docs = self._documents(doc_pos, state, stop)
            packer = Packer(
                docs,
                self.tokenizer.encode,
                self.tokenizer.eod,
                self.seq_len,
                self.batch_size,
                skip,
                count_first=pos is None,
            )
            while not stop.is_set():
                try:
                    x, y, nxt = packer.next_batch()
                except StopIteration:
                    raise DataError(
                        f"data source {self.cfg.source!r} ended unexpectedly on rank {self.rank}"
                    ) from None
                snap = {
                    "docs_read": counters["docs_read"] + packer.docs_read,
                    "tokens_read": counters["tokens_read"] + packer.tokens_read,
                    "dropped_tokens": counters["dropped_tokens"] + packer.dropped_tokens,
                    "epoch": state["epoch"],
                }
                # y is copied so a caller editing targets in place (ignore-index masks) cannot touch x.
                self._put(q, (torch.from_numpy(x), torch.from_numpy(np.array(y)), nxt, snap), stop)
        except _Stop:
            pass
        except BaseException as e:
            with contextlib.suppress(_Stop):
                self._put(q, e, stop)
        finally:
            if docs is not None:
                docs.close()

    def _documents(
        self, doc_pos: Any, state: dict[str, int], stop: threading.Event
    ) -> Iterator[tuple[Any, str]]:
        """(doc_pos, text) for this split, epoch after epoch, from `doc_pos` on; retries transient errors.

        doc_pos = (epoch, source cursor, index of the document among this split's documents of the
        epoch). Train documents come from the source's own rank shard; val documents are read from
        the whole source and dealt round-robin (val document k to rank k mod W), so even a small
        held-out set gives every rank documents.
        """
        epoch, cursor, k0 = doc_pos if doc_pos is not None else (state["epoch"], None, 0)
        want_val = self.split == "val"
        deal = self.world_size if want_val else 1
        frac = self.cfg.val_fraction
        while not stop.is_set():
            state["epoch"] = epoch
            k = k0  # running index of this split's documents in the epoch (all ranks' when dealing)
            kept = seen = 0  # this rank's documents of the split; all non-empty documents looked at
            last: Any = _NOTHING  # cursor of the last document looked at, to reopen after it on a retry
            attempt = 0
            while True:
                it = self.source.iter_epoch(epoch, cursor if last is _NOTHING else last)
                try:
                    for cur, text in it:
                        if last is not _NOTHING and cur == last:
                            continue
                        last, attempt = cur, 0
                        if not text:
                            continue
                        seen += 1
                        if is_val_document(text, frac) != want_val:
                            continue
                        mine = k % deal == (self.rank if want_val else 0)
                        k += 1
                        if mine:
                            kept += 1
                            yield (epoch, cur, k - 1), text
                    break
                except DataError:
                    raise
                except Exception as e:
                    if not is_transient(e) or attempt >= self.cfg.retries:
                        tries = f" after {attempt} retries" if attempt else ""
                        path = getattr(e, "data_file", None)
                        where, fix = "", ""
                        if path is not None:
                            where = f" reading {path}"
                            fix = "; fix the file (or its permissions) or remove it from data.paths"
                        raise DataError(
                            f"data source {self.cfg.source!r} read failed{tries} on rank {self.rank}{where}: "
                            f"{type(e).__name__}: {e}{fix} ({self.source.describe()})"
                        ) from e
                    delay = self.cfg.retry_backoff_s * 2**attempt
                    attempt += 1
                    if stop.wait(delay):
                        return
                finally:
                    it.close()
            if kept == 0 and cursor is None:
                # What the split saw: a corpus of one big .txt file is ONE document, and "use a bigger
                # corpus" alone puzzled its owner (300 KB of text, no held-out split).
                files = getattr(self.source, "files", [])
                txt = any(f.endswith((".txt", ".txt.gz")) for f in files)
                dealt = f", dealt to {deal} ranks" if deal > 1 and k else ""
                raise DataError(
                    f"rank {self.rank} of {self.world_size} got no {self.split!r} documents from "
                    f"{self.source.describe()} (val_fraction {frac:g}): {seen} document(s) in all, {k} of "
                    f"them {'held out' if want_val else 'for training'}{dealt}. Use a bigger corpus, fewer "
                    f"ranks, or {'a larger' if want_val else 'a smaller'} data.val_fraction"
                    + (
                        "; a .txt file is one document: split the text into several .txt files, or a "
                        ".jsonl with one document a line."
                        if txt
                        else "."
                    )
                )
            epoch, cursor, k0 = epoch + 1, None, 0
