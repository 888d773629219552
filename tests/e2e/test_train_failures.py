"""The failure paths of a real nsa-train, driven by NSA_FAULT: a stalled rank is caught by the
watchdog (stacks + `stalled` event within the threshold), SIGUSR1 dumps stacks on demand, SIGTERM
ends a running trainer within seconds (after a checkpoint at the next step boundary), and a NaN loss on one rank stops every rank with an `error` event instead of a hang.
The stalled-rank and blocked-collective tests read one shared 2-rank run (`stalled_run`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nsa.runfiles import RunDir, failure_cause, torchrun_root_cause
from tests.assets.trainrun import REPO, TINY, clean_env, events, explain, run_train, train_cmd, train_losses

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUICK = [
    "train.seq_len=64",
    "train.eval_every=0",
    "train.save_every=0",
    "train.log_every=1",
    "telemetry.tensorboard=false",
]


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


# 5 s, not 3: a rank waits without a heartbeat while its peer boots (rendezvous) and in its first
# step (torch._dynamo's import), and under load 5-6 on the 2-core VM that passed 3 s once (suitetime3's
# first "after" run: rank 1 "stalled" at step 0, rank 0 never blocked). Rank 0's SIGTERM still ends it
# only after 10 s (its step-boundary wait), after both aborts (STALL_S + 2.5 s grace).
STALL_S = 5.0


@pytest.fixture(scope="module")
def stalled_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One 2-rank run whose rank 1 hangs before step 3 (NSA_FAULT=stall), shared by the two tests below:
    rank 0 waits for it inside gloo's all-reduce (C++, no Python bytecode runs), is SIGTERMed there 1 s
    in (test_sigterm_ends_a_rank_blocked_inside_a_collective), and at STALL_S both watchdogs catch the
    stall and abort (test_stalled_rank_is_caught_within_the_threshold). The SIGTERM changes nothing the
    stall test reads: its event moves no progress clock, and rank 0's wait for a step boundary (10 s
    floor) outlasts the abort (STALL_S + 2.5 s grace). One torchrun and two ranks less (~12 s of CPU)."""
    run = tmp_path_factory.mktemp("stalled") / "run"
    sets = [*QUICK, "train.steps=50", f"telemetry.stall_seconds={STALL_S}", "telemetry.stall_abort=true"]
    cmd = [*train_cmd(2), "--config", str(TINY), "--run-dir", str(run)]
    for s in sets:
        cmd += ["--set", s]
    out, err = run.parent / "stdout.txt", run.parent / "stderr.txt"
    t0 = time.monotonic()
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=clean_env(NSA_FAULT="stall:step=3:rank=1"), stdout=fo, stderr=fe, text=True
        )
    try:
        hb0 = run / "heartbeat" / "rank0.json"

        def rank0_blocked() -> bool:
            d = json.loads(hb0.read_text() or "{}") if hb0.exists() else {}
            return d.get("step") == 2 and d.get("phase") == "forward_backward"

        blocked = _wait(rank0_blocked, 60)
        sigterm_s = None
        if blocked:
            time.sleep(1.0)  # well inside backward's all-reduce by now
            pid = json.loads(hb0.read_text())["pid"]
            t_kill = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            if _wait(lambda: any(e["kind"] == "sigterm" and e["rank"] == 0 for e in events(run)), 5):
                sigterm_s = time.monotonic() - t_kill
        proc.wait(timeout=90)
        wall = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    p = subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())
    return {"run": run, "proc": p, "wall": wall, "blocked": blocked, "sigterm_s": sigterm_s}


def test_stalled_rank_is_caught_within_the_threshold(stalled_run) -> None:
    stall_s, run, p, wall = STALL_S, stalled_run["run"], stalled_run["proc"], stalled_run["wall"]
    # The aborting rank exits 3 (EXIT_STALLED); torchrun itself exits 1 for any failed rank and names
    # the rank and its code in its summary, which the launcher turns into the failure cause. Its peer,
    # blocked in the all-reduce, is either aborted by its own watchdog (exit 3 too) or fails with
    # "Connection closed by peer" (exit 1) in the same instant, and torchrun may call either the root
    # cause: torchrun_root_cause reads past an exit 1 to the stalled rank.
    assert p.returncode == 1, explain(p)
    root = torchrun_root_cause(p.stderr)
    assert root is not None and root["exitcode"] == 3, explain(p)
    assert "stalled and aborted" in failure_cause(RunDir(run), 1, p.stderr), explain(p)
    stalled = [e for e in events(run) if e["kind"] == "stalled"]
    by_rank = {e["rank"]: e for e in stalled}
    assert 1 in by_rank, events(run)
    ev = by_rank[1]
    assert ev["step"] == 2 and ev["detail"]["phase"] == "forward_backward"
    assert stall_s <= ev["detail"]["idle_s"] <= stall_s + 3.0  # one poll + scheduling slack on a loaded box
    # The heartbeat of rank 1 froze when the stall began; the event came within threshold + one poll.
    hb = json.loads((run / "heartbeat" / "rank1.json").read_text())
    assert stall_s <= ev["time"] - hb["time"] <= stall_s + 3.0
    dump = (run / ev["detail"]["stacks"]).read_text()
    assert "stall_forever" in dump and "rank 1" in dump
    # Its peer, blocked in a collective waiting for it, is caught too (during the abort grace).
    assert 0 in by_rank and "_step" in (run / by_rank[0]["detail"]["stacks"]).read_text()
    assert wall < 60
    assert max(train_losses(run)) == 2


def test_sigterm_ends_a_running_trainer_within_seconds(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = [*train_cmd(1), "--config", str(TINY), "--run-dir", str(run)]
    for s in [*QUICK, "train.steps=100000"]:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        hb = run / "heartbeat" / "rank0.json"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if hb.exists() and (json.loads(hb.read_text() or "{}").get("step", 0) >= 2):
                break
            time.sleep(0.1)
        else:
            pytest.fail("trainer never reached step 2")
        proc.send_signal(signal.SIGUSR1)  # an all-thread dump on demand, the run goes on
        dump = run / "stacks" / "rank0-sigusr1.txt"
        assert _wait(lambda: "_step" in dump.read_text() or "_train" in dump.read_text(), 10)
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        assert time.monotonic() - t0 < 5
        assert rc == 128 + signal.SIGTERM
        kinds = [e["kind"] for e in events(run)]
        # SIGTERM saves at the next step boundary, then exits (issue 13: kill lost up to save_every).
        assert kinds[-2:] == ["sigterm", "checkpoint"] and "finished" not in kinds, kinds
        assert RunDir(run).newest_intact_checkpoint() is not None
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_nan_on_one_rank_stops_all_ranks_with_an_error_event(tmp_path: Path) -> None:
    run = tmp_path / "run"
    t0 = time.monotonic()
    p = run_train(
        run, [*QUICK, "train.steps=20"], nproc=2, env=clean_env(NSA_FAULT="nan:step=3:rank=1"), timeout=90
    )
    assert p.returncode != 0
    assert time.monotonic() - t0 < 60
    errors = [e for e in events(run) if e["kind"] == "error"]
    assert len(errors) == 1 and errors[0]["detail"]["error"] == "diverged" and errors[0]["step"] == 2
    assert "not finite at step 3" in errors[0]["detail"]["message"]
    assert max(train_losses(run)) == 2  # the bad step was never applied nor logged
    assert "finished" not in [e["kind"] for e in events(run)]


def test_missing_peer_is_an_init_timeout_not_a_hang(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tmp_path / "run"
    # Rank 0 of a 2-rank job whose rank 1 never comes: the store waits parallel.timeout_s, no longer.
    env = clean_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    t0 = time.monotonic()
    p = run_train(run, ["parallel.timeout_s=3"], env=env, timeout=60)
    assert p.returncode == 1 and time.monotonic() - t0 < 30
    err = [e for e in events(run) if e["kind"] == "error"][-1]
    assert err["detail"]["error"] == "InitTimeout" and "parallel.timeout_s=3" in err["detail"]["message"]
    assert json.loads((run / "heartbeat" / "rank0.json").read_text())["phase"] == "boot"


def test_sigterm_ends_a_rank_blocked_inside_a_collective(stalled_run) -> None:
    # Rank 1 hangs before step 3, so rank 0 sits inside gloo's all-reduce (C++, no Python bytecode
    # runs). SIGTERM must still reach it at once: it is acted on from a thread woken by the C handler.
    assert stalled_run["blocked"], "rank 0 never reached the blocked collective"
    assert stalled_run["sigterm_s"] is not None and stalled_run["sigterm_s"] < 5, stalled_run
