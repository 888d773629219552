"""A host target whose port answers but is not sshd (a mistyped port, a proxy that drops the
connection): `up` and `doctor` say so in their own words, exit 1, and print no traceback.

paramiko's transport thread logs the failed banner read with a traceback at ERROR; with no logging
handler anywhere, Python's last-resort handler printed it (25 lines) above our one-line error. The
listener here is a real socket on 127.0.0.1 that accepts and closes, or says a line of HTTP first.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
CLI = str(Path(sys.executable).parent / "nsa-launch")


@pytest.fixture(params=[b"", b"HTTP/1.0 400 Bad Request\r\n\r\n"], ids=["closes", "speaks-http"])
def not_sshd(request) -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                if request.param:
                    conn.sendall(request.param)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()


def test_up_and_doctor_name_the_host_and_print_no_traceback(not_sshd, tmp_path, tmux_server):
    home = tmp_path / "home"
    env = {**os.environ, "NSA_LAUNCH_HOME": str(home), "NSA_LAUNCH_TMUX_SOCKET": tmux_server.socket_name}
    target = f"root@127.0.0.1:{not_sshd}"
    for cmd in (["up", "--name", "notssh"], ["doctor"]):
        res = subprocess.run(
            [CLI, *cmd, "--host", target, "--python", sys.executable],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert res.returncode == 1, (cmd, res.stdout, res.stderr)
        assert f"SSH to {target} failed" in res.stderr, res.stderr
        assert "fix: check the host is up and sshd runs" in res.stderr
        assert "Traceback" not in res.stderr and "Exception (client)" not in res.stderr, res.stderr
    assert not (home / "runs" / "notssh.json").exists()
    assert not tmux_server.sessions
