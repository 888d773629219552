"""What the provisioning tests check besides the FAKE Prime API (its fixture: tests/e2e/conftest.py)."""

from __future__ import annotations


def listening(port: int) -> bool:
    """Is anything listening on 127.0.0.1:port (read from /proc/net/tcp, state 0A)?"""
    hexport = f"{port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1].endswith(":" + hexport) and cols[3] == "0A":
                return True
    return False
