"""The tunnel's local port forward (launcher/ssh/forward.py) over the real loopback sshd: forwards opened
at the same moment from the same start port never share a port and each reaches its own service;
close() is prompt with a connection still open and stops listening; a refused remote port drops only
that connection."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from launcher.core.ports import bind_first_free, first_free_port
from launcher.ssh.hosts import parse_target
from launcher.ssh.transport import open_transport

pytestmark = pytest.mark.e2e


@contextlib.contextmanager
def http_service(body: bytes, port: int = 0) -> Iterator[int]:
    """An HTTP server on 127.0.0.1 answering every GET with `body`; yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[-1]


def test_forwards_opened_together_get_distinct_ports_and_their_own_service(sshd):
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    busy = bind_first_free(first_free_port(21000, 2000), 100)  # the start port is taken by another
    assert busy is not None
    busy.listen(1)
    start = busy.getsockname()[1]
    forwards: list = [None] * 6
    try:
        with http_service(b"service A") as a, http_service(b"service B") as b:
            t.forward_local(start + 50, a).close()  # connect once, outside the race

            def open_one(i: int) -> None:
                forwards[i] = t.forward_local(start, a if i % 2 == 0 else b)

            threads = [threading.Thread(target=open_one, args=(i,)) for i in range(len(forwards))]
            for th in threads:
                th.start()
            for th in threads:
                th.join(30)
            ports = [f.local_port for f in forwards]
            assert len(set(ports)) == len(ports) and start not in ports, ports
            for i, f in enumerate(forwards):
                # listening already: no retry needed, and never another forward's service
                assert get(f.local_port) == (b"service A" if i % 2 == 0 else b"service B")
    finally:
        for f in forwards:
            if f is not None:
                f.close()
        busy.close()
        t.close()


def test_close_is_prompt_with_a_connection_open_and_stops_listening(sshd):
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    try:
        with http_service(b"tb") as svc:
            fwd = t.forward_local(first_free_port(23000, 2000), svc)
            port = fwd.local_port
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # an unfinished request keeps it open
            time.sleep(0.3)
            t0 = time.monotonic()
            fwd.close()
            assert time.monotonic() - t0 < 3.0
            client.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert client.recv(100) == b""  # the forward closed its end
            client.close()
            with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        t.close()


def test_a_refused_remote_port_drops_that_connection_only(sshd):
    t = open_transport(parse_target(sshd.alias, str(sshd.ssh_config)))
    remote = first_free_port(25000, 2000)  # nothing listens there yet
    try:
        with t.forward_local(first_free_port(27000, 2000), remote) as fwd:
            with socket.create_connection(("127.0.0.1", fwd.local_port), timeout=10) as s:
                s.settimeout(15)
                assert s.recv(100) == b""
            with http_service(b"late", port=remote):
                assert get(fwd.local_port) == b"late"
    finally:
        t.close()
