"""Recovery times of nsa-launch, measured end to end on this machine (CPU, 2 gloo workers, tiny config).

Prints one JSON line per scenario:
- `same_host`: NSA_FAULT SIGKILLs rank 1 once before step 10; the wrapper restarts torchrun with
  --resume. crash = the last train record before the kill (log_every=1); training again = the first
  train record written after the `restart` event. steps_lost = failed step - checkpoint step.
- `lost_pod`: `up --provision prime` against the FAKE Prime API (tests/fixtures/fake_prime.py, pod
  start delay `--start-delay`, stated in the output); once step 6 is checkpointed and mirrored the
  pod is killed (sshd and every process); `watch --lost-after L` replaces it. lost = the kill;
  training again = the first train record after it. steps_lost = steps done at the kill - checkpoint.
  With `--nodes N` (N > 1) the pod is a multi-node one (N nodes x 1 worker, a world of N): the mirror
  must hold every node's part of step 6 before the kill, and the replacement restores each node's.

  `lost_pod` also samples the fake's pod list every 0.1 s: `max_pods_listed` is the most pods the
  API listed at once (a lost pod stays listed ACTIVE in the fake, as a preempted host may: it is
  terminated only after the new pod resumed, so it is counted while the replacement runs);
  `seconds_two_pods_listed` is how long two were listed (samples x 0.1 s). With `--gone` the fake
  reports the lost pod TERMINATED at once: it is terminated before the new one is rented.

Fault scenarios (issue 22), `--trials N` each, on loopback (local run dirs, real rsync; the fake API
where pods are involved), counting what went right:
- `rot`: the host's newest checkpoint rots after it was mirrored, then a newer one rots before it
  is: the mirror must keep the newer good copy both times and `latest` must verify.
- `handover`: watcher B loaded the run on pod 1; watcher A replaced it with pod 2 where the run
  finished; B's next status is of pod 1's dead address: B must rent nothing (replacements, pods).
- `full_disk`: the final pull cannot land (RLIMIT_FSIZE: writes fail as on a full disk): `watch`
  must exit 1 and say how many steps the mirror is behind; no .tmp- dir left.
- `concurrent`: a `pull` process and this process pull while the host saves checkpoints; a reader
  checks `latest` continuously: every look must name a directory that verifies.
- `sigterm`: `watch` gets SIGTERM while the replacement pod it rented is still PENDING (the fake's
  start delay 60 s): it must exit 130 and leave no pod listed. (Renting-then-recording inside
  launcher/providers is issue 24's part; this measures watch's side.)
- `unchanged_pull`: seconds of the first pull of a 256 MB checkpoint, then of `--trials` pulls with
  nothing new (nothing is hashed again on either side).

Usage: .venv/bin/python bench/recovery.py [--start-delay 5] [--lost-after 5]
       [--only same_host|lost_pod|rot|handover|full_disk|concurrent|sigterm|unchanged_pull] [--nodes 1] [--gone] [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.recovery_faults import SCENARIOS  # noqa: E402
from tests.fixtures.fake_prime import API_KEY, make_fake, pod_profile  # noqa: E402

SETS = ["train.steps=16", "train.save_every=6", "train.eval_every=100", "train.log_every=1"]


def _cli(env: dict[str, str], *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        env=env, capture_output=True, text=True, cwd=REPO, **kw,
    )  # fmt: skip


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()]


def _sets() -> list[str]:
    return [a for s in SETS for a in ("--set", s)]


def same_host(home: str) -> dict:
    env = dict(os.environ, NSA_LAUNCH_HOME=home, NSA_LAUNCH_TMUX_SOCKET=f"bench-rec-{os.getpid()}")
    run = f"bench-crash-{os.getpid()}"
    p = _cli(env, "up", "--name", run, *_sets(), "--env", "NSA_FAULT=kill:step=10:rank=1:once", "--wait")
    rd = REPO / "runs" / run
    try:
        assert p.returncode == 0, p.stderr[-2000:]
        ev = _jsonl(rd / "events.jsonl")
        rs = next(e for e in ev if e["kind"] == "restart")
        train = [m for m in _jsonl(rd / "metrics.jsonl") if "loss" in m]
        before = [m for m in train if m["time"] < rs["time"]][-1]
        after = next(m for m in train if m["time"] > rs["time"])
        ck = int(rs["detail"]["checkpoint"].split("-")[1])
        return {
            "scenario": "same_host", "crash_to_training_s": round(after["time"] - before["time"], 1),
            "restart_decided_after_s": round(rs["time"] - before["time"], 1), "failed_step": rs["step"],
            "resumed_from_step": ck, "steps_lost": rs["step"] - ck, "cause": rs["detail"]["cause"],
        }  # fmt: skip
    finally:
        _cli(env, "kill", "--run", run)
        shutil.rmtree(rd, ignore_errors=True)


def lost_pod(home: str, start_delay: float, lost_after: float, nodes: int = 1, gone: bool = False) -> dict:
    fake = make_fake(start_delay)
    env = dict(os.environ, NSA_LAUNCH_HOME=home, NSA_LAUNCH_TMUX_SOCKET=f"bench-rec-{os.getpid()}",
               PRIME_API_KEY=API_KEY, PRIME_API_BASE_URL=fake.url)  # fmt: skip
    run = f"bench-lost-{os.getpid()}"
    watcher = None
    profile = ["--profile", str(pod_profile(Path(home), nodes))] if nodes > 1 else []
    try:
        p = _cli(env, "up", *profile, "--provision", "prime", "--gpu-type", "CPU_NODE", "--ssh-config",
                 str(fake.ssh_config), "--python", sys.executable, "--name", run, *_sets())  # fmt: skip
        assert p.returncode == 0, p.stderr[-2000:]
        (pod1,) = fake.pods
        watcher = subprocess.Popen(
            [sys.executable, "-c", "from launcher.cli import main; main()", "watch", "--run", run,
             "--pull-every", "1", "--lost-after", str(lost_after), "--poll", "1"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        recs = json.loads((Path(home) / "runs" / f"{run}.json").read_text())["nodes"]
        on_pods = [Path(n["run_dir"]) for n in recs]
        while not all((d / "checkpoints" / "step-00000006" / "manifest.json").exists() for d in on_pods):
            time.sleep(0.05)
        fake.freeze_run(pod1)
        mirror = Path(home) / "mirror" / run
        lasts = [mirror / "checkpoints" / "latest"] + [
            mirror / "nodes" / str(k) / "checkpoints" / "latest" for k in range(1, nodes)
        ]
        while not all(f.exists() and f.read_text().strip() == "step-00000006" for f in lasts):
            time.sleep(0.1)
        done = max(
            json.loads(f.read_text())["step"] for d in on_pods for f in (d / "heartbeat").glob("*.json")
        )
        listed = [len(fake.pods)]
        sampling = threading.Event()

        def sample() -> None:  # the most pods the API lists at once (each one may bill)
            while not sampling.is_set():
                listed.append(len(fake.pods))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t_lost = time.time()
        fake.lose(pod1)
        if gone:  # the API says so at once (a reclaimed host): terminated before the new pod is rented
            fake.pods[pod1].status = "TERMINATED"
        _out, err = watcher.communicate(timeout=1800)
        sampling.set()
        sampler.join()
        assert watcher.returncode == 0, err[-3000:]
        ev = _jsonl(mirror / "events.jsonl")
        rep = next(e for e in ev if e["kind"] == "host_replaced")
        after = next(m for m in _jsonl(mirror / "metrics.jsonl") if "loss" in m and m["time"] > t_lost)
        _cli(env, "pods", "down", run, "--yes", "--no-pull")
        return {
            "scenario": "lost_pod", "nodes": nodes, "api_says_gone": gone, "fake_pod_start_delay_s": start_delay, "lost_after_s": lost_after,
            "lost_to_training_s": round(after["time"] - t_lost, 1),
            "lost_to_restore_started_s": round(rep["time"] - t_lost, 1), "steps_done_at_loss": done,
            "resumed_from_step": 6, "steps_lost": done - 6, "max_pods_listed": max(listed),
            "seconds_two_pods_listed": round(0.1 * sum(n >= 2 for n in listed), 1),
        }  # fmt: skip
    finally:
        if watcher and watcher.poll() is None:
            watcher.kill()
        fake.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start-delay", type=float, default=5.0)
    ap.add_argument("--lost-after", type=float, default=5.0)
    ap.add_argument("--only", choices=["same_host", "lost_pod", *SCENARIOS])
    ap.add_argument("--nodes", type=int, default=1, help="lost_pod: nodes of the rented pod (1 worker each)")
    ap.add_argument("--trials", type=int, default=3, help="fault scenarios: trials each")
    ap.add_argument("--gone", action="store_true", help="lost_pod: the API reports the lost pod TERMINATED")
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="nsa-bench-recovery-")
    try:
        for name in ("same_host", "lost_pod", *SCENARIOS):
            if a.only and a.only != name:
                continue
            load = os.getloadavg()[0]
            if name == "same_host":
                res = same_host(home)
            elif name == "lost_pod":
                res = lost_pod(home, a.start_delay, a.lost_after, a.nodes, a.gone)
            else:
                res = SCENARIOS[name](a.trials)
            res.update(load_avg_1m_start=round(load, 2), load_avg_1m_end=round(os.getloadavg()[0], 2))
            print(json.dumps(res), flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
