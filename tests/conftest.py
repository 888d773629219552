"""Shared test fixtures: a real sshd on loopback, a private tmux server, and marker handling.

`sshd` and `tmux_server` start the real programs. Where one is missing, a test that needs it is
skipped with the install command as the reason, except in CI (CI=true), where a missing service is
a hard failure: CI must never go green by skipping the end-to-end half of the suite.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.sshd import SSHDUnavailable, SSHServer, free_port
from tests.fixtures.tmux import TmuxUnavailable, private_tmux_server

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# In a pytest-xdist worker (scripts/test.sh runs two), one torch intra-op thread: torch's default of
# one per core puts two OpenMP teams on the same cores, and a team whose thread is descheduled makes
# every parallel op wait. On a busy 2-core VM a gradcheck of tiny tensors took 122 s with two threads
# and 7-12 s with one (bench/RESULTS.md "The test suite in two workers"). Set before any test imports
# torch; subprocesses that tests start inherit it, as torchrun's workers already get 1. A serial run
# keeps the default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# Triton's interpreter for every test process, set before any test module is collected: `@triton.jit`
# decides when a kernel module is imported whether it builds an interpreted function, by reading
# TRITON_INTERPRET then, and test modules outside tests/unit/attention/triton/ import kernel modules
# at collection too (the cost model's tests read the kernels' `_config`). Set any later, a kernel module
# imported first by such a module stays compiled-only, and every interpreter test of that process fails
# with "0 active drivers". It changes nothing else: the `auto` backend picks eager on CPU either way,
# and tests that need a process without it (gpucheck, the triton backend's ValueError on CPU, the
# compile test) start a subprocess without it.
os.environ["TRITON_INTERPRET"] = "1"


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but a required service is missing: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHServer]:
    """A real OpenSSH server on 127.0.0.1 with throwaway keys; see tests/fixtures/sshd.py."""
    tmp = Path(tempfile.mkdtemp(prefix="nsa-sshd-"))
    server = SSHServer(tmpdir=tmp, port=free_port())
    try:
        server.setup()
    except SSHDUnavailable as e:
        _missing(str(e))
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # its keys, config and log: ~224 dirs had piled up in /tmp


@pytest.fixture
def tmux_server():
    """A real tmux server on a private socket, killed at teardown."""
    try:
        with private_tmux_server() as server:
            yield server
    except TmuxUnavailable as e:
        _missing(str(e))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if it.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
        for it in gpu_items:
            it.add_marker(skip)
