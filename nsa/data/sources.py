"""Document sources and rank sharding: where each rank's documents come from, in a resumable order.

This module owns the `files` / `sample` / `synthetic` sources and the shard arithmetic they share
(the Hugging Face `fineweb_edu` source lives in hub.py). A source yields (cursor, text) for ONE rank
and ONE epoch, starting at a cursor it produced earlier, so the loader can reopen it exactly where a
run stopped. Sharding: when the file count is a multiple of the world size, each rank reads whole
files (the epoch's shuffled file order, rank r taking every W-th file); otherwise every rank reads
all files and keeps documents whose running index is r mod W. Both are disjoint and cover the source
in every epoch. It must not tokenize, hold the val/train split, or import torch.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nsa.data.config import DEFAULT_HF_PATH, DataConfig, DataError

SAMPLE_DIR = Path(__file__).with_name("sample")
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet", ".txt", ".txt.gz")

Cursor = Any  # JSON-able; meaningful only to the source that made it


def _suffix(path: str) -> str:
    for s in SUFFIXES:
        if path.endswith(s):
            return s
    return ""


def _readable(path: str) -> bool:
    # Anything that exists and is not a directory: regular files, but also named pipes.
    return Path(path).exists() and not Path(path).is_dir()


def resolve_paths(patterns: list[str], what: str = "data.paths") -> list[str]:
    """Expand globs into a sorted, de-duplicated file list, or raise a DataError naming the pattern."""
    files: list[str] = []
    for pat in patterns:
        p = str(Path(pat).expanduser())
        if glob.has_magic(p):
            hits = sorted(h for h in glob.glob(p, recursive=True) if _readable(h))
            if not hits:
                raise DataError(f"{what}: pattern {pat!r} matched no files; fix the path or the glob")
            files.extend(hits)
        elif Path(p).is_dir():
            hits = sorted(h for h in glob.glob(f"{p}/**/*", recursive=True) if _suffix(h))
            if not hits:
                raise DataError(f"{what}: directory {pat!r} holds no {', '.join(SUFFIXES)} files")
            files.extend(hits)
        elif _readable(p):
            files.append(p)
        else:
            raise DataError(f"{what}: file {pat!r} does not exist; fix the path (or use a glob)")
    for f in files:
        if not _suffix(f):
            raise DataError(f"{what}: {f!r} has an unsupported extension; use one of {', '.join(SUFFIXES)}")
    # One file, one entry: `**` follows symlinked directories, so `corpus/latest -> v2` listed every file
    # of v2 twice and a link loop (`v2/loop -> .`) 81 times, each read once per epoch. The first name in
    # sorted order is kept.
    seen: dict[str, str] = {}
    for f in sorted(dict.fromkeys(files)):
        seen.setdefault(os.path.realpath(f), f)
    return sorted(seen.values())


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """glob.glob's matching as a regex over absolute paths (`**/` any directories, `*` and `?` within
    one name, `[...]` a class); Python 3.11 has no glob.translate."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            j = pattern.index("]", i + 2)
            out.append("[" + pattern[i + 1 : j].replace("!", "^", 1) + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def covers(patterns: list[str], path: str) -> str | None:
    """The first of `patterns` (data.paths) under which `path` would be read, if it existed, or None."""
    target = os.path.abspath(path)
    for pat in patterns:
        p = os.path.abspath(os.path.expanduser(pat))
        if glob.has_magic(p):
            if _glob_regex(p).match(target):
                return pat
        elif target == p or (_suffix(target) and target.startswith(p.rstrip("/") + "/")):
            return pat
    return None


def preflight(cfg: DataConfig) -> None:
    """What can be checked of the local files before torch starts, or a DataError: for `files`, the
    paths resolve (they exist, globs match, extensions are supported), not every file is empty, and
    the head of the first PEEK_FILES files has the text field (_peek);
    for `fineweb_edu`, an `hf_path` written as a path (/, ./, ../, ~) is a directory, and a local one can
    give `hf_name` / `hf_split` (_local_hub_copy).

    nsa-train calls it on the training host before torch starts, so a mistyped path is exit 2 in a
    fraction of a second with no run dir made (the loader found it only after torch and the process
    group had started, and left a run dir behind). Config validation on the laptop does not: the
    files live on the host. The loader resolves the paths again when built and finds the rest as it reads.
    """
    if cfg.source == "fineweb_edu":
        # A hub id is `org/name`; a path is written as one. Not there, `datasets` failed only once the
        # loader opened it (57 s into a start on the loaded dev machine), saying to check hf_name/hf_split.
        p = cfg.hf_path
        if p.startswith(("/", "./", "../", "~")) and not Path(p).expanduser().is_dir():
            raise DataError(
                f"data.hf_path: local directory {p!r} does not exist; fix the path, or give a hub dataset "
                f"id (org/name, e.g. {DEFAULT_HF_PATH!r})"
            )
        if Path(p).expanduser().is_dir():
            _local_hub_copy(cfg, Path(p).expanduser())
        return
    if cfg.source != "files":
        return
    files = resolve_paths(cfg.paths)
    if all(Path(f).is_file() for f in files) and not any(os.stat(f).st_size for f in files):
        raise DataError(
            f"data.paths: every file is empty ({len(files)} file(s), e.g. {files[0]!r}): no text to train on; "
            "fix the paths or fill the files"
        )
    for f in files[:PEEK_FILES]:
        if Path(f).is_file():  # not a named pipe: opening one would wait for its writer
            _peek(f, cfg.text_field)


PEEK_FILES = 8  # files whose head preflight reads: a wrong text_field shows in the first one


def _peek(path: str, field: str) -> None:
    """The text field of a file's first record (jsonl) or its column's type (parquet), or a DataError.
    A wrong `text_field` was found only at the first batch: 10.2 s into a start on the loaded dev
    machine (torch imported), with a run dir left."""
    suffix = _suffix(path)
    try:
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            if field not in schema.names:
                raise DataError(
                    f"{path}: no text column {field!r} (columns: {schema.names}); set data.text_field to "
                    "the text column"
                )
            kind = schema.field(field).type
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
                raise DataError(
                    f"{path}: column {field!r} is {kind}, not text; set data.text_field to a string column"
                )
        elif suffix in (".jsonl", ".jsonl.gz"):
            head = _iter_file(path, field, 0, lambda i: True)
            try:
                next(head, None)  # the first record parses, and its field is there and text (or null)
            finally:
                head.close()
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"{path}: cannot read it ({type(e).__name__}: {e}); fix or remove the file") from e


HUB_DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".txt", ".arrow", ".jsonl.gz", ".json.gz")


def _local_hub_copy(cfg: DataConfig, root: Path) -> None:
    """A local copy of a hub dataset that cannot give `hf_name` / `hf_split`, or a DataError. `datasets`
    found these on the loader's thread, after torch and the process group had started (28 s on the
    loaded dev machine, a run dir left). Only what `datasets` certainly refuses: no data files at all;
    a README.md `configs:` header without `hf_name` or without `hf_split` for it; no header, where
    `datasets` knows only the config `default`. Hidden directories (the hub client's .cache) are not data."""
    data = (
        f
        for f in root.rglob("*")
        if f.name.endswith(HUB_DATA_SUFFIXES)
        and not any(x.startswith(".") for x in f.relative_to(root).parts)
    )
    if next(data, None) is None:
        raise DataError(
            f"holds no data files ({', '.join(HUB_DATA_SUFFIXES)}); a local copy is laid out like the hub "
            "repo: README.md + data/<name>/*.parquet"
        )
    configs = _readme_configs(root / "README.md")
    if configs is None:
        if cfg.hf_name not in (None, "default"):
            raise DataError(
                f"data.hf_name = {cfg.hf_name!r}, but its README.md has no `configs:` header, so the copy's "
                "only config is 'default'; set data.hf_name: null (or add the hub repo's README.md)"
            )
        return
    names = [str(c.get("config_name")) for c in configs]
    if cfg.hf_name is None:
        return  # datasets picks the copy's default config
    if cfg.hf_name not in names:
        raise DataError(
            f"data.hf_name = {cfg.hf_name!r} is not a config of this copy (its README.md lists {names}); "
            "set data.hf_name to the subset you downloaded"
        )
    files = next(c for c in configs if str(c.get("config_name")) == cfg.hf_name).get("data_files")
    if isinstance(files, list) and files and all(isinstance(d, dict) and "split" in d for d in files):
        splits = [str(d["split"]) for d in files]
        if cfg.hf_split not in splits:
            raise DataError(
                f"data.hf_split = {cfg.hf_split!r} is not a split of config {cfg.hf_name!r} (its README.md "
                f"lists {splits}); set data.hf_split to one of them"
            )


def _readme_configs(readme: Path) -> list[dict[str, Any]] | None:
    """The `configs:` list of a hub README's YAML header, or None (no README, no header, no list)."""
    try:
        text = readme.read_text(encoding="utf-8")
    except OSError:
        return None
    if not text.startswith("---"):
        return None
    import yaml

    try:
        header = yaml.safe_load(text.split("---", 2)[1])
    except (yaml.YAMLError, IndexError):
        return None
    configs = header.get("configs") if isinstance(header, dict) else None
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        return None
    return configs


def file_shard(
    n_files: int, world_size: int, rank: int, epoch: int, seed: int, shuffle: bool
) -> tuple[list[int], bool]:
    """This rank's file indices for an epoch, in reading order, and whether sharding is by file.

    By-file when n_files % world_size == 0 (balanced whole files); else all files, split by document.
    """
    order = list(range(n_files))
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    if n_files % world_size == 0:
        return order[rank::world_size], True
    return order, False


def _iter_file(path: str, field: str, start: int, keep: Any) -> Iterator[tuple[int, str]]:
    """Yield (doc index in file, text) from `start`; `keep(i)` says whether to parse document i."""
    suffix = _suffix(path)
    if suffix in (".txt", ".txt.gz"):
        if start == 0 and keep(0):
            opener = gzip.open if suffix.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                yield 0, f.read()
        return
    if suffix == ".parquet":
        yield from _iter_parquet(path, field, start, keep)
        return
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(path, "rb") as f:
        i = 0
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if i >= start and keep(i):
                try:
                    # Invalid UTF-8 bytes become U+FFFD, as in .txt files (json.loads of the raw bytes
                    # refused the line and stopped the run there); -sig drops a leading BOM.
                    row = json.loads(line.decode("utf-8-sig", errors="replace"))
                except ValueError as e:
                    raise DataError(f"{path}:{lineno}: not valid JSON ({e}); fix or remove the line") from e
                yield i, _text_of(row, field, f"{path}:{lineno}")
            i += 1


def _text_of(row: Any, field: str, where: str) -> str:
    if not isinstance(row, dict) or field not in row:
        keys = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise DataError(
            f"{where}: no text field {field!r} (found {keys}); set data.text_field to the field holding the text"
        )
    text = row[field]
    if text is None:  # no text: an empty document, skipped (the hub source skips nulls too)
        return ""
    if not isinstance(text, str):
        raise DataError(
            f"{where}: field {field!r} is {type(text).__name__}, not text; set data.text_field to a string field"
        )
    return text


def _iter_parquet(path: str, field: str, start: int, keep: Any) -> Iterator[tuple[int, str]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise
        raise DataError(f"{path}: cannot read as parquet ({e}); fix or remove the file") from e
    names = pf.schema_arrow.names
    if field not in names:
        raise DataError(
            f"{path}: no text column {field!r} (columns: {names}); set data.text_field to the text column"
        )
    base = 0
    for rg in range(pf.num_row_groups):
        n = pf.metadata.row_group(rg).num_rows
        # Whole row groups before the resume point are skipped from metadata, never read.
        if base + n > start and any(keep(i) for i in range(max(base, start), base + n)):
            col = pf.read_row_group(rg, columns=[field]).column(0).to_pylist()
            for j, text in enumerate(col):
                i = base + j
                if i >= start and keep(i):
                    if text is None:  # a null row: an empty document, skipped as _text_of's null
                        text = ""
                    if not isinstance(text, str):
                        raise DataError(
                            f"{path}: row {i} of column {field!r} is {type(text).__name__}, not text"
                        )
                    yield i, text
        base += n


class FilesSource:
    """Local jsonl / jsonl.gz / parquet / txt files. Cursor: [file slot, doc index in file, running index]."""

    def __init__(
        self,
        files: list[str],
        text_field: str,
        *,
        rank: int,
        world_size: int,
        seed: int,
        shuffle: bool,
        label: str,
    ) -> None:
        self.files = files
        self.text_field = text_field
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.label = label

    def by_file(self) -> bool:
        return len(self.files) % self.world_size == 0

    def describe(self) -> str:
        how = "whole files per rank" if self.by_file() else "documents split across ranks within files"
        return (
            f"{self.label}: {len(self.files)} file(s) e.g. {self.files[0]}, field {self.text_field!r}; "
            f"rank {self.rank}/{self.world_size}: {how}"
        )

    def iter_epoch(self, epoch: int, start: Cursor | None) -> Iterator[tuple[Cursor, str]]:
        slots, by_file = file_shard(
            len(self.files), self.world_size, self.rank, epoch, self.seed, self.shuffle
        )
        slot0, doc0, run0 = start if start is not None else (0, 0, 0)
        running = run0  # running document index over the epoch (only used when splitting documents)
        for slot in range(slot0, len(slots)):
            path = self.files[slots[slot]]
            first = doc0 if slot == slot0 else 0
            try:
                if by_file:
                    for i, text in _iter_file(path, self.text_field, first, lambda i: True):
                        yield [slot, i, 0], text
                    continue
                # Every rank walks the same files; which documents it keeps follows from the running index.
                base = running - first
                for i, text in _iter_file(
                    path,
                    self.text_field,
                    first,
                    lambda i, base=base: (base + i) % self.world_size == self.rank,
                ):
                    yield [slot, i, base + i], text
                running = base + _count_docs(path, self.text_field)
            except Exception as e:
                # The loader's error names this file: a truncated .gz (EOFError) or a file that is not
                # gzip (BadGzipFile) says nothing of which file of the corpus it was.
                if not isinstance(e, DataError):
                    e.data_file = path  # type: ignore[attr-defined]
                raise


_COUNTS: dict[str, int] = {}


def _count_docs(path: str, field: str) -> int:
    """Documents in a file (cached); needed to carry the running index across files."""
    if path not in _COUNTS:
        suffix = _suffix(path)
        if suffix.startswith(".txt"):
            n = 1
        elif suffix == ".parquet":
            import pyarrow.parquet as pq

            n = pq.ParquetFile(path).metadata.num_rows
        else:
            opener = gzip.open if suffix.endswith(".gz") else open
            with opener(path, "rb") as f:
                n = sum(1 for line in f if line.strip())
        _COUNTS[path] = n
    return _COUNTS[path]


class SyntheticSource:
    """Arithmetic number sequences ("17 24 31 38 ..."): after two numbers the rest is predictable,
    so a model can drive its loss well down. Infinite; cursor = global document index."""

    label = "synthetic"

    def __init__(self, *, rank: int, world_size: int, seed: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.seed = seed

    def describe(self) -> str:
        return f"synthetic: arithmetic sequences, seed {self.seed}; rank {self.rank}/{self.world_size} takes doc i if i % W == rank"

    @staticmethod
    def document(seed: int, index: int) -> str:
        r = random.Random(seed * 1_000_003 + index)
        a, d, n = r.randrange(1000), r.randrange(1, 13), r.randrange(16, 160)
        return " ".join(str(a + d * k) for k in range(n))

    def iter_epoch(self, epoch: int, start: Cursor | None) -> Iterator[tuple[Cursor, str]]:
        i = self.rank if start is None else int(start)
        while True:
            yield i, self.document(self.seed, i)
            i += self.world_size


def sample_files() -> list[str]:
    files = sorted(str(p) for p in SAMPLE_DIR.glob("*.jsonl.gz"))
    if not files:
        raise DataError(
            f"the bundled sample corpus is missing from {SAMPLE_DIR}; reinstall nsa-launch or "
            "regenerate it with `python -m nsa.data.make_sample`"
        )
    return files


def build_source(cfg: DataConfig, *, rank: int, world_size: int, seed: int) -> Any:
    """The source `cfg.source` names, sharded for this rank. Opening the hub happens lazily in hub.py."""
    if cfg.source == "synthetic":
        return SyntheticSource(rank=rank, world_size=world_size, seed=seed)
    if cfg.source == "sample":
        return FilesSource(
            sample_files(),
            "text",
            rank=rank,
            world_size=world_size,
            seed=seed,
            shuffle=cfg.shuffle_files,
            label="sample (bundled CPython docs)",
        )
    if cfg.source == "files":
        return FilesSource(
            resolve_paths(cfg.paths),
            cfg.text_field,
            rank=rank,
            world_size=world_size,
            seed=seed,
            shuffle=cfg.shuffle_files,
            label="files",
        )
    from nsa.data.hub import HubSource

    return HubSource(cfg, rank=rank, world_size=world_size, seed=seed)
