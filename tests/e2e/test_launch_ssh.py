"""nsa-launch over SSH against the real loopback sshd, real tmux and real torchrun (gloo, CPU).

One run is shared by several assertions (it costs a torchrun start): up -> status running -> logs
show steps -> logs -f delivers a new line -> tunnel serves the TensorBoard page through the forward
-> kill -> no process of the run left, idempotent kill. The host workdir and an env value carry
quotes, $(...), backticks and ; (and the env value a newline): they must reach the host literally.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from launcher.run.api import open_tunnel, resolve_run, stream_log
from tests.e2e.launch_support import PACED, PYTHON, invoke, isolate, run_processes, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_up_status_logs_tunnel_kill_over_ssh(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    canary = tmp_path / "canary"
    hostile = f'a\'b "q" $(touch {canary}) `touch {canary}` ; x'
    workdir = tmp_path / f"host {hostile.replace('/', '_')}"
    # Command substitution, backticks and newlines in env values are refused up front (exit 2,
    # nothing created); every other byte arrives literally (checked below).
    refused = invoke("up", "--name", "ssh-refused", "--env", f"NCCL_SOCKET_IFNAME={hostile}\nsecond line")
    assert refused.exit_code == 2 and "$(" in refused.output, refused.output
    assert not canary.exists() and not (workdir / "runs" / "ssh-refused").exists()
    env_value = 'a\'b "q" ; $HOME | x && y'
    res = invoke(
        "up",
        "--host",
        sshd.alias,
        "--ssh-config",
        str(sshd.ssh_config),
        "--python",
        PYTHON,
        "--workdir",
        str(workdir),
        "--name",
        "ssh-e2e",
        "--set",
        "train.steps=2000",
        *PACED,
        "--env",
        f"NCCL_SOCKET_IFNAME={env_value}",
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "ssh-e2e"
    assert "nsa-launch logs -f --run ssh-e2e" in res.output.replace("| logs -f", "nsa-launch logs -f")
    rec = resolve_run("ssh-e2e")
    assert (
        rec.run_dir == f"{workdir}/runs/ssh-e2e" and (workdir / "runs" / "ssh-e2e" / "manifest.json").exists()
    )
    try:
        st = wait_for(
            lambda: (s := status("ssh-e2e"))["state"] == "running" and s["step"] >= 5 and s,
            120,
            "state running at step >= 5",
        )
        assert st["host"] == rec.host and st["total_steps"] == 2000 and st["exit_code"] is None
        assert set(st["heartbeat_age_s"]) == {"0", "1"} and st["gpus"] == [] and st["pids"]
        assert isinstance(st["loss"], float) or st["step"] < 5

        # the hostile env value reached the workers byte for byte, and nothing it contains ran
        pids = run_processes(rec.run_dir)
        assert pids, "no tagged process found for the run"
        seen = set()
        for pid in pids:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"NCCL_SOCKET_IFNAME" in env:
                seen.add(env[b"NCCL_SOCKET_IFNAME"].decode())
        assert seen == {env_value}
        assert not canary.exists()

        logs = invoke("logs", "--run", "ssh-e2e", "-n", "400")
        assert logs.exit_code == 0 and "[nsa] step" in logs.stdout

        # logs -f: a line appended on the host arrives through the stream
        marker = f"marker-{time.time()}"
        stream = stream_log(rec, follow=True, last_n=1)
        assert "[nsa]" in next(stream)  # the agent is now following the end of the file
        with open(Path(rec.run_dir) / "train.log", "a") as f:
            f.write(marker + "\n")
        deadline = time.monotonic() + 20
        for line in stream:
            if marker in line or time.monotonic() > deadline:
                break
        stream.close()
        assert marker in line

        tun = open_tunnel(rec, port=6006)
        try:
            assert tun.url.startswith("http://127.0.0.1:") and tun.local_port >= 6006
            page = urllib.request.urlopen(tun.url, timeout=30).read().decode()
            assert "TensorBoard" in page or "tensorboard" in page
            # the CLI, asked for the port the API tunnel holds, takes the next free one; Ctrl-C and
            # SIGTERM (kill, a supervisor) both close it cleanly
            for sig in (signal.SIGINT, signal.SIGTERM):
                _cli_tunnel_until(sig, tun)
        finally:
            tun.close()

        kill = invoke("kill", "--run", "ssh-e2e", "--json")
        assert kill.exit_code == 0, kill.output
        assert '"killed": true' in kill.stdout and '"remaining_pids": []' in kill.stdout
        assert run_processes(rec.run_dir) == set()
        assert not tmux_server.has_session("nsa-ssh-e2e") and not tmux_server.has_session("nsa-ssh-e2e-tb")
        assert status("ssh-e2e")["state"] == "killed"
        again = invoke("kill", "--run", "ssh-e2e")
        assert again.exit_code == 0 and "nothing left" in again.output
        assert not canary.exists()
    finally:
        invoke("kill", "--run", "ssh-e2e")
    for pid in run_processes(rec.run_dir):
        os.kill(pid, 9)


def _cli_tunnel_until(sig: signal.Signals, api_tunnel) -> None:
    """`nsa-launch tunnel` beside the API tunnel: serves the page on another port, exits 130 (an
    interrupted command) on `sig`."""
    exe = Path(sys.executable).parent / "nsa-launch"
    cli = subprocess.Popen(
        [str(exe), "tunnel", "--run", "ssh-e2e", "--port", str(api_tunnel.local_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as from a terminal: a suite started in the background (`&`) hands its children
        # SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        url = cli.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url != api_tunnel.url, url
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert port > api_tunnel.local_port
        assert "tensorboard" in urllib.request.urlopen(url, timeout=30).read().decode().lower()
    finally:
        cli.send_signal(sig)
        try:
            assert cli.wait(timeout=20) == 130, cli.stderr.read()
        finally:
            if cli.poll() is None:
                cli.kill()
    with pytest.raises(ConnectionRefusedError):  # the forward is gone with the CLI
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
