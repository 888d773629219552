"""The data pipeline's public face: `DataConfig`, `vocab_size_for`, `DataError`, `build_loader`.

Importing this package must stay torch-free and fast (the launcher validates configs with it on a
laptop), so it only re-exports the config module; `build_loader` imports the loader (torch, numpy,
and for some sources pyarrow / datasets) when it is called. See docs/data.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsa.data.config import DataConfig, DataError, eod_token_for, vocab_size_for

if TYPE_CHECKING:
    from nsa.data.loader import DataLoader

__all__ = ["DataConfig", "DataError", "build_loader", "eod_token_for", "vocab_size_for"]


def build_loader(
    cfg: DataConfig,
    *,
    seq_len: int,
    batch_size: int,
    rank: int,
    world_size: int,
    split: str = "train",
    seed: int = 0,
) -> DataLoader:
    """One rank's infinite stream of (x, y) LongTensor [batch_size, seq_len] batches; see loader.py."""
    from nsa.data.loader import DataLoader  # imported here: `import nsa.data` stays torch-free

    return DataLoader(
        cfg, seq_len=seq_len, batch_size=batch_size, rank=rank, world_size=world_size, split=split, seed=seed
    )
