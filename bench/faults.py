"""The fault matrix of issue 13: faults injected against the real trainer, torchrun, tmux and the
launcher (local transport) on this machine, repeated, each counted as survived or not (CPU).

    .venv/bin/python bench/faults.py [--kill 20] [--kill9-save 20] [--corrupt 1] [--disk-full 2] [--sigkill 4]

Prints one JSON object: for each fault, `trials`, `survived` and what was measured.
- kill: `up`, wait for step >= 2, `kill`: survived when no process of the run is left, the trainer
  checkpointed at the last step it completed, and `restart` resumed at that step (steps_lost: steps
  completed before the kill minus the resumed step; then killed again, again with nothing left).
- kill9_save: a 2-rank torchrun run with save_every=2; every process SIGKILLed while a rank's
  heartbeat says `checkpoint`; survived when --resume then starts from an intact checkpoint and
  finishes.
- corrupt: the six damage cases of tests/e2e/test_train_checkpoints.py per round; survived when
  the resume fell back to the newest intact checkpoint, named the bad file and deleted no intact one.
- disk_full: a 20 MB tmpfs mounted over runs/ (root only); survived when status says
  `disk full: <path> (... MB free ...)`, the exit code is recorded, no exit_code.tmp is left, and a
  restart on the still-full disk names the same cause.
- sigkill: NSA_FAULT=kill:step=3:rank=1; survived when status is `failed` with rank, SIGKILL and
  "likely out of memory", and `status` / `status --all` render the real gloo text (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.host import procs  # noqa: E402
from nsa.runfiles import RunDir, read_json  # noqa: E402
from tests.assets.trainrun import TINY, clean_env, train_cmd  # noqa: E402
from tests.fixtures.tmux import private_tmux_server  # noqa: E402

QUICK = ["--set", "train.seq_len=64", "--set", "telemetry.tensorboard=false", "--set", "train.log_every=1"]


def _invoke(*args: str):
    from click.testing import CliRunner

    from launcher.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _status(run: str) -> dict:
    return json.loads(_invoke("status", "--run", run, "--json").stdout)[0]


def _wait(pred, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.3)
    return None


def _cleanup(run: str) -> None:
    _invoke("kill", "--run", run)
    shutil.rmtree(ROOT / "runs" / run, ignore_errors=True)


def fault_kill(trials: int) -> dict:
    survived, lost, notes = 0, [], []
    for i in range(trials):
        run = f"bench-kill-{os.getpid()}-{i}"
        try:
            res = _invoke(
                "up", "--name", run, *QUICK, "--set", "train.steps=100000", "--set", "train.save_every=0"
            )
            if res.exit_code != 0:
                notes.append(f"{i}: up {res.exit_code}")
                continue
            rd = RunDir(ROOT / "runs" / run)
            _wait(lambda run=run: _status(run)["step"] >= 2, 120)
            ok = "verified none is left" in _invoke("kill", "--run", run).output
            ok = ok and not {p for p in procs.tagged(str(rd.root)) if procs.alive(p)}
            reached = max((json.loads(x)["step"] for x in rd.metrics.read_text().splitlines()), default=0)
            ck = rd.newest_intact_checkpoint()
            saved = read_json(ck / "meta.json")["step"] if ck else None
            res = _invoke("restart", "--run", run)
            resumed = next(
                (
                    json.loads(x)["step"]
                    for x in reversed(rd.events.read_text().splitlines())
                    if '"resumed"' in x
                ),
                None,
            )
            ok = ok and res.exit_code == 0 and saved == reached and resumed == saved
            ok = ok and "verified none is left" in _invoke("kill", "--run", run).output
            ok = ok and not {p for p in procs.tagged(str(rd.root)) if procs.alive(p)}
            if resumed is not None:
                lost.append(reached - resumed)
            survived += ok
            if not ok:
                notes.append(
                    f"{i}: reached {reached} saved {saved} resumed {resumed} restart {res.exit_code}"
                )
        finally:
            _cleanup(run)
    return {"trials": trials, "survived": survived, "steps_lost": lost, "notes": notes}


def fault_kill9_save(trials: int) -> dict:
    survived, notes, mid_save = 0, [], 0
    for i in range(trials):
        with tempfile.TemporaryDirectory() as d:
            run = Path(d) / "run"
            tag = f"bench-kill9-{os.getpid()}-{i}"
            sets = [
                *QUICK,
                "--set",
                "train.steps=100000",
                "--set",
                "train.save_every=2",
                "--set",
                "train.keep_last=2",
            ]
            cmd = [*train_cmd(2), "--config", str(TINY), "--run-dir", str(run), *sets]
            p = subprocess.Popen(
                cmd,
                env=clean_env(NSA_LAUNCH_RUN_DIR=tag),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            rd = RunDir(run)

            def saving(rd: RunDir = rd) -> bool:
                hbs = rd.heartbeats()
                return any(h.phase == "checkpoint" and h.step >= 4 for h in hbs.values())

            hit = _wait(saving, 120)
            mid_save += bool(hit)
            for pid in procs.tagged(tag):
                os.kill(pid, signal.SIGKILL)
            p.wait(timeout=60)
            ck = rd.newest_intact_checkpoint()
            want = read_json(ck / "meta.json")["step"] if ck else None
            r = subprocess.run(
                [*train_cmd(2), "--config", str(TINY), "--run-dir", str(run), *QUICK,
                 "--set", f"train.steps={(want or 0) + 2}", "--set", "train.save_every=2", "--resume"],
                env=clean_env(), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            resumed = next(
                (
                    json.loads(x)["step"]
                    for x in reversed(rd.events.read_text().splitlines())
                    if '"resumed"' in x
                ),
                None,
            )
            ok = bool(hit) and want is not None and r.returncode == 0 and resumed == want
            survived += ok
            if not ok:
                notes.append(f"{i}: mid-save {bool(hit)} intact {want} resumed {resumed} rc {r.returncode}")
    return {"trials": trials, "survived": survived, "killed_mid_save": mid_save, "notes": notes}


def fault_corrupt(rounds: int) -> dict:
    env = clean_env()
    trials = survived = 0
    for _ in range(rounds):
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/e2e/test_train_checkpoints.py", "-k", "falls_back", "-rA"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        trials += res.stdout.count("PASSED ") + res.stdout.count("FAILED ")
        survived += res.stdout.count("PASSED ")
    return {"trials": trials, "survived": survived}


def fault_disk_full(trials: int) -> dict:
    runs = ROOT / "runs"
    if os.geteuid() != 0:
        return {"trials": 0, "survived": 0, "notes": ["needs root to mount a tmpfs"]}
    survived, notes, causes = 0, [], []
    existed = runs.exists()
    for i in range(trials):
        runs.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(runs)], check=True)
        run = f"bench-disk-{os.getpid()}-{i}"
        try:
            _invoke("up", "--name", run, *QUICK, "--set", "train.steps=100000", "--set", "train.save_every=1",
                    "--set", "train.keep_last=1000")  # fmt: skip
            st = _wait(lambda run=run: (s := _status(run))["state"] == "failed" and s, 240) or {}
            rd = RunDir(runs / run)
            err = st.get("error") or ""
            causes.append(err)
            res = _invoke("restart", "--run", run)
            ok = (
                err.startswith("disk full: ") and " MB free of " in err and isinstance(rd.exit_code(), int)
                and not (rd.root / "exit_code.tmp").exists() and res.exit_code == 1 and "disk full" in res.output
            )  # fmt: skip
            survived += ok
            if not ok:
                notes.append(f"{i}: {err!r} restart {res.exit_code}")
        finally:
            _invoke("kill", "--run", run)
            subprocess.run(["umount", "-l", str(runs)])
    if not existed:
        shutil.rmtree(runs, ignore_errors=True)
    return {"trials": trials, "survived": survived, "causes": causes[:1], "notes": notes}


def fault_sigkill(trials: int) -> dict:
    survived, notes, causes = 0, [], []
    os.environ["COLUMNS"] = "1000"
    for i in range(trials):
        run = f"bench-sigkill-{os.getpid()}-{i}"
        try:
            _invoke(
                "up",
                "--name",
                run,
                *QUICK,
                "--set",
                "train.steps=50",
                "--env",
                "NSA_FAULT=kill:step=3:rank=1",
                "--wait",
            )
            st = _status(run)
            err = st.get("error") or ""
            causes.append(err)
            try:
                one, every = _invoke("status", "--run", run), _invoke("status", "--all")
                # --all exits 1 for the earlier trials' runs, whose run dirs are gone (`lost`)
                rendered = one.exit_code == 0 and "SIGKILL" in one.output and "SIGKILL" in every.output
            except Exception as e:  # a markup crash in the table
                rendered, notes = False, [*notes, f"{i}: status raised {e!r}"]
            ok = (
                st["state"] == "failed" and err.startswith("rank 1 on ") and "SIGKILL" in err
                and "likely out of memory" in err and rendered
            )  # fmt: skip
            survived += ok
            if not ok:
                notes.append(f"{i}: {st['state']} {err!r}")
        finally:
            _cleanup(run)
    return {"trials": trials, "survived": survived, "causes": causes[:1], "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kill", type=int, default=20)
    ap.add_argument("--kill9-save", type=int, default=20)
    ap.add_argument("--corrupt", type=int, default=1, help="rounds of the six damage cases")
    ap.add_argument("--disk-full", type=int, default=2)
    ap.add_argument("--sigkill", type=int, default=4)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="nsa-bench-faults-")
    os.environ["NSA_LAUNCH_HOME"] = home
    os.environ.pop("NSA_LAUNCH_HOST", None)
    out: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": os.uname().nodename}
    t0 = time.time()
    with private_tmux_server() as server:
        os.environ["NSA_LAUNCH_TMUX_SOCKET"] = server.socket_name
        for name, n in (("corrupt", args.corrupt), ("sigkill", args.sigkill), ("disk_full", args.disk_full),
                        ("kill9_save", args.kill9_save), ("kill", args.kill)):  # fmt: skip
            if n:
                t = time.time()
                out[name] = globals()[f"fault_{name}"](n)
                out[name]["seconds"] = round(time.time() - t, 1)
                print(json.dumps({name: out[name]}), file=sys.stderr, flush=True)
    out["wall_s"] = round(time.time() - t0, 1)
    shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
