"""A rented pod this machine cannot log in to (no SSH key usable: none in the ssh config, the agent or
~/.ssh): the error says which of the account's keys the pod was given and how to point ssh at it,
exit 2, the pod terminated. Its fix said "check the host is up" (the pod was up) and the pod was
terminated only later, by `up`'s start failing. Against the FAKE Prime API (tests/fixtures/
fake_prime.py) and a real sshd per pod; no trainer starts."""

from __future__ import annotations

import pytest

from tests.e2e.launch_support import PYTHON, invoke
from tests.e2e.prime_support import ledger

pytestmark = [pytest.mark.e2e]


def test_no_usable_key_names_the_pods_key_and_how_to_point_ssh_at_it(fake_prime, tmp_path, monkeypatch):
    monkeypatch.setattr("launcher.providers.pods.POLL_S", 0.1)
    fake_prime.start_delay_s = 0.1
    home = tmp_path / "nsa-launch-home"
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no ~/.ssh/id_*
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent
    cfg = tmp_path / "ssh_config"  # the user's config without the account key's IdentityFile
    cfg.write_text(
        "".join(ln for ln in fake_prime.ssh_config.read_text().splitlines(True) if "IdentityFile" not in ln)
    )
    for cmd in (("pods", "create"), ("up", "--provision", "prime", "--python", PYTHON, "--name", "qa2key")):
        res = invoke(*cmd, "--gpu-type", "CPU_NODE", "--ssh-config", str(cfg))
        assert res.exit_code == 2, res.output
        out = " ".join(res.output.split())
        assert "check the host is up" not in out, out
        assert "no SSH key to log in with" in out, out
        assert "the pod was given your Prime account's SSH key laptop (sshkey-fake-1, the primary)" in out
        assert f"`IdentityFile ~/.ssh/THAT_KEY` in {cfg}" in out and "`ssh-add ~/.ssh/THAT_KEY`" in out, out
        assert not fake_prime.pods and all(r["terminated"] for r in ledger(home).values()), out
