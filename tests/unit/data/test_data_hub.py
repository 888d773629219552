"""The fineweb_edu source through the real `datasets` streaming code path, on local parquet shards
laid out like the hub repo, with HF_HUB_OFFLINE=1; and the hub itself failing fast and clearly.

Runs in a subprocess because `datasets` reads HF_HUB_OFFLINE once, at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.data.data_support import doc_text

README = """---
license: odc-by
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*/*
- config_name: CC-MAIN-2024-10
  data_files:
  - split: train
    path: data/CC-MAIN-2024-10/*
---
# a local copy laid out like HuggingFaceFW/fineweb-edu
"""

SCRIPT = textwrap.dedent(
    """
    import io, json, sys, time
    import torch
    sys.path.insert(0, sys.argv[2])
    from tests.unit.data.data_support import doc_ids, stream_of
    from nsa.data import DataConfig, DataError, build_loader

    root, out = sys.argv[1], {}
    cfg = DataConfig(source="fineweb_edu", hf_path=root, hf_name="CC-MAIN-2024-10", val_fraction=0.2)

    def ids(split, rank, world, n=40):
        with build_loader(cfg, seq_len=64, batch_size=1, rank=rank, world_size=world, split=split) as ld:
            t0 = time.monotonic()
            batches = [ld.next_batch()]
            out.setdefault("first_batch_s", []).append(time.monotonic() - t0)
            batches += [ld.next_batch() for _ in range(n - 1)]
            assert all(x.shape == (1, 64) for x, _ in batches)
            seen = []
            for i in doc_ids(stream_of(batches)):
                if i in seen:
                    break
                seen.append(i)
            return seen, ld.describe()

    for world in (2, 3, 8):
        out[f"train{world}"] = [ids("train", r, world) for r in range(world)]
    out["val1"] = ids("val", 0, 1, n=60)

    out["resume_equal"] = []
    for world in (2, 3, 8):  # every sharding mode: whole, uneven, examples
        with build_loader(cfg, seq_len=32, batch_size=2, rank=1, world_size=world) as a:
            for _ in range(5):
                a.next_batch()
            buf = io.BytesIO()
            torch.save(a.state_dict(), buf)  # the hub cursor must survive a checkpoint round trip
            buf.seek(0)
            sd = torch.load(buf, weights_only=True)
            want = [a.next_batch()[0].tolist() for _ in range(6)]
        with build_loader(cfg, seq_len=32, batch_size=2, rank=1, world_size=world) as b:
            b.load_state_dict(sd)
            out["resume_equal"].append(want == [b.next_batch()[0].tolist() for _ in range(6)])

    for name, kw in [("hub", {}), ("badname", {"hf_path": root, "hf_name": "CC-MAIN-1999-01"})]:
        t0 = time.monotonic()
        try:
            with build_loader(DataConfig(source="fineweb_edu", **kw), seq_len=8, batch_size=1,
                              rank=0, world_size=1) as ld:
                ld.next_batch()
            out[name] = ["no error", 0]
        except DataError as e:
            out[name] = [str(e), time.monotonic() - t0]
    print(json.dumps(out))
    """
)


def _hub_layout(root: Path) -> None:
    shard_dir = root / "data" / "CC-MAIN-2024-10"
    shard_dir.mkdir(parents=True)
    (root / "README.md").write_text(README)
    for f in range(4):
        rows = [
            {"text": doc_text(i), "id": f"<urn:uuid:{i}>", "score": 3.5} for i in range(f * 15, f * 15 + 15)
        ]
        pq.write_table(pa.Table.from_pylist(rows), shard_dir / f"{f:03d}_00000.parquet", row_group_size=5)


@pytest.mark.slow
def test_fineweb_edu_on_local_shards_offline_and_hub_fails_fast(tmp_path):
    _hub_layout(tmp_path / "fineweb-edu")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "fineweb-edu"), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    val = out["val1"][0]
    for world in ("2", "3", "8"):  # 4 shards: whole shards for 2 ranks, uneven for 3, examples for 8
        per_rank = [ids for ids, _ in out[f"train{world}"]]
        flat = [i for ids in per_rank for i in ids]
        assert all(per_rank) and len(flat) == len(set(flat)), per_rank
        assert not set(flat) & set(val)
        assert sorted(flat + val) == list(range(60))
    assert "whole shards per rank" in out["train2"][0][1]
    assert "uneven whole shards" in out["train3"][0][1]
    assert "examples split across ranks" in out["train8"][0][1]
    assert out["resume_equal"] == [True, True, True]
    assert max(out["first_batch_s"]) < 10

    msg, seconds = out["hub"]
    assert "HuggingFaceFW/fineweb-edu" in msg and "HF_HUB_OFFLINE=1" in msg and "data.hf_path" in msg
    assert seconds < 10  # fails fast instead of hanging on the network
    msg, _ = out["badname"]
    assert "CC-MAIN-1999-01" in msg and "data.hf_name" in msg


UNREACHABLE = textwrap.dedent(
    """
    import json, os, sys, time
    from nsa.data import DataConfig, DataError, build_loader

    cfg = DataConfig(source="fineweb_edu", first_batch_timeout_s=2)
    ld = build_loader(cfg, seq_len=8, batch_size=1, rank=0, world_size=1)
    t0 = time.monotonic()
    try:
        ld.next_batch()
        print(json.dumps(["no error", 0]))
    except DataError as e:
        print(json.dumps([str(e), time.monotonic() - t0]))
    sys.stdout.flush()
    os._exit(0)  # the hub client's own retry threads would keep the interpreter alive ~20 s more
    """
)


def test_unreachable_hub_times_out_naming_the_source(tmp_path):
    # A closed local port stands in for an unreachable hub: the hub client keeps retrying for ~25 s,
    # the first-batch timeout must end the wait long before that and say what it waited for.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    proc = subprocess.run(
        [sys.executable, "-c", UNREACHABLE], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    msg, seconds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        "gave no first batch" in msg and "HuggingFaceFW/fineweb-edu" in msg and "first_batch_timeout_s" in msg
    )
    assert 2 <= seconds < 5
