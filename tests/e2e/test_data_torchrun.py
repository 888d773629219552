"""Two real torchrun processes (gloo, CPU) read one local corpus at batch_size=1: both ranks get full
[1, T] batches, their documents are disjoint, and a loader rebuilt from a saved state continues
without repeating a document. The corpus has a single file, fewer files than ranks, so documents
are split within it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKER = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    from nsa.data import DataConfig, build_loader

    corpus, out_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = DataConfig(source="files", paths=[corpus], val_fraction=0.2, prefetch=3)
    kw = dict(seq_len=32, batch_size=1, rank=rank, world_size=world)

    def stream(batches):
        toks = [int(batches[0][0][0, 0])]
        for _, y in batches:
            toks += y.flatten().tolist()
        return toks

    with build_loader(cfg, **kw) as a:
        before = [a.next_batch() for _ in range(25)]
        torch.save(a.state_dict(), f"{out_dir}/state{rank}.pt")
        reference = [a.next_batch() for _ in range(25)]
    dist.barrier()
    with build_loader(cfg, **kw) as b:  # a "restarted" run: fresh loader, state from disk
        b.load_state_dict(torch.load(f"{out_dir}/state{rank}.pt", weights_only=True))
        after = [b.next_batch() for _ in range(25)]
        epoch = b.stats()["epoch"]
    with build_loader(cfg, split="val", **kw) as v:
        val = [v.next_batch() for _ in range(5)]

    shapes = {tuple(x.shape) for x, _ in before + after + val} | {tuple(y.shape) for _, y in before + after + val}
    # Every rank must produce the same number of batches or a collective would hang: check with one.
    n = torch.tensor([len(before) + len(after)])
    dist.all_reduce(n)
    gathered = [None] * world
    dist.all_gather_object(gathered, stream(before + after))
    result = {
        "rank": rank,
        "shapes": sorted(shapes),
        "total_batches": int(n),
        "resume_equal": all(torch.equal(r[0], g[0]) and torch.equal(r[1], g[1]) for r, g in zip(reference, after)),
        "epoch": epoch,
        "streams": gathered,
        "val_stream": stream(val),
    }
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    """
)


def _ids(tokens: list[int]) -> list[int]:
    text = bytes(t if t < 256 else 10 for t in tokens).decode("utf-8", "replace")
    return [int(line[5:].split(">")[0]) for line in text.split("\n") if line.startswith("<doc ")]


def test_two_ranks_get_full_disjoint_batches_and_resume_without_repeats(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as f:
        for i in range(200):
            f.write(
                json.dumps({"id": i, "text": f"<doc {i}> " + " ".join(f"w{i}.{k}" for k in range(i % 9 + 3))})
                + "\n"
            )
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [str(torchrun), "--nproc_per_node", "2", "--standalone", str(script), str(corpus), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    for r in results:
        assert r["shapes"] == [[1, 32]]  # batch_size=1 gives [1, T], never an empty or 1-D tensor
        assert r["total_batches"] == 100
        assert r["resume_equal"] is True
        assert r["epoch"] == 0  # still inside the first pass, so any repeated id would be a bug
    streams = results[0]["streams"]
    assert streams == results[1]["streams"]  # all_gather_object agrees on both ranks
    ids = [_ids(s) for s in streams]
    for rank_ids in ids:
        assert len(rank_ids) >= 5 and len(rank_ids) == len(set(rank_ids)), rank_ids  # resume: no repeats
    assert not set(ids[0]) & set(ids[1])  # ranks read disjoint documents
    val_ids = [i for r in results for i in _ids(r["val_stream"])]
    assert val_ids and not set(val_ids) & (set(ids[0]) | set(ids[1]))
