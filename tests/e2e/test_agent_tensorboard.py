"""The agent's TensorBoard start on a real tmux server with the real tensorboard: the port it reports
is served by the run's own TensorBoard, also when another listener takes the chosen port before
TensorBoard binds it (two tunnels opened at once); and procs.listens_on tells whose listener it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from launcher.core.ports import bind_first_free, first_free_port
from launcher.host import procs, tensorboard

pytestmark = pytest.mark.e2e

LISTEN = "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)"

CONNECT = "import socket,sys,time; c=socket.create_connection(('127.0.0.1',int(sys.argv[1]))); print('connected', flush=True); time.sleep(60)"


def test_listens_on_tells_a_process_tree_listener_from_another():
    mine = bind_first_free(first_free_port(31000, 2000), 100)
    mine.listen(1)
    # the listener runs under the shell we start (or is it, if sh execs): found through descendants
    shell = subprocess.Popen(
        ["sh", "-c", f'{sys.executable} -c "{LISTEN}"'],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        port = int(shell.stdout.readline())
        assert procs.listens_on(shell.pid, port) is True
        assert procs.listens_on(shell.pid, mine.getsockname()[1]) is False  # held by this process
        assert procs.listens_on(shell.pid, first_free_port(33000, 2000)) is False  # nobody listens
        # a sibling holding a connection to the port is not its listener
        client = subprocess.Popen(
            [sys.executable, "-c", CONNECT, str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert client.stdout.readline().strip() == "connected"
            assert procs.listens_on(client.pid, port) is False
        finally:
            client.kill()
            client.wait()
    finally:
        os.killpg(shell.pid, signal.SIGKILL)  # the shell and the listener under it
        shell.wait()
        mine.close()


def test_tensorboard_moves_on_when_another_listener_took_its_port(tmux_server, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    EventFileWriter(str(run_dir / "tb")).close()  # what the trainer's writer leaves: one event file
    thief = bind_first_free(first_free_port(35000, 2000), 100)  # "another run's TensorBoard"
    thief.listen(1)
    taken = thief.getsockname()[1]
    real_free_port = tensorboard.free_port
    calls: list[int] = []

    def racy_free_port(start: int) -> int:
        calls.append(start)  # the first pick loses the race: the port is taken before TB binds it
        return taken if len(calls) == 1 else real_free_port(start)

    monkeypatch.setattr(tensorboard, "free_port", racy_free_port)
    req = {
        "run": "tbrace",
        "run_dir": str(run_dir),
        "python": sys.executable,
        "port": taken,
        "tmux_socket": tmux_server.socket_name,
        "timeout_s": 90,
    }
    try:
        reply = tensorboard.cmd_tensorboard(req)
        assert reply["ok"], reply
        assert reply["port"] != taken and len(calls) == 2 and calls[1] == taken + 1
        state = tensorboard.read_json(run_dir / tensorboard.TB_STATE)
        assert procs.listens_on(int(state["pid"]), reply["port"]) is True
        page = urllib.request.urlopen(f"http://127.0.0.1:{reply['port']}/", timeout=30).read().decode()
        assert "tensorboard" in page.lower()
        # the run is named after the run, not "." (the logdir itself)
        runs = urllib.request.urlopen(f"http://127.0.0.1:{reply['port']}/data/runs", timeout=30).read()
        assert json.loads(runs) == ["tbrace"], runs
        # asked again, the running one is reused (its own port, not the thief's)
        again = tensorboard.cmd_tensorboard(req)
        assert again == {"ok": True, "port": reply["port"], "reused": True}
    finally:
        thief.close()


def test_a_reopen_starts_no_tensorboard_for_a_run_being_killed(tmux_server, tmp_path, monkeypatch):
    """A tunnel's reopen (`live_only`) raced a kill: TensorBoard stopped first, the run seconds later.
    Started then, TensorBoard would outlive the kill and hold the tunnel open for good."""
    run_dir = tmp_path / "run"
    (run_dir / "tb").mkdir(parents=True)
    rd = tensorboard.RunDir(str(run_dir))
    req = {
        "run": "tbkill",
        "run_dir": str(run_dir),
        "python": sys.executable,
        "port": first_free_port(37000, 2000),
        "tmux_socket": tmux_server.socket_name,
        "timeout_s": 90,
        "live_only": True,
    }
    # the kill had begun before the reopen: nothing starts
    rd.stop_requested_file.write_text("{}")
    reply = tensorboard.cmd_tensorboard(req)
    assert reply["ok"] is False and reply["stopped"] is True and "restart" in reply["fix"], reply
    assert not (run_dir / tensorboard.TB_STATE).exists() and not (run_dir / tensorboard.TB_LOG).exists()
    rd.stop_requested_file.unlink()

    # the kill begins while TensorBoard starts: the one started is stopped again, and refused
    real_serves = tensorboard._serves
    started: list[int] = []

    def kill_meanwhile(pid: int, port: int) -> bool:
        ok = real_serves(pid, port)
        if ok and not started:
            started.append(pid)
            rd.killed_file.write_text("{}")
        return ok

    monkeypatch.setattr(tensorboard, "_serves", kill_meanwhile)
    reply = tensorboard.cmd_tensorboard(req)
    assert reply["ok"] is False and reply["stopped"] is True, reply
    assert started and not procs.alive(started[0])
    assert not (run_dir / tensorboard.TB_STATE).exists()  # nothing to reuse
