"""The `data:` section of the training config, its vocabulary size, and the pipeline's error type.

This module owns `DataConfig` (pydantic v2, extra="forbid": nsa.train.config turns an unknown key
into a did-you-mean naming the file), the
tokenizer vocabulary sizes (`vocab_size_for`, no I/O) and `DataError`. It must stay torch-free and
must not import `datasets` or `pyarrow`: the launcher validates training configs on a laptop that
has none of them. Everything that reads data lives in the sibling modules and is imported lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BYTE_VOCAB_SIZE = 257  # 256 byte values + one end-of-document token (id 256)
GPT2_VOCAB_SIZE = 50257  # GPT-2 BPE; its <|endoftext|> (id 50256) is the end-of-document token
DEFAULT_HF_PATH = "HuggingFaceFW/fineweb-edu"


class DataError(RuntimeError):
    """A data problem the user must fix (missing files, bad field, unreachable hub, timeout).

    The message names the source and the fix; the trainer turns it into an `error` event.
    """


class DataConfig(BaseModel):
    """Where training text comes from, how it is tokenized, and how the loader behaves.

    `DataConfig()` is the bundled `sample` corpus with the byte tokenizer: it trains offline.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["sample", "files", "fineweb_edu", "synthetic"] = "sample"
    """`sample`: the small English corpus shipped in nsa/data/sample/. `files`: local jsonl, jsonl.gz,
    parquet or txt files named by `paths`. `fineweb_edu`: Hugging Face `datasets` streaming of
    `hf_path` (the hub repo, or a local directory laid out like it). `synthetic`: generated number
    sequences with learnable structure, no I/O."""

    tokenizer: Literal["byte", "gpt2"] = "byte"
    """`byte`: UTF-8 bytes (ids 0..255) plus end-of-document 256; vocabulary 257. `gpt2`: GPT-2 BPE via
    tiktoken, from its cached encoding or from the files under `tokenizer_path`; vocabulary 50257."""

    tokenizer_path: str | None = None
    """For `gpt2`: a local directory holding GPT-2's vocab.json + merges.txt (or its tokenizer.json), read
    offline by tiktoken (transformers only where tiktoken is missing); never replaced by tiktoken's
    cached encoding. Checked by nsa-train before torch starts. Unused by the byte tokenizer."""

    paths: list[str] = Field(default_factory=list)
    """For `files`: file paths or glob patterns (`**` allowed). A `.txt` file is one document; every
    line of `.jsonl`/`.jsonl.gz` and every row of `.parquet` is one document."""

    text_field: str = "text"
    """The field holding the document text in jsonl rows, parquet columns and hub examples."""

    hf_path: str = DEFAULT_HF_PATH
    """For `fineweb_edu`: the hub dataset id, or a local directory with the same layout
    (README.md config header + data/<name>/*.parquet) to run the same code path offline."""

    hf_name: str | None = "sample-10BT"
    """For `fineweb_edu`: the dataset config (subset), e.g. `sample-10BT` or `CC-MAIN-2024-10`."""

    hf_split: str = "train"
    """For `fineweb_edu`: the split to stream. The hub dataset only has `train`; validation is held out
    from it by `val_fraction`."""

    val_fraction: float = Field(default=0.05, ge=0.0, lt=0.5)
    """Fraction of documents held out for validation, chosen by a hash of each document's text, so the
    train and val streams are disjoint whatever the sharding, order or epoch. 0 = no held-out split
    (every document trains; only with `train.eval_every: 0` and `eval.long_context_every: 0`)."""

    seed: int = 0
    """Base seed for the per-epoch file order and the synthetic generator; combined with the `seed`
    argument of build_loader."""

    shuffle_files: bool = True
    """Reshuffle the order of files (shards) every epoch, deterministically from seed + epoch."""

    prefetch: int = Field(default=4, ge=1, le=256)
    """Batches prepared ahead by the background thread (the bounded queue's depth)."""

    first_batch_timeout_s: float = Field(default=120.0, gt=0.0, le=86400.0)
    """How long the first batch may take (opening the source included) before a DataError that names
    the source. A hub that cannot be reached fails here instead of hanging."""

    batch_timeout_s: float = Field(default=600.0, gt=0.0, le=86400.0)
    """How long any later batch may take before a DataError."""

    retries: int = Field(default=3, ge=0, le=20)
    """Re-open attempts after a transient read error (OSError, connection errors), resuming at the
    document where reading stopped."""

    retry_backoff_s: float = Field(default=1.0, ge=0.0, le=3600.0)
    """First retry delay; doubled after every failed attempt."""

    resume: Literal["exact", "fresh"] = "exact"
    """At `nsa-train --resume`: `exact` goes on with each rank's stream at the checkpoint's position (the
    next batch is the one an uninterrupted run gets), and refuses, naming what changed, a corpus whose
    files or a data setting that changed since; `fresh` keeps the checkpoint's weights, optimizer and
    step but starts the stream anew over the corpus and settings as they are now, its file order
    seeded by the resume step (not the run's first epoch replayed): for a grown corpus or a new
    seq_len. Unused without --resume."""

    @model_validator(mode="after")
    def _source_needs(self) -> DataConfig:
        if self.source == "files" and not self.paths:
            raise ValueError(
                "data.source is 'files' but data.paths is empty: list files or globs, "
                "e.g. paths: ['corpus/*.jsonl'] (or use source: sample)"
            )
        if self.source == "fineweb_edu" and not self.hf_path:
            raise ValueError(f"data.hf_path is empty: use {DEFAULT_HF_PATH!r} or a local directory")
        if not self.text_field:
            raise ValueError("data.text_field is empty: name the field holding the text, e.g. 'text'")
        return self


def vocab_size_for(cfg: DataConfig) -> int:
    """Vocabulary size the model needs for `cfg.tokenizer` (end-of-document token included). No I/O."""
    return BYTE_VOCAB_SIZE if cfg.tokenizer == "byte" else GPT2_VOCAB_SIZE


def eod_token_for(cfg: DataConfig) -> int:
    """The end-of-document token id placed between packed documents."""
    return BYTE_VOCAB_SIZE - 1 if cfg.tokenizer == "byte" else GPT2_VOCAB_SIZE - 1


def gpt2_files(cfg: DataConfig) -> dict[str, Path] | None:
    """The GPT-2 tokenizer files `data.tokenizer_path` names ({"vocab", "merges"} or {"tokenizer"}), None
    when it is unset (or the tokenizer is `byte`), or a DataError naming the path and the fix. No I/O
    beyond stat: nsa-train calls it before torch starts, the loader again when it builds the tokenizer."""
    if cfg.tokenizer != "gpt2" or not cfg.tokenizer_path:
        return None
    p = Path(cfg.tokenizer_path).expanduser()
    if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
        return {"vocab": p / "vocab.json", "merges": p / "merges.txt"}
    if (p / "tokenizer.json").is_file():
        return {"tokenizer": p / "tokenizer.json"}
    if not p.exists():
        why = "no such directory"
    elif not p.is_dir():
        why = "not a directory"
    else:
        held = sorted(f.name for f in p.iterdir())
        why = f"holds neither vocab.json + merges.txt nor tokenizer.json (it holds {held[:6] or 'nothing'})"
    raise DataError(
        f"data.tokenizer_path = {cfg.tokenizer_path!r} (for data.tokenizer='gpt2'): {why}. Fix: point it at a "
        "directory with GPT-2's vocab.json + merges.txt or its tokenizer.json (the files of the hub's "
        "openai-community/gpt2), or unset data.tokenizer_path to use tiktoken's cached gpt2 encoding, or "
        "use data.tokenizer='byte'"
    )
