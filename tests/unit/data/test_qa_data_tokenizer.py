"""`tokenizer: gpt2` from a local `tokenizer_path`, offline, as a user copies GPT-2's files from the
hub (product QA of the data pipeline, 2026-11-27): vocab.json + merges.txt, or tokenizer.json only,
or a wrong directory. No GPT-2 files exist on this machine and nothing may be downloaded, so the tests
write a vocabulary in GPT-2's exact formats and size (256 byte tokens, 50000 merges, <|endoftext|>
50256); the loader must not care that its merges are made up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa.data import DataConfig, DataError, build_loader
from nsa.data.tokenizers import build_tokenizer
from nsa.train.cli import main
from tests.assets.trainrun import TINY


def byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode: the printable character standing for each byte value, in its order."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def gpt2_like(root: Path, *, n_merges: int = 50000, layout: str = "vocab+merges") -> Path:
    """A byte-level BPE in GPT-2's file formats: ids 0..255 the bytes, then one id per merge."""
    chars = byte_chars()
    vocab = {c: i for i, c in enumerate(chars)}
    merges = []
    for a in chars:
        for b in chars:
            if len(merges) == n_merges:
                break
            merges.append((a, b))
            vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    root.mkdir(parents=True, exist_ok=True)
    if layout == "vocab+merges":
        (root / "vocab.json").write_text(json.dumps(vocab))
        (root / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    else:
        eot = vocab.pop("<|endoftext|>")
        model = {"type": "BPE", "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}
        added = [{"id": eot, "content": "<|endoftext|>", "special": True}]
        (root / "tokenizer.json").write_text(
            json.dumps({"version": "1.0", "added_tokens": added, "model": model})
        )
    return root


TEXT = "Hello world! Ünïcödé, 中文, emoji 😀 and a literal <|endoftext|> in the text."


@pytest.mark.parametrize("layout", ["vocab+merges", "tokenizer.json"])
def test_a_local_gpt2_tokenizer_loads_offline_without_transformers(tmp_path: Path, layout: str) -> None:
    """The train extra installs tiktoken, not transformers: a tokenizer_path was usable only with
    transformers installed besides, and then only where its AutoTokenizer could read the directory."""
    tok = build_tokenizer(
        DataConfig(tokenizer="gpt2", tokenizer_path=str(gpt2_like(tmp_path / "tok", layout=layout)))
    )
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT and tok.eod == 50256
    assert 0 < len(ids) < len(TEXT.encode()) and int(ids.max()) < 50256  # merged, and the literal is text
    other = "vocab+merges" if layout != "vocab+merges" else "tokenizer.json"
    twin = build_tokenizer(
        DataConfig(tokenizer="gpt2", tokenizer_path=str(gpt2_like(tmp_path / "b", layout=other)))
    )
    assert list(twin.encode(TEXT)) == list(ids)
    cfg = DataConfig(tokenizer="gpt2", tokenizer_path=str(tmp_path / "tok"))
    with build_loader(cfg, seq_len=32, batch_size=2, rank=0, world_size=1) as ld:
        x, y = ld.next_batch()
    assert x.shape == (2, 32) and int(x.max()) < 50257 and bool((y[:, :-1] == x[:, 1:]).all())


def test_a_vocabulary_of_another_size_is_refused_with_its_size(tmp_path: Path) -> None:
    """The model's embedding has GPT-2's 50257 rows: a larger vocabulary's ids index past it (an
    IndexError inside a training step), a smaller one's <|endoftext|> is not the EOD token 50256."""
    path = gpt2_like(tmp_path / "small", n_merges=1000)
    with pytest.raises(DataError, match=r"tokenizer_path.*1257 tokens.*50257"):
        build_tokenizer(DataConfig(tokenizer="gpt2", tokenizer_path=str(path)))


@pytest.mark.parametrize("what", ["missing", "empty", "vocab only"])
def test_a_wrong_tokenizer_path_is_exit_2_before_torch_with_no_run_dir(
    tmp_path: Path, capsys, what: str
) -> None:
    """It was found only by the loader, after torch and the process group had started (a run dir
    left), and then fell back to tiktoken's cache, or its download, ignoring the user's setting."""
    path = tmp_path / "tok"
    if what != "missing":
        path.mkdir()
    if what == "vocab only":
        (path / "vocab.json").write_text("{}")
    with pytest.raises(DataError, match=r"data\.tokenizer_path"):
        build_tokenizer(DataConfig(tokenizer="gpt2", tokenizer_path=str(path)))
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run), "--set", "data.tokenizer=gpt2"]
    assert main([*argv, "--set", f"data.tokenizer_path={path}"]) == 2
    err = capsys.readouterr().err
    assert f"data.tokenizer_path = '{path}'" in err and "merges.txt" in err and "tokenizer.json" in err, err
    assert not run.exists()
