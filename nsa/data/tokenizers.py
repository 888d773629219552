"""Tokenizers: text -> int32 token ids, without the end-of-document token (packing adds it).

This module owns the byte tokenizer (the default: UTF-8 bytes, ids 0..255, EOD 256) and the GPT-2
BPE adapter (tiktoken's cached encoding, or GPT-2's local files read by tiktoken, or by
transformers where tiktoken is missing). It must not download
anything behind the user's back or emit length warnings: documents are never truncated here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nsa.data.config import BYTE_VOCAB_SIZE, GPT2_VOCAB_SIZE, DataConfig, DataError, gpt2_files


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


def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: the printable character standing for each byte value."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _gpt2_local(where: str, files: dict[str, Path]) -> GPT2Tokenizer:
    """GPT-2's BPE from its local files through tiktoken (the train extra's tokenizer; transformers is
    not installed by it). Ranks are the vocabulary ids, which GPT-2's files give in merge order (checked)."""
    import tiktoken

    def bad(why: str) -> DataError:
        return DataError(
            f"data.tokenizer_path = {where!r}: {why}; tokenizer 'gpt2' needs GPT-2's byte-level BPE "
            f"({GPT2_VOCAB_SIZE} tokens, <|endoftext|> {GPT2_VOCAB_SIZE - 1}: the model's vocabulary and "
            "EOD token). Fix: use GPT-2's own files (the hub's openai-community/gpt2)"
        )

    try:
        if "tokenizer" in files:
            spec = json.loads(files["tokenizer"].read_text(encoding="utf-8"))
            model = spec.get("model") or {}
            if model.get("type") != "BPE":
                raise bad(f"tokenizer.json holds a {model.get('type')!r} model, not BPE")
            vocab = dict(model["vocab"])
            for t in spec.get("added_tokens") or []:
                vocab.setdefault(t["content"], t["id"])
            merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        else:
            vocab = json.loads(files["vocab"].read_text(encoding="utf-8"))
            lines = files["merges"].read_text(encoding="utf-8").splitlines()
            merges = [tuple(m.split(" ", 1)) for m in lines if m and not m.startswith("#version")]
    except DataError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise bad(f"cannot read its files ({type(e).__name__}: {e})") from e
    eot = vocab.pop("<|endoftext|>", None)
    if len(vocab) + 1 != GPT2_VOCAB_SIZE or eot != GPT2_VOCAB_SIZE - 1:
        raise bad(f"{len(vocab) + (eot is not None)} tokens, <|endoftext|> {eot}")
    dec = _byte_decoder()
    try:
        ranks = {bytes(dec[c] for c in tok): int(i) for tok, i in vocab.items()}
    except KeyError as e:
        raise bad(f"token characters outside GPT-2's byte alphabet ({e})") from e
    merged = [vocab.get(a + b) for a, b in merges]
    if None in merged or merged != sorted(merged) or len(ranks) != len(vocab):
        raise bad("its vocabulary ids do not follow its merges in order")
    pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    enc = tiktoken.Encoding(
        name=f"gpt2:{where}",
        pat_str=pat,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": GPT2_VOCAB_SIZE - 1},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )
    return GPT2Tokenizer(lambda t: enc.encode(t, disallowed_special=()), enc.decode, f"tiktoken:{where}")


def _gpt2_tiktoken() -> GPT2Tokenizer:
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    # disallowed_special=() treats a literal "<|endoftext|>" in a document as text, not as our EOD.
    return GPT2Tokenizer(lambda t: enc.encode(t, disallowed_special=()), enc.decode, "tiktoken")


def build_tokenizer(cfg: DataConfig) -> ByteTokenizer | GPT2Tokenizer:
    """The tokenizer `cfg.tokenizer` names, or a DataError that says how to make it available."""
    if cfg.tokenizer == "byte":
        return ByteTokenizer()
    files = gpt2_files(cfg)
    if files is not None:
        # The user's files or a DataError naming them: never tiktoken's cache (or its download) instead.
        assert cfg.tokenizer_path is not None
        try:
            return _gpt2_local(cfg.tokenizer_path, files)
        except ImportError:
            pass
        try:
            return _gpt2_transformers(str(Path(cfg.tokenizer_path).expanduser()))
        except ImportError:
            why = "neither tiktoken nor transformers is installed (pip install tiktoken)"
        except Exception as e:
            why = f"transformers could not load it: {e}"
        raise DataError(f"data.tokenizer_path = {cfg.tokenizer_path!r}: {why}")
    problems: list[str] = []
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
        "or set data.tokenizer_path to a directory with GPT-2's vocab.json and merges.txt "
        "(or tokenizer.json), or use data.tokenizer='byte'."
    )
