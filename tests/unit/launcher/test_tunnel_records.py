"""`status` shows the URL of an `nsa-launch tunnel` that answers, however many were opened.

Two tunnels to one run (`nsa-launch tunnel` in two terminals) used to share one record,
`tunnels/RUN.json`: the second overwrote the first's, and when it closed it removed the record, so
`status` said no tunnel while the first still served TensorBoard. Each tunnel process here is a real
process that records a real HTTP server (standing in for TensorBoard through the forward) with
`record_tunnel` and forgets it on exit, as `nsa-launch tunnel` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.run.control import live_tunnel

CHILD = """
import http.server, sys, threading
from launcher.run.control import Tunnel, forget_tunnel, record_tunnel
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
threading.Thread(target=srv.serve_forever, daemon=True).start()
port = srv.server_address[1]
record_tunnel(sys.argv[1], Tunnel(f"http://127.0.0.1:{port}/", port, port))
print(port, flush=True)
try:
    sys.stdin.read()  # until the test closes it: the tunnel's Ctrl-C
finally:
    forget_tunnel(sys.argv[1])
    srv.shutdown()
"""


def _tunnel(run: str, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, run], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    line = p.stdout.readline() if p.stdout else ""
    assert line.strip().isdigit(), f"tunnel process did not start: {line!r}"
    return p, f"http://127.0.0.1:{int(line)}/"


def _close(p: subprocess.Popen) -> None:
    if p.stdin:
        p.stdin.close()
    assert p.wait(timeout=30) == 0


def test_the_first_tunnel_still_shows_after_the_second_closes(tmp_path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    env = {**os.environ, "NSA_LAUNCH_HOME": str(home)}
    first, url1 = _tunnel("r1", env)
    second = None
    try:
        second, url2 = _tunnel("r1", env)
        assert live_tunnel("r1") in (url1, url2)
        _close(second)
        second = None
        assert live_tunnel("r1") == url1  # was None: the second's close removed the only record
        other, url3 = _tunnel("r2", env)  # another run's tunnel is not this run's
        try:
            assert live_tunnel("r1") == url1 and live_tunnel("r2") == url3
        finally:
            _close(other)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                _close(p)
    assert live_tunnel("r1") is None and live_tunnel("r2") is None
    assert list((home / "tunnels").iterdir()) == []  # each removed its own record


def test_a_killed_tunnels_record_is_swept_and_never_shown(tmp_path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    p, _url = _tunnel("r1", {**os.environ, "NSA_LAUNCH_HOME": str(home)})
    p.send_signal(signal.SIGKILL)  # no finally: the record stays behind
    p.wait(timeout=30)
    records = list((home / "tunnels").iterdir())
    assert len(records) == 1 and json.loads(records[0].read_text())["pid"] == p.pid
    assert live_tunnel("r1") is None
    assert list(Path(home / "tunnels").iterdir()) == []
