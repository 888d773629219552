"""Free TCP ports on 127.0.0.1: used both locally (tunnel forwards) and on the host by the agent
(TensorBoard, rendezvous), so it is standard library only, like the agent itself."""

from __future__ import annotations

import socket


def bind_first_free(start: int, span: int) -> socket.socket | None:
    """A socket bound to the first port in [start, start + span) free on 127.0.0.1, or None.

    Keep the socket to own the port: choosing and binding are then one step, and no other process
    can take the port in between (see launcher/ssh/forward.py).
    """
    for port in range(start, min(start + span, 65536)):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
    return None


def first_free_port(start: int, span: int) -> int | None:
    """The first port in [start, start + span) that binds on 127.0.0.1 now, or None if all are busy.

    Only a hint: the port is free again when this returns, so whoever binds it later can lose it.
    """
    s = bind_first_free(start, span)
    if s is None:
        return None
    with s:
        return s.getsockname()[1]


def free_port(start: int, span: int = 200) -> int:
    """`first_free_port(start, span)`, else any free port the kernel picks (a hint, as above)."""
    port = first_free_port(start, span)
    if port is not None:
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
