"""The test infrastructure itself: the sshd fixture checks host keys, the tmux fixture is real."""

from __future__ import annotations

import subprocess
import time

import paramiko
import pytest
from fabric import Connection

pytestmark = pytest.mark.e2e


def _connection(sshd, known_hosts) -> Connection:
    conn = Connection(
        sshd.host,
        user=sshd.user,
        port=sshd.port,
        connect_timeout=10,
        connect_kwargs={"key_filename": str(sshd.key_path), "look_for_keys": False, "allow_agent": False},
    )
    # fabric's default policy would add an unknown key silently; a test host must be verified.
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    conn.client.load_host_keys(str(known_hosts))
    return conn


def test_fabric_round_trip_with_verified_host_key(sshd):
    with _connection(sshd, sshd.known_hosts) as conn:
        result = conn.run(
            "echo hello-from-$((40 + 2)); echo err >&2; exit 3", hide=True, in_stream=False, warn=True
        )
    assert result.stdout == "hello-from-42\n"
    assert result.stderr == "err\n"
    assert result.exited == 3


def test_wrong_host_key_is_rejected(sshd, tmp_path):
    wrong_key = paramiko.Ed25519Key.from_private_key_file(str(sshd.key_path))  # a real key, not the host's
    bad_known_hosts = tmp_path / "known_hosts"
    bad_known_hosts.write_text(f"[{sshd.host}]:{sshd.port} ssh-ed25519 {wrong_key.get_base64()}\n")
    conn = _connection(sshd, bad_known_hosts)
    with pytest.raises(paramiko.BadHostKeyException):
        conn.run("true", hide=True, in_stream=False)
    conn.close()


def test_unknown_host_key_is_rejected(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    conn = _connection(sshd, empty)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        conn.run("true", hide=True, in_stream=False)
    conn.close()


def test_openssh_client_uses_alias_from_generated_config(sshd):
    for alias in sshd.aliases:
        out = subprocess.run(
            ["ssh", "-F", str(sshd.ssh_config), alias, "echo", "via-$USER-alias"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"via-{sshd.user}-alias"


def test_stop_drops_connections_and_start_restores(sshd):
    conn = _connection(sshd, sshd.known_hosts)
    conn.open()
    assert conn.is_connected
    sshd.stop()
    try:
        with pytest.raises(Exception):  # noqa: B017 - any transport error: the channel is gone
            conn.run("true", hide=True, in_stream=False, timeout=5)
    finally:
        conn.close()
        sshd.start()
    with _connection(sshd, sshd.known_hosts) as conn2:
        assert conn2.run("echo back", hide=True, in_stream=False).stdout == "back\n"


def test_tmux_session_created_and_captured(tmux_server):
    session = tmux_server.new_session(session_name="probe", window_command="sh")
    pane = session.active_window.active_pane
    pane.send_keys("echo tmux-$((6 * 7))", enter=True)
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = pane.capture_pane()
        if "tmux-42" in lines:
            break
        time.sleep(0.05)
    assert "tmux-42" in lines
    assert tmux_server.has_session("probe")
    socket = tmux_server.socket_name
    assert socket and socket.startswith("nsa-test-")
