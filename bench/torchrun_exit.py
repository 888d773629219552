"""How often a finished 2-rank gloo run still ends in a crash at process exit (CPU; reliability).

    .venv/bin/python bench/torchrun_exit.py [--runs 100] [--plain-exit]

Runs tests/assets/grad_probe.py (tiny model, FSDP2 + activation checkpointing + accumulation 2)
under the real torchrun, 2 ranks, gloo, `--runs` times one after another, and counts the runs whose
torchrun exit code was not 0. By default the probe ends as nsa-train does
(`nsa.train.dist.exit_process`); `--plain-exit` lets Python tear the interpreter down as usual,
which is what let "terminate called without an active exception" (SIGABRT) fail finished runs.
Prints one JSON row; the first lines of each failure's output go to stderr. Re-run after a torch
upgrade: if `--plain-exit` stops failing, torch has fixed the teardown.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.assets.trainrun import clean_env, torchrun_cmd  # noqa: E402

PROBE = ROOT / "tests" / "assets" / "grad_probe.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--plain-exit", action="store_true", help="end the probe without exit_process")
    args = ap.parse_args()
    env = clean_env(PYTHONFAULTHANDLER="1")  # the e2e tests' environment, plus stacks on a crash
    failures, codes = 0, {}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        cmd = [*torchrun_cmd(2), str(PROBE), str(Path(d) / "grads.pt"), "--ac", "--fsdp", "--accum", "2"]
        if args.plain_exit:
            cmd.append("--plain-exit")
        for i in range(args.runs):
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                failures += 1
                codes[p.returncode] = codes.get(p.returncode, 0) + 1
                head = "\n".join(p.stderr.splitlines()[:4])
                print(f"run {i}: exit {p.returncode}\n{head}", file=sys.stderr, flush=True)
    print(json.dumps({
        "bench": "torchrun_exit", "exit": "plain" if args.plain_exit else "exit_process",
        "runs": args.runs, "failed": failures, "exit_codes": codes,
        "wall_s": round(time.time() - t0, 1), "target": "0 failed",
    }))  # fmt: skip


if __name__ == "__main__":
    main()
