"""Regenerate the bundled `sample` corpus (nsa/data/sample/*.jsonl.gz) from CPython's own documentation.

This script owns how the sample corpus is built; it must not be imported by the loader (the shipped
files are the corpus, so training never depends on the local Python's version). Sources, both under
the PSF licence: `pydoc_data.topics` (the language reference topics behind `help()`) and the
docstrings of a fixed list of standard-library modules. Text is cut at paragraph boundaries into
documents of at most ~3 KB, each with a stable id, and dealt round-robin into 8 shards so that world
sizes 1, 2, 4, 8 shard by file and 3 exercises document-level sharding.

    python -m nsa.data.make_sample            # rewrites nsa/data/sample/
    python -m nsa.data.make_sample --check    # prints counts, writes nothing
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import inspect
import json
import sys
import warnings
from pathlib import Path

SAMPLE_DIR = Path(__file__).with_name("sample")
N_SHARDS = 8
MAX_DOC_CHARS = 3000
# Modules whose docstrings are long, English and stable; order fixes the corpus order.
_MODULE_NAMES = """
abc argparse ast asyncio base64 bisect calendar collections contextlib copy csv dataclasses
datetime decimal difflib email enum fractions functools glob gzip hashlib heapq hmac html
http.client http.server inspect io ipaddress itertools json logging math mimetypes
multiprocessing numbers operator optparse os pathlib pickle pprint queue random re shlex shutil
smtplib socket sqlite3 statistics string struct subprocess tarfile tempfile textwrap threading
time timeit tokenize traceback typing unittest urllib.parse urllib.request uuid warnings
weakref xml.dom zipfile zlib collections.abc concurrent.futures configparser doctest
email.message email.utils fileinput fnmatch ftplib getopt gettext graphlib imaplib
importlib.metadata locale lzma mailbox netrc pdb platform plistlib poplib pstats pydoc
selectors shelve socketserver ssl sysconfig tomllib trace tracemalloc types venv wave
wsgiref.handlers xml.etree.ElementTree xmlrpc.client zipapp zoneinfo codecs cmd code codeop
colorsys compileall dis filecmp secrets sched profile tkinter turtle
"""
MODULES = _MODULE_NAMES.split()


def _chunks(text: str) -> list[str]:
    """Cut at blank lines into pieces of at most MAX_DOC_CHARS (a longer paragraph stays whole)."""
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for para in text.split("\n\n"):
        if cur and size + len(para) > MAX_DOC_CHARS:
            out.append("\n\n".join(cur))
            cur, size = [], 0
        cur.append(para)
        size += len(para) + 2
    if cur:
        out.append("\n\n".join(cur))
    return [c.strip() for c in out if c.strip()]


def _module_text(name: str) -> str:
    mod = importlib.import_module(name)
    parts = [inspect.getdoc(mod) or ""]
    for attr in sorted(vars(mod)):
        if attr.startswith("_"):
            continue
        obj = getattr(mod, attr)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and getattr(obj, "__module__", "") == name:
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 80:
                parts.append(f"{name}.{attr}\n\n{doc}")
            if inspect.isclass(obj):
                for meth in sorted(vars(obj)):
                    fn = vars(obj)[meth]
                    mdoc = fn.__doc__ if inspect.isfunction(fn) and not meth.startswith("_") else None
                    if mdoc and len(mdoc) > 80:
                        parts.append(f"{name}.{attr}.{meth}\n\n{inspect.cleandoc(mdoc)}")
    return "\n\n".join(p for p in parts if p)


def build_documents() -> list[dict[str, str]]:
    import pydoc_data.topics as topics

    # Touching deprecated aliases (typing.io, ...) while reading docstrings warns; the text is fine.
    warnings.simplefilter("ignore")
    docs: list[dict[str, str]] = []
    for key in sorted(topics.topics):
        for i, chunk in enumerate(_chunks(topics.topics[key])):
            docs.append({"id": f"topics/{key}/{i}", "text": chunk})
    for name in MODULES:
        for i, chunk in enumerate(_chunks(_module_text(name))):
            docs.append({"id": f"stdlib/{name}/{i}", "text": chunk})
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print counts only")
    args = parser.parse_args(argv)
    docs = build_documents()
    chars = sum(len(d["text"]) for d in docs)
    print(f"python {sys.version.split()[0]}: {len(docs)} documents, {chars} characters", file=sys.stderr)
    if args.check:
        return 0
    SAMPLE_DIR.mkdir(exist_ok=True)
    for old in SAMPLE_DIR.glob("*.jsonl.gz"):
        old.unlink()
    for shard in range(N_SHARDS):
        rows = docs[shard::N_SHARDS]
        # mtime=0 keeps the gzip bytes reproducible run to run.
        with (
            open(SAMPLE_DIR / f"shard-{shard:02d}.jsonl.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        ):
            for row in rows:
                gz.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
