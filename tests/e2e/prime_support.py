"""What the provisioning tests check besides the FAKE Prime API (its fixture: tests/e2e/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def listening(port: int) -> bool:
    """Is anything listening on 127.0.0.1:port (read from /proc/net/tcp, state 0A)?"""
    hexport = f"{port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if cols[1].endswith(":" + hexport) and cols[3] == "0A":
                return True
    return False


def posts(api: Any) -> int:
    """POSTs the fake received (a redirected one counts twice, as the server sees it)."""
    return sum(1 for m, _p in api.requests if m == "POST")


def ledger(home: Path) -> dict[str, dict[str, Any]]:
    """nsa-launch's pod ledger under NSA_LAUNCH_HOME: {pod id: record}."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((home / "pods").glob("*.json"))}


def write_prime_config(path: Path, **fields: Any) -> Path:
    """A ~/.prime/config.json as `prime login` / `prime config` write it (core/config.py ConfigModel)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"api_key": "", "team_id": None, "base_url": "https://api.primeintellect.ai", **fields})
    )
    return path
