"""How long a SIGTERM save of the M7C model takes: the number the kill grace must cover (CPU).

    .venv/bin/python bench/ckpt_save.py [--config configs/m7c_125m.yaml] [--repeat 2] [--no-fsync-too]

Builds the config's model in fp32 on the CPU with a real AdamW state (one step on zero gradients,
so both moments exist), then times `nsa.train.ckpt.save` (full state dicts, torch.save of model.pt
and optim.pt, rank0.pt, the sha256 manifest, fsyncs, rename, prune) into a temp run dir on the disk
holding the checkout, and `verify_checkpoint` (what resume and the mirror run). With --no-fsync-too
each save is followed by one with os.fsync made a no-op, alternating, so `fsync_cost_s` is the
durability's price on this disk (the median difference). Prints one JSON row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from nsa.model import Transformer  # noqa: E402
from nsa.runfiles import RunDir, verify_checkpoint  # noqa: E402
from nsa.train import ckpt  # noqa: E402
from nsa.train.config import load_config  # noqa: E402
from nsa.train.dist import DistInfo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "m7c_125m.yaml"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-fsync-too", action="store_true", help="also time saves with fsync off")
    args = ap.parse_args()
    cfg = load_config(args.config)
    model = Transformer(cfg.model, cfg.resolved_vocab_size())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    info = DistInfo(0, 0, 1, torch.device("cpu"), None)
    saves, nosync, verifies, size = [], [], [], 0
    real_fsync = os.fsync
    step = 0
    with tempfile.TemporaryDirectory(dir=ROOT) as d:
        rd = RunDir(d)
        for _ in range(args.repeat):
            for durable in (True, False) if args.no_fsync_too else (True,):
                os.fsync = real_fsync if durable else (lambda fd: None)
                step += 1
                try:
                    t0 = time.perf_counter()
                    path = ckpt.save(
                        rd, info, step, model, opt, {"tokens": 0, "world_size": 1}, {"loader": {}}, 2
                    )
                    (saves if durable else nosync).append(round(time.perf_counter() - t0, 2))
                finally:
                    os.fsync = real_fsync
                if durable:
                    t0 = time.perf_counter()
                    assert verify_checkpoint(path) is None
                    verifies.append(round(time.perf_counter() - t0, 2))
                size = sum(f.stat().st_size for f in path.iterdir())
    row = {
        "config": Path(args.config).name, "params": model.num_params(), "checkpoint_mb": round(size / 2**20, 1),
        "save_s": saves, "verify_s": verifies, "threads": torch.get_num_threads(),
    }  # fmt: skip
    if nosync:
        row["save_s_no_fsync"] = nosync
        row["fsync_cost_s"] = round(statistics.median(a - b for a, b in zip(saves, nosync)), 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
