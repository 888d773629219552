"""Tokenizers: text -> int32 token ids, without the end-of-document token (packing adds it).

This module owns the byte tokenizer (the default: UTF-8 bytes, ids 0..255, EOD 256) and the GPT-2
BPE adapter (tiktoken's cached encoding, or transformers reading local files). It must not download
anything behind the user's back or emit length warnings: documents are never truncated here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nsa.data.config import BYTE_VOCAB_SIZE, GPT2_VOCAB_SIZE, DataConfig, DataError


class ByteTokenizer:
    """UTF-8 bytes as token ids; 256 is end-of-document."""

    name = "byte"
    vocab_size = BYTE_VOCAB_SIZE
    eod = BYTE_VOCAB_SIZE - 1

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8", errors="replace"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


class GPT2Tokenizer:
    """GPT-2 BPE through whichever backend can load it locally; <|endoftext|> is end-of-document."""

    name = "gpt2"
    vocab_size = GPT2_VOCAB_SIZE
    eod = GPT2_VOCAB_SIZE - 1

    def __init__(self, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str], backend: str):
        self._encode = encode
        self._decode = decode
        self.backend = backend

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._encode(text), dtype=np.int32)

    def decode(self, ids: list[int] | np.ndarray) -> str:
        return self._decode([int(i) for i in ids])


def _gpt2_transformers(path: str) -> GPT2Tokenizer:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # Documents are packed, never fed whole to a model, so the model-length warning is noise.
    tok.model_max_length = int(1e30)
    return GPT2Tokenizer(
        lambda t: tok.encode(t, add_special_tokens=False), tok.decode, f"transformers:{path}"
    )


def _gpt2_tiktoken() -> GPT2Tokenizer:
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    # disallowed_special=() treats a literal "<|endoftext|>" in a document as text, not as our EOD.
    return GPT2Tokenizer(lambda t: enc.encode(t, disallowed_special=()), enc.decode, "tiktoken")


def build_tokenizer(cfg: DataConfig) -> ByteTokenizer | GPT2Tokenizer:
    """The tokenizer `cfg.tokenizer` names, or a DataError that says how to make it available."""
    if cfg.tokenizer == "byte":
        return ByteTokenizer()
    problems: list[str] = []
    if cfg.tokenizer_path:
        p = Path(cfg.tokenizer_path).expanduser()
        has_files = (p / "tokenizer.json").is_file() or (
            (p / "vocab.json").is_file() and (p / "merges.txt").is_file()
        )
        if not has_files:
            problems.append(f"data.tokenizer_path={cfg.tokenizer_path!r} has no vocab.json + merges.txt")
        else:
            try:
                return _gpt2_transformers(str(p))
            except ImportError:
                problems.append("transformers is not installed (pip install transformers)")
            except Exception as e:
                problems.append(f"transformers could not load {p}: {e}")
    try:
        return _gpt2_tiktoken()
    except ImportError:
        problems.append("tiktoken is not installed (pip install tiktoken)")
    except Exception as e:
        cache = os.environ.get("TIKTOKEN_CACHE_DIR", "<default cache>")
        problems.append(f"tiktoken has no local gpt2 encoding (cache {cache}): {type(e).__name__}: {e}")
    raise DataError(
        "data.tokenizer='gpt2' cannot be loaded from local files: "
        + "; ".join(problems)
        + ". Fix: install tiktoken and run once online (or copy its cache and set TIKTOKEN_CACHE_DIR), "
        "or install transformers and set data.tokenizer_path to a directory with vocab.json and "
        "merges.txt, or use data.tokenizer='byte'."
    )
