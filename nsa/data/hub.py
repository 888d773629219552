"""The `fineweb_edu` source: Hugging Face `datasets` streaming of one rank's shard.

This module owns opening HuggingFaceFW/fineweb-edu (or any hub dataset, or a local directory laid out
like the hub repo: README.md with `configs:` + data/<name>/*.parquet) as a streaming IterableDataset,
its rank sharding (whole shards per rank when the shard count is a multiple of the world size, via
split_dataset_by_node; whole shards dealt unevenly when there are more shards than ranks, via
IterableDataset.shard; example i to rank i % W otherwise, via split_dataset_by_node), turning hub
failures into a DataError that says how to point the config at local files, and the resumable cursor
(the dataset's own state_dict taken before each document). It opens the dataset lazily, on the
loader's background thread, so the first-batch timeout covers a slow hub. It must not download whole
shards, shuffle (a shuffle buffer would break exact resume), or import torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nsa.data.config import DataConfig, DataError


def hub_offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


class HubSource:
    """One rank's shard of a streaming dataset. Cursor: the IterableDataset state before a document."""

    label = "fineweb_edu"

    def __init__(self, cfg: DataConfig, *, rank: int, world_size: int, seed: int) -> None:
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.local = Path(cfg.hf_path).expanduser().is_dir()
        self._base: Any = None
        self._n_shards: int | None = None

    def describe(self) -> str:
        c = self.cfg
        where = f"local copy {c.hf_path}" if self.local else f"hub dataset {c.hf_path}"
        if self._n_shards is None:
            shard = "shards not opened yet"
        elif self._n_shards % self.world_size == 0:
            shard = f"{self._n_shards} shards, whole shards per rank"
        elif self._n_shards > self.world_size:
            shard = f"{self._n_shards} shards, uneven whole shards per rank (shard i to rank i % W)"
        else:
            shard = f"{self._n_shards} shards, examples split across ranks"
        return (
            f"fineweb_edu: {where} name={c.hf_name} split={c.hf_split} field {c.text_field!r} (streaming); "
            f"rank {self.rank}/{self.world_size}: {shard}"
        )

    def _fix(self) -> str:
        return (
            "Fix: download the parquet shards elsewhere and set data.hf_path to that directory "
            "(laid out like the hub repo: README.md + data/<name>/*.parquet), or use "
            "data.source: files with data.paths: ['<dir>/**/*.parquet']"
        )

    def _open(self) -> Any:
        import datasets
        from datasets.distributed import split_dataset_by_node

        c = self.cfg
        try:
            ds = datasets.load_dataset(c.hf_path, name=c.hf_name, split=c.hf_split, streaming=True)
        except ConnectionError as e:
            why = "HF_HUB_OFFLINE=1 is set" if hub_offline() else f"network error: {e}"
            raise DataError(
                f"data.source fineweb_edu: cannot reach the Hugging Face hub for {c.hf_path!r} "
                f"(name={c.hf_name}, split={c.hf_split}; {why}). {self._fix()}"
            ) from e
        except (ValueError, FileNotFoundError) as e:
            raise DataError(
                f"data.source fineweb_edu: cannot open {c.hf_path!r} name={c.hf_name!r} "
                f"split={c.hf_split!r}: {e}. Check data.hf_name / data.hf_split (or data.hf_path)."
            ) from e
        cols = ds.column_names
        if cols is not None and c.text_field not in cols:
            raise DataError(
                f"data.source fineweb_edu: {c.hf_path} has no text field {c.text_field!r} "
                f"(columns: {cols}); set data.text_field"
            )
        ds = ds.select_columns([c.text_field])
        n, w = ds.n_shards, self.world_size
        self._n_shards = n
        if n % w == 0 or n < w:
            # Whole shards per rank when they divide evenly, otherwise example i goes to rank i % W
            # (every rank then streams every shard and keeps 1/W of it).
            return split_dataset_by_node(ds, rank=self.rank, world_size=w)
        # More shards than ranks but not a multiple: whole shards, some ranks one more than others.
        # Over the network this beats reading everything W times; every stream is infinite anyway.
        return ds.shard(num_shards=w, index=self.rank, contiguous=False)

    def iter_epoch(self, epoch: int, start: Any | None) -> Iterator[tuple[Any, str]]:
        if self._base is None:
            self._base = self._open()
        ds = self._base
        ds.set_epoch(epoch)
        # The dataset object remembers a starting state for every later iter() of the same epoch;
        # None clears it so an epoch that starts fresh really starts at its first document.
        ds.load_state_dict(start)
        before = start  # None names the epoch's first document
        field = self.cfg.text_field
        it = iter(ds)
        try:
            for ex in it:
                text = ex[field]
                if text is not None and not isinstance(text, str):
                    raise DataError(
                        f"data.source fineweb_edu: field {field!r} is {type(text).__name__}, not text; "
                        "set data.text_field to a string field"
                    )
                yield before, text or ""
                before = ds.state_dict()
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
