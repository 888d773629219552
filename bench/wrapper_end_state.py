"""How often a status poll calls a run "failed" while its wrapper starts and ends normally (CPU;
reliability).

    .venv/bin/python bench/wrapper_end_state.py [--runs 10] [--lang C.UTF-8]

Starts the real wrapper (launcher/host/start.py, in a tmux session on a private socket) `--runs`
times, each running a trainer stand-in that sleeps 0.5 s and exits 0, and polls the host agent's
run_status as fast as it can from the start until the exit code is there and the pane has ended.
Counts the runs in which some poll said "failed". The agent's locale is the one given (`--lang`;
default none: an SSH session that sets no LANG, as on the fake pods of tests/fixtures/fake_prime.py
or any host whose sshd passes no locale). Before the pane lookup stopped splitting tmux's -F output on tabs (which a client
without UTF-8 prints as "_"), the agent never saw the wrapper shell, only the tagged processes, and
most runs read "failed" for a moment: in the gaps between them at the start, and between torchrun's
exit and the wrapper's exit_code. Prints one JSON row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--lang", default=None, help="LANG for the agent and its tmux client (default: unset)")
    args = ap.parse_args()
    for k in ("LANG", "LC_ALL", "LC_CTYPE"):
        os.environ.pop(k, None)
    if args.lang:
        os.environ["LANG"] = args.lang
    from launcher.host import start, state, tmux

    sock = f"nsa-bench-{uuid.uuid4().hex[:8]}"
    polls, failed_runs, first_error = 0, 0, None
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="nsa-wrapper-end-") as d:
            for i in range(args.runs):
                rd = Path(d) / f"run{i}"
                req = {"run": f"bench{i}", "run_dir": str(rd), "workdir": d, "tmux_socket": sock, "node": 0,
                       "argv": [sys.executable, "-c", "import time; time.sleep(0.5)"], "env": {},
                       "manifest": {"run": f"bench{i}"}}  # fmt: skip
                reply = start.cmd_start(req)
                if not reply.get("ok"):
                    raise SystemExit(f"start failed: {reply}")
                seen_failed = False
                while not (rd / "exit_code").exists() or tmux.train_pane_pid(req, req["run"]) is not None:
                    st = state.run_status(req, time.time())
                    polls += 1
                    if st["state"] == "failed":
                        seen_failed = True
                        first_error = first_error or st["error"]
                failed_runs += seen_failed
    finally:
        tmux._tmux({"tmux_socket": sock}, "kill-server", check=False)
    print(json.dumps({
        "bench": "wrapper_end_state", "lang": args.lang, "runs": args.runs, "runs_seen_failed": failed_runs,
        "polls": polls, "first_error": first_error, "wall_s": round(time.time() - t0, 1), "target": "0 runs seen failed",
    }))  # fmt: skip


if __name__ == "__main__":
    main()
