"""Data pipeline benchmarks: tokenize+pack throughput, first-batch latency, prefetch hiding.

Owns the data speed targets (byte tokenizer + packing >= 50 MB/s in one process; first batch from
local parquet <= 2 s after the loader is created; fetch wait < 1 % of step time with prefetch). It
prints one JSON row per measurement to stdout and must not assert: numbers go to bench/RESULTS.md.

    .venv/bin/python bench/data.py                 # all rows
    .venv/bin/python bench/data.py --only pack     # pack | loader | first_batch | prefetch
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEQ_LEN, BATCH = 1024, 8


def _sample_texts() -> list[str]:
    from nsa.data.sources import sample_files

    texts = []
    for path in sample_files():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts.extend(json.loads(line)["text"] for line in f)
    return texts


def bench_pack(target_mb: float = 64.0) -> dict:
    """Byte tokenize + pack in the calling thread: the pure CPU cost per MB of text."""
    from nsa.data.packing import Packer
    from nsa.data.tokenizers import ByteTokenizer

    texts = _sample_texts()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    reps = max(1, int(target_mb / mb))
    docs = ((i, t) for _ in range(reps) for i, t in enumerate(texts))
    tok = ByteTokenizer()
    packer = Packer(docs, tok.encode, tok.eod, SEQ_LEN, BATCH)
    t0 = time.perf_counter()
    n = 0
    while True:
        try:
            packer.next_batch()
        except StopIteration:
            break
        n += 1
    dt = time.perf_counter() - t0
    return {
        "bench": "data/tokenize_pack",
        "tokenizer": "byte",
        "seq_len": SEQ_LEN,
        "batch": BATCH,
        "mb_text": round(mb * reps, 1),
        "batches": n,
        "seconds": round(dt, 3),
        "mb_per_s": round(mb * reps / dt, 1),
    }


def bench_loader(batches: int = 600) -> dict:
    """The whole loader on the bundled sample (file reads, split hash, thread, queue), consumer idle."""
    from nsa.data import DataConfig, build_loader

    with build_loader(DataConfig(), seq_len=SEQ_LEN, batch_size=BATCH, rank=0, world_size=1) as ld:
        ld.next_batch()
        t0 = time.perf_counter()
        for _ in range(batches):
            ld.next_batch()
        dt = time.perf_counter() - t0
    tokens = batches * SEQ_LEN * BATCH
    return {
        "bench": "data/loader_sample",
        "tokenizer": "byte",
        "seq_len": SEQ_LEN,
        "batch": BATCH,
        "batches": batches,
        "seconds": round(dt, 3),
        "tokens_per_s": round(tokens / dt),
        "mb_per_s": round(tokens / dt / 1e6, 1),
    }


def _write_parquet(root: Path, n_files: int = 2, docs: int = 12000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = _sample_texts()
    shard_dir = root / "data" / "CC-MAIN-2024-10"
    shard_dir.mkdir(parents=True)
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: CC-MAIN-2024-10\n  data_files:\n  - split: train\n"
        "    path: data/CC-MAIN-2024-10/*\n---\n"
    )
    k = 0
    for f in range(n_files):
        rows = []
        for _ in range(docs):
            rows.append({"text": texts[k % len(texts)], "id": f"<urn:uuid:{k}>", "score": 3.0})
            k += 1
        # Row groups of ~1000 documents, like the hub's shards.
        pq.write_table(pa.Table.from_pylist(rows), shard_dir / f"{f:03d}_00000.parquet", row_group_size=1000)


FIRST_BATCH = """
import json, sys, time
t0 = time.perf_counter()
from nsa.data import DataConfig, build_loader
kind, root = sys.argv[1], sys.argv[2]
if kind == "files":
    cfg = DataConfig(source="files", paths=[root + "/data/**/*.parquet"])
else:
    cfg = DataConfig(source="fineweb_edu", hf_path=root, hf_name="CC-MAIN-2024-10")
ld = build_loader(cfg, seq_len=1024, batch_size=8, rank=0, world_size=1)
t1 = time.perf_counter()
x, y = ld.next_batch()
t2 = time.perf_counter()
ld.close()
print(json.dumps({"import_and_build_s": round(t1 - t0, 3), "first_batch_s": round(t2 - t1, 3)}))
"""


def bench_first_batch() -> list[dict]:
    """Cold process each time: the latency a trainer sees between creating the loader and step 0."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "fineweb-edu"
        _write_parquet(root)
        size_mb = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 1e6
        for kind in ("files", "fineweb_edu"):
            env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(Path(tmp) / "hf-home"))
            out = subprocess.run(
                [sys.executable, "-c", FIRST_BATCH, kind, str(root)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            if out.returncode != 0:
                raise SystemExit(out.stderr)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(
                {
                    "bench": f"data/first_batch_{kind}_parquet",
                    "parquet_mb": round(size_mb, 1),
                    "seq_len": SEQ_LEN,
                    "batch": BATCH,
                    **row,
                }
            )
    return rows


def bench_prefetch(consumer: str, steps: int = 80, step_s: float = 0.05) -> dict:
    """Fraction of wall time a training loop waits for data while the loader prefetches.

    consumer "sleep": the step releases the GIL the whole time, as a GPU loop does while it waits on
    the device. consumer "cpu": the step runs 512x512 matmuls on the CPU in the calling thread (torch's
    own threads included), competing with the producer for the cores and the GIL, as the CPU training
    benchmark does.
    """
    import torch

    from nsa.data import DataConfig, build_loader

    a = torch.randn(512, 512)

    def step() -> None:
        t = time.perf_counter()
        if consumer == "sleep":
            time.sleep(step_s)
            return
        while time.perf_counter() - t < step_s:
            a @ a

    with build_loader(DataConfig(), seq_len=SEQ_LEN, batch_size=BATCH, rank=0, world_size=1) as ld:
        ld.next_batch()
        start_wait = ld.stats()["fetch_wait_s"]
        worst = 0.0
        t0 = time.perf_counter()
        for _ in range(steps):
            ld.next_batch()
            worst = max(worst, ld.stats()["last_fetch_wait_s"])
            step()
        wall = time.perf_counter() - t0
        wait = ld.stats()["fetch_wait_s"] - start_wait
    return {
        "bench": f"data/prefetch_wait_{consumer}",
        "steps": steps,
        "step_s": round(wall / steps, 4),
        "prefetch": DataConfig().prefetch,
        "fetch_wait_s": round(wait, 5),
        "worst_wait_s": round(worst, 5),
        "wait_fraction": round(wait / wall, 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="data pipeline benchmarks (JSON rows on stdout)")
    parser.add_argument("--only", choices=["pack", "loader", "first_batch", "prefetch"])
    args = parser.parse_args()
    rows: list[dict] = []
    if args.only in (None, "pack"):
        rows.append(bench_pack())
    if args.only in (None, "loader"):
        rows.append(bench_loader())
    if args.only in (None, "first_batch"):
        rows.extend(bench_first_batch())
    if args.only in (None, "prefetch"):
        rows.append(bench_prefetch("sleep"))
        rows.append(bench_prefetch("cpu"))
    for row in rows:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
