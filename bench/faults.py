"""The fault matrix of issue 13: faults injected against the real trainer, torchrun, tmux and the
launcher (local transport) on this machine, repeated, each counted as survived or not (CPU).

    .venv/bin/python bench/faults.py [--kill 20] [--kill9-save 20] [--corrupt 1] [--disk-full 2] [--sigkill 4]
        [--full-disk-kill 2] [--missing-required 2] [--stopped-rank 2] [--concurrent-restart 2]

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
- full_disk_kill (issue 21): a 64 MB tmpfs over runs/ (root only), a checkpoint at step 30, then the
  disk filled and `kill`; survived when kill exits 1 naming the newest saved step N = 30 and the
  lost steps N+1..M exactly (M: the last step a heartbeat recorded), status says "killed" with
  "final save failed: disk full", and `restart`, once space is freed, says it resumed at step N.
- missing_required: a real 1-rank checkpoint pair (steps 2, 4); step 4's optim.pt removed and its
  manifest rewritten without it; survived when --resume skips step 4 naming optim.pt and resumes at 2.
- stopped_rank: rank 1 SIGSTOPped; survived when status names it stopped (not out of memory) and
  `kill` (grace 120 s) ends within 30 s with the save at the step reached (nothing lost).
- concurrent_restart: two `nsa-launch restart` processes at once; survived when one resumes (exit
  0), the other exits 1 with "is being restarted by PID", no traceback, and one resume happened.
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


def _cli(*args: str, **kw) -> subprocess.Popen:
    """`nsa-launch ARGS` as its own process (the lock is per process; CliRunner shares ours)."""
    exe = Path(sys.executable).parent / "nsa-launch"
    return subprocess.Popen([str(exe), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)  # fmt: skip


def _last_hb_step(rd: RunDir) -> int:
    return max((h.step for h in rd.heartbeats().values()), default=0)


def fault_full_disk_kill(trials: int) -> dict:
    runs = ROOT / "runs"
    if os.geteuid() != 0:
        return {"trials": 0, "survived": 0, "notes": ["needs root to mount a tmpfs"]}
    survived, notes, lost, lines = 0, [], [], []
    existed = runs.exists()
    for i in range(trials):
        runs.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(runs)], check=True)
        run = f"bench-fdk-{os.getpid()}-{i}"
        filler = runs / "filler"
        try:
            _invoke(
                "up", "--name", run, *QUICK, "--set", "train.steps=100000", "--set", "train.save_every=30"
            )
            rd = RunDir(runs / run)
            if not _wait(
                lambda rd=rd: (rd.checkpoints_dir / "step-00000030" / "manifest.json").exists(), 240
            ):
                notes.append(f"{i}: no checkpoint at step 30")
                continue
            with open(filler, "wb") as f:  # fill the disk: the final save cannot fit
                try:
                    while True:
                        f.write(b"\0" * 2**20)
                        f.flush()
                except OSError:
                    pass
            res = _invoke("kill", "--run", run)
            m = _last_hb_step(rd)
            st = _status(run)
            want = f"the newest saved step is 30: steps 31..{m} are lost"
            ok = res.exit_code == 1 and want in " ".join(res.output.split()) and "disk full" in res.output
            ok = (
                ok
                and st["state"] == "killed"
                and (st.get("error") or "").startswith("final save failed: disk full")
            )
            lines.append(" ".join(res.output.split())[:300])
            filler.unlink()
            res2 = _invoke("restart", "--run", run)
            ok = ok and res2.exit_code == 0 and "resumed at step 30" in res2.output
            survived += ok
            lost.append(m - 30)
            if not ok:
                notes.append(f"{i}: kill {res.exit_code} {res.output[-300:]!r} status {st.get('error')!r} "
                             f"restart {res2.exit_code} {res2.output[-200:]!r}")  # fmt: skip
        finally:
            _invoke("kill", "--run", run)
            filler.unlink(missing_ok=True)
            subprocess.run(["umount", "-l", str(runs)])
    if not existed:
        shutil.rmtree(runs, ignore_errors=True)
    return {"trials": trials, "survived": survived, "steps_lost_reported": lost, "kill_output": lines[:1],
            "notes": notes}  # fmt: skip


def fault_missing_required(trials: int) -> dict:
    survived, notes = 0, []
    for i in range(trials):
        with tempfile.TemporaryDirectory() as d:
            run = Path(d) / "run"
            base = [
                *train_cmd(1),
                "--config",
                str(TINY),
                "--run-dir",
                str(run),
                *QUICK,
                "--set",
                "train.save_every=2",
            ]
            subprocess.run(
                [*base, "--set", "train.steps=4"], env=clean_env(), capture_output=True, timeout=300
            )
            ck = run / "checkpoints" / "step-00000004"
            man = json.loads((ck / "manifest.json").read_text())
            del man["files"]["optim.pt"]
            (ck / "manifest.json").write_text(json.dumps(man))
            (ck / "optim.pt").unlink()
            r = subprocess.run([*base, "--set", "train.steps=6", "--resume"], env=clean_env(), capture_output=True,
                               text=True, timeout=300)  # fmt: skip
            evs = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
            fb = [e for e in evs if e["kind"] == "checkpoint_fallback"]
            resumed = [e["step"] for e in evs if e["kind"] == "resumed"]
            ok = (
                r.returncode == 0
                and resumed == [2]
                and any(
                    e["detail"]["checkpoint"] == ck.name and "optim.pt" in e["detail"]["reason"] for e in fb
                )
            )
            survived += ok
            if not ok:
                notes.append(f"{i}: rc {r.returncode} resumed {resumed} fallback {fb} {r.stderr[-300:]!r}")
    return {"trials": trials, "survived": survived, "notes": notes}


def fault_stopped_rank(trials: int) -> dict:
    survived, notes, kill_s, lost = 0, [], [], []
    for i in range(trials):
        run = f"bench-stop-{os.getpid()}-{i}"
        try:
            _invoke("up", "--name", run, *QUICK, "--set", "train.steps=100000", "--set", "train.save_every=0")
            rd = RunDir(ROOT / "runs" / run)
            hb = _wait(lambda rd=rd: (h := rd.heartbeats().get(1)) and h.step >= 2 and h, 120)
            if not hb:
                notes.append(f"{i}: no step 2")
                continue
            os.kill(hb.pid, signal.SIGSTOP)
            time.sleep(1.0)
            err = _status(run).get("error") or ""
            t0 = time.monotonic()
            res = _invoke("kill", "--run", run)
            took = time.monotonic() - t0
            kill_s.append(round(took, 1))
            reached = _last_hb_step(rd)
            ck = rd.newest_intact_checkpoint()
            saved = read_json(ck / "meta.json")["step"] if ck else None
            lost.append(reached - (saved or 0))
            ok = f"rank 1 (pid {hb.pid}) is stopped" in err and "memory" not in err
            ok = ok and res.exit_code == 0 and took < 30 and saved == reached
            survived += ok
            if not ok:
                notes.append(
                    f"{i}: status {err!r} kill {res.exit_code} in {took:.0f}s saved {saved} reached {reached}"
                )
        finally:
            _cleanup(run)
    return {"trials": trials, "survived": survived, "kill_s": kill_s, "steps_lost": lost, "notes": notes}


def fault_concurrent_restart(trials: int) -> dict:
    survived, notes, second = 0, [], []
    for i in range(trials):
        run = f"bench-conc-{os.getpid()}-{i}"
        try:
            _invoke("up", "--name", run, *QUICK, "--set", "train.steps=100000", "--set", "train.save_every=5")
            rd = RunDir(ROOT / "runs" / run)
            _wait(lambda rd=rd: rd.latest_checkpoint(), 120)
            a = _cli("restart", "--run", run)
            b = _cli("restart", "--run", run)
            outs = [(p.wait(timeout=600), p.stdout.read()) for p in (a, b)]
            codes = sorted(c for c, _ in outs)
            busy = next((o for c, o in outs if c == 1), "")
            second.append(" ".join(busy.split())[:160])
            resumes = sum('"resumed"' in x for x in rd.events.read_text().splitlines())
            ok = codes == [0, 1] and f"run {run} is being restarted by PID" in busy
            ok = ok and not any("Traceback" in o for _, o in outs) and resumes == 1
            ok = ok and _status(run)["state"] in ("running", "restarting")
            survived += ok
            if not ok:
                notes.append(f"{i}: codes {codes} resumes {resumes} outputs {[o[-300:] for _, o in outs]!r}")
        finally:
            _cleanup(run)
    return {"trials": trials, "survived": survived, "second_says": second[:1], "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kill", type=int, default=20)
    ap.add_argument("--kill9-save", type=int, default=20)
    ap.add_argument("--corrupt", type=int, default=1, help="rounds of the six damage cases")
    ap.add_argument("--disk-full", type=int, default=2)
    ap.add_argument("--sigkill", type=int, default=4)
    ap.add_argument("--full-disk-kill", type=int, default=2)
    ap.add_argument("--missing-required", type=int, default=2)
    ap.add_argument("--stopped-rank", type=int, default=2)
    ap.add_argument("--concurrent-restart", type=int, default=2)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="nsa-bench-faults-")
    os.environ["NSA_LAUNCH_HOME"] = home
    os.environ.pop("NSA_LAUNCH_HOST", None)
    out: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": os.uname().nodename}
    t0 = time.time()
    with private_tmux_server() as server:
        os.environ["NSA_LAUNCH_TMUX_SOCKET"] = server.socket_name
        for name, n in (("corrupt", args.corrupt), ("sigkill", args.sigkill), ("disk_full", args.disk_full),
                        ("kill9_save", args.kill9_save), ("kill", args.kill),
                        ("full_disk_kill", args.full_disk_kill), ("missing_required", args.missing_required),
                        ("stopped_rank", args.stopped_rank),
                        ("concurrent_restart", args.concurrent_restart)):  # fmt: skip
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
