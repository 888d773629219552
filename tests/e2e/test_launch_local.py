"""nsa-launch on the local transport (the `cpu` profile's default path), real tmux and torchrun.

One run, shared: up -> status running -> logs show steps -> restart resumes from the checkpoint
(a `resumed` event, steps continue past it) -> tunnel serves TensorBoard -> kill -> no process left.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.run.api import gpu_processes, kill_gpu_process, open_tunnel, resolve_run
from nsa.runfiles import RunDir
from tests.e2e.launch_support import (
    PACED,
    cleanup_local_run,
    invoke,
    isolate,
    run_processes,
    status,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_local_up_restart_tunnel_kill(tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    run = f"local-e2e-{os.getpid()}"
    cleanup_local_run(run)
    secret = "hf_e2e_secret_value_4711"
    monkeypatch.setenv("HF_TOKEN", secret)
    # Secrets in the launching shell that the run is NOT given (issue 21: they reached the tmux
    # server's global environment and TensorBoard).
    unpassed = {"PRIME_API_KEY": "pk_unpassed_e2e_4711", "WANDB_API_KEY": "wb_unpassed_e2e_4711"}
    for k, v in unpassed.items():
        monkeypatch.setenv(k, v)
    res = invoke(
        "up",
        "--name",
        run,
        "--set",
        "train.steps=3000",
        "--set",
        "train.save_every=10",
        *PACED,
        "--secret",
        "HF_TOKEN",
    )
    assert res.exit_code == 0, res.output
    rec = resolve_run(None)  # the most recent run
    assert rec.run == run and rec.is_local and (home / "runs" / f"{run}.json").exists()
    rd = RunDir(rec.run_dir)
    try:
        manifest = json.loads(rd.manifest.read_text())
        assert (
            manifest["profile"] == "cpu" and manifest["world_size"] == 2 and manifest["total_steps"] == 3000
        )
        assert "--standalone" in manifest["command"] and manifest["env"]["OMP_NUM_THREADS"] == "1"

        wait_for(lambda: status(run)["state"] == "running", 60, "state running")
        # the secret reached the workers, and is written nowhere: not in the run dir, registry or status
        assert manifest["env"]["HF_TOKEN"] == "****"
        envs = [Path(f"/proc/{p}/environ").read_bytes() for p in run_processes(rec.run_dir)]
        assert any(f"HF_TOKEN={secret}".encode() in e for e in envs)
        for f in [*Path(rec.run_dir).rglob("*"), *home.rglob("*")]:
            if f.is_file() and f.suffix not in (".pt", ".bin") and "tfevents" not in f.name:
                assert secret not in f.read_text(errors="replace"), f
        assert secret not in invoke("status", "--run", run, "--json").output
        ckpt = wait_for(rd.latest_checkpoint, 120, "a first checkpoint")
        ckpt_step = int(ckpt.name.split("-")[1])
        logs = invoke("logs", "--run", run, "-n", "50")
        assert "[rank0]:[nsa] step" in logs.stdout  # torchrun --tee tags worker lines with the rank
        for cols in (80, 200):  # the human table fits the terminal; no cell is cut
            table = CliRunner().invoke(cli, ["status", "--run", run], env={"COLUMNS": str(cols)})
            lines = table.stdout.splitlines()
            assert table.exit_code == 0 and max(map(len, lines)) <= cols and "…" not in table.stdout, (
                table.stdout
            )
            assert lines[0].split()[:3] == ["run", "state", "step"] and " running " in table.stdout
        assert " ago " in table.stdout and "elapsed" in lines[0]  # the wide one has the heartbeat age
        # the GPU-process calls through the real agent on this CPU host: no NVML, so no rows, and a
        # kill of a worker is refused (only pids NVML lists can be killed): the run goes on
        assert gpu_processes(rec) is None
        worker = sorted(run_processes(rec.run_dir))[-1]
        refused = kill_gpu_process(rec, worker)
        assert refused["killed"] is False and "no NVML" in refused["message"]
        assert worker in run_processes(rec.run_dir) and status(run)["state"] == "running"

        res = invoke("restart", "--run", run)
        assert res.exit_code == 0, res.output
        resumed = wait_for(
            lambda: [e for e in rd.events.read_text().splitlines() if '"resumed"' in e], 60, "a resumed event"
        )
        r_step = json.loads(resumed[-1])["step"]
        assert r_step >= ckpt_step
        st = wait_for(
            lambda: (s := status(run))["state"] == "running" and s["step"] > r_step and s,
            60,
            "steps past the resume point",
        )
        assert st["step"] > r_step and len(json.loads(rd.manifest.read_text())["restarts"]) == 1
        assert "[nsa-launch]" in rd.train_log.read_text() and "--resume" in rd.train_log.read_text()

        tun = open_tunnel(rec)
        try:
            assert "tensorboard" in urllib.request.urlopen(tun.url, timeout=30).read().decode().lower()
            _no_unpassed_secret(tmux_server, rd, unpassed, secret)
        finally:
            tun.close()

        res = invoke("kill", "--run", run)
        assert res.exit_code == 0 and "verified none is left" in res.output
        assert run_processes(rec.run_dir) == set() and not tmux_server.has_session(f"nsa-{run}")
        assert status(run)["state"] == "killed"
    finally:
        invoke("kill", "--run", run)
        cleanup_local_run(run)
    assert not Path(rec.run_dir).exists()


def _no_unpassed_secret(tmux_server, rd: RunDir, unpassed: dict[str, str], passed: str) -> None:
    """Every process the local run started (tmux server, panes, wrapper, torchrun, workers, TensorBoard)
    holds no secret it was not given; HF_TOKEN, passed by name, is in the workers only."""
    sock = ["tmux", "-L", tmux_server.socket_name]
    server = int(
        subprocess.run([*sock, "display-message", "-p", "#{pid}"], capture_output=True, text=True).stdout
    )
    tb = json.loads((rd.root / "tensorboard.json").read_text())["pid"]
    pids = run_processes(str(rd.root)) | {server, tb}
    assert tb in run_processes(str(rd.root))  # TensorBoard carries the run's tag, nothing else of ours
    for pid in pids:
        env = Path(f"/proc/{pid}/environ").read_bytes()
        for name, value in unpassed.items():
            assert value.encode() not in env, (
                f"{name} leaked into pid {pid} ({Path(f'/proc/{pid}/comm').read_text()})"
            )
    for pid in (server, tb):
        assert passed.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), pid
    glob = subprocess.run([*sock, "show-environment", "-g"], capture_output=True, text=True).stdout
    assert not any(v in glob for v in [passed, *unpassed.values()]), glob
