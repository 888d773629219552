"""A local TCP forward over an SSH connection: 127.0.0.1:<local> -> the host's 127.0.0.1:<remote>.

Replaces fabric's `Connection.forward_local` for the TensorBoard tunnel. That one binds its
listening socket later, in its own thread, to a port chosen free a moment before: two tunnels opened
at once could pick the same port (seen: two test suites side by side). The loser's bind failed
inside the thread (EADDRINUSE, raised only at close), while its caller, retrying the connect,
reached the winner's TensorBoard, another run's, and reported success.

Here the listening socket is bound before `LocalForward` returns (the first free port from
`start`, kept bound, so choosing and binding are one step), the URL is right at once, and close()
shuts every socket and channel and waits at most a few seconds for the threads.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any

from launcher.core.errors import RuntimeFailure
from launcher.core.ports import bind_first_free

CLOSE_WAIT_S = 2.0  # close(): how long to wait for the forwarding threads once their sockets are shut
_CHUNK = 1 << 16


class LocalForward:
    """Accepts on 127.0.0.1:`local_port` and pipes each connection through a direct-tcpip channel.

    `transport` is a connected paramiko Transport. Use as a context manager or call close().
    """

    def __init__(self, transport: Any, start_port: int, remote_port: int, remote_host: str = "127.0.0.1"):
        self._transport = transport
        self._remote = (remote_host, remote_port)
        listener = bind_first_free(start_port, 100)
        if listener is None:
            raise RuntimeFailure(
                f"no free local port in {start_port}..{start_port + 99}", "pass another --port"
            )
        listener.listen(16)
        self._listener = listener
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: list[Any] = []  # sockets and channels of live connections, shut on close()
        self._threads: list[threading.Thread] = []
        self._start(self._accept_loop, f"forward-{self.local_port}")

    # --- life cycle ---------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            endpoints, threads = list(self._open), list(self._threads)
        for e in endpoints:
            with contextlib.suppress(Exception):
                e.close()
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=CLOSE_WAIT_S / max(1, len(threads)))

    def __enter__(self) -> LocalForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- threads ------------------------------------------------------------------------------
    def _start(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._listener.accept()
            except OSError:  # the listener was closed
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                chan = self._transport.open_channel("direct-tcpip", self._remote, peer, timeout=10.0)
            except Exception:  # SSH gone or the remote port refused: drop this connection only
                conn.close()
                continue
            with self._lock:
                self._open += [conn, chan]
            self._start(self._pipe, f"forward-{self.local_port}-{peer[1]}", conn, chan)

    def _pipe(self, conn: socket.socket, chan: Any) -> None:
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([conn, chan], [], [], 0.5)
                if conn in ready:
                    data = conn.recv(_CHUNK)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in ready:
                    data = chan.recv(_CHUNK)
                    if not data:
                        break
                    conn.sendall(data)
        except (OSError, EOFError, ValueError):  # a side closed under us (close() or the peer)
            pass
        finally:
            for e in (chan, conn):
                with contextlib.suppress(Exception):
                    e.close()
            with self._lock:
                self._open = [e for e in self._open if e is not conn and e is not chan]
