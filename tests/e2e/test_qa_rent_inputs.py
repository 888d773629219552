"""Bad renting input a user actually types (QA, a user renting by the hour): each exits 2 with the fix
before anything is rented, and the API key never shows. Against the FAKE Prime API
(tests/fixtures/fake_prime.py); nothing here reaches a pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.launch_support import PYTHON, invoke, isolate
from tests.e2e.prime_support import posts

pytestmark = [pytest.mark.e2e]

CPU1_YAML = Path(__file__).resolve().parents[1] / "fixtures" / "cpu1.yaml"
UP = ("up", "--provision", "prime", "--gpu-type", "CPU_NODE", "--python", PYTHON, "--set", "train.steps=4")


def test_bad_renting_input_exits_2_before_a_pod_is_rented(fake_prime, tmux_server, tmp_path, monkeypatch):
    home = isolate(monkeypatch, tmp_path, tmux_server)
    # A wait of 0 s (or less) rented the pod, then gave up on it at once: billed for nothing.
    for args in (("up", *UP[1:], "--ready-timeout", "0"), ("pods", "create", "--gpu-type", "CPU_NODE",
                                                          "--ready-timeout", "-5")):  # fmt: skip
        res = invoke(*args)
        assert res.exit_code == 2 and "--ready-timeout" in res.output, res.output
    # `up --provision --resume` rented a fresh pod, which holds no run dir, and failed there.
    res = invoke(*UP, "--resume", "--name", "r1")
    assert res.exit_code == 2 and "nothing to resume" in res.output, res.output
    assert "nsa-launch restart --run r1" in res.output and "nsa-launch watch --run r1" in res.output
    assert "nsa-launch restart --run r1 --host NEW" in res.output  # a run whose pod was terminated
    # A --disk under the profile's expect.min_free_disk_gb rented a pod that the preflight then refused.
    profile = tmp_path / "big.yaml"
    profile.write_text(CPU1_YAML.read_text().replace("min_free_disk_gb: 1", "min_free_disk_gb: 100"))
    res = invoke(*UP, "--profile", str(profile), "--disk", "60")
    assert res.exit_code == 2 and "--disk 60 GB is less than profile cpu1's" in res.output, res.output
    assert "min_free_disk_gb (100 GB)" in res.output and "--disk above 100" in res.output
    assert posts(fake_prime) == 0 and not fake_prime.pods and not (home / "pods").exists()
    # A wrong key is named by where it came from, never by its value.
    monkeypatch.setenv("PRIME_API_KEY", "pk-users-own-secret-123")
    res = invoke(*UP)
    assert res.exit_code == 2 and "PRIME_API_KEY was rejected" in res.output, res.output
    assert "pk-users-own-secret-123" not in res.output
    assert posts(fake_prime) == 0 and not fake_prime.pods
