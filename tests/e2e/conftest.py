"""End-to-end fixtures: no test uses the real ~/.nsa-launch or leaves an SSH master connection behind.

`nsa-launch status` and `logs`, and the rsync of `up`, share one OpenSSH master connection per host
across processes (launcher/ssh/openssh.py, ControlPersist), with sockets under NSA_LAUNCH_HOME. Every
e2e test gets its own NSA_LAUNCH_HOME (the same dir launch_support.isolate uses), and after the test
the masters of that registry are stopped with `ssh -O exit`. The fixture uses monkeypatch, so it is
torn down before the environment is restored and still sees the test's home.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.ssh.openssh import stop_masters


@pytest.fixture(autouse=True)
def _own_home_no_stray_ssh_masters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "nsa-launch-home"))
    yield
    stop_masters(Path(os.environ["NSA_LAUNCH_HOME"]))


@pytest.fixture
def fake_prime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The FAKE Prime Intellect API (tests/fixtures/fake_prime.py), named by PRIME_API_KEY/BASE_URL; the
    `prime` CLI's ~/.prime/config.json is a file of the test's own (absent until a test writes it).

    An in-process wait for a pod polls every 0.2 s, not every POLL_S (2 s): the fake's pods are up
    after 0.5 s, so the default spent ~1.5 s idle per rented pod. Subprocesses keep the default."""
    from tests.fixtures.fake_prime import fake_prime_env

    monkeypatch.setattr("launcher.providers.pods.POLL_S", 0.2)
    with fake_prime_env(monkeypatch, tmp_path, start_delay_s=0.5) as api:
        yield api
