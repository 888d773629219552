"""The all-reduce preflight (issue 14 section 5) on real torchrun + gloo: a good check reports its
bandwidth; a broken interface setting fails within the timeout and names the settings to try.

Run: .venv/bin/pytest tests/e2e/test_netcheck.py
"""

from __future__ import annotations

import sys

import pytest

from launcher.config.profiles import PROJECT_ROOT, load_profile
from launcher.core.errors import RuntimeFailure
from launcher.launch import netcheck
from launcher.ssh.hosts import HostSpec
from launcher.ssh.transport import LocalTransport

pytestmark = pytest.mark.e2e


def _check(env: dict[str, str], timeout: float = 60.0) -> dict:
    profile = load_profile("cpu")  # 2 workers, gloo
    t = LocalTransport(HostSpec(target="local", kind="local"))
    return netcheck.run_check([t], [sys.executable], [str(PROJECT_ROOT)], profile, env, mb=1, timeout=timeout)


def test_allreduce_preflight_reports_bandwidth_across_every_rank():
    r = _check({})
    assert r["ok"] and r["world_size"] == 2 and r["backend"] == "gloo"
    assert r["bytes"] == 1 << 20 and r["busbw_gbps"] > 0
    assert "across 2 ranks (gloo)" in netcheck.describe(r)


def test_a_broken_interface_fails_with_the_settings_to_try():
    with pytest.raises(RuntimeFailure) as e:
        _check({"GLOO_SOCKET_IFNAME": "nonexistent0"}, timeout=45.0)
    assert "all-reduce preflight" in e.value.message
    assert "NCCL_P2P_DISABLE=1" in e.value.fix and "GLOO_SOCKET_IFNAME" in e.value.fix
