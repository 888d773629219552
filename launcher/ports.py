"""Free TCP ports on 127.0.0.1: used both locally (tunnel forwards) and on the host by the agent
(TensorBoard, rendezvous), so it is standard library only, like the agent itself."""

from __future__ import annotations

import socket


def first_free_port(start: int, span: int) -> int | None:
    """The first port in [start, start + span) that binds on 127.0.0.1, or None if all are busy."""
    for port in range(start, start + span):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return None
