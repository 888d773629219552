"""End-to-end fixtures: every test leaves no SSH master connection behind.

`nsa-launch status` and `logs` share one OpenSSH master connection per host across processes
(launcher/openssh.py, ControlPersist). Tests point NSA_LAUNCH_HOME at a temp dir (launch_support.
isolate); after each test the masters of that registry are stopped with `ssh -O exit`. The fixture
uses monkeypatch so that it is torn down before the test's environment is restored.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from launcher.openssh import stop_masters


@pytest.fixture(autouse=True)
def _no_stray_ssh_masters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = os.environ.get("NSA_LAUNCH_HOME")
    yield
    home = os.environ.get("NSA_LAUNCH_HOME")
    if home and home != before:  # only the test's own registry, never a user's ~/.nsa-launch
        from pathlib import Path

        stop_masters(Path(home))
