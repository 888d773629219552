"""`up --provision prime` and `pods` against the FAKE Prime API: bad input exits 2 or 1 with the fix
and leaves no pod; a pod whose SSH refuses our key is terminated by `up` (nothing left billing);
`pods create / ls / down` round-trip with a real sshd per pod."""

from __future__ import annotations

import json

import pytest

from launcher.ssh.hosts import parse_target
from launcher.ssh.transport import open_transport
from tests.e2e.launch_support import PYTHON, invoke, isolate
from tests.e2e.prime_support import listening

pytestmark = [pytest.mark.e2e]

UP = ("up", "--provision", "prime", "--python", PYTHON, "--set", "train.steps=4")


def _posts(api) -> int:
    return sum(1 for m, p in api.requests if m == "POST")


def test_missing_and_rejected_api_key(fake_prime, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    monkeypatch.delenv("PRIME_API_KEY")
    res = invoke(*UP, "--gpu-type", "CPU_NODE")
    assert res.exit_code == 2 and "PRIME_API_KEY is not set" in res.output and "fix:" in res.output
    monkeypatch.setenv("PRIME_API_KEY", "wrong-key")
    res = invoke(*UP, "--gpu-type", "CPU_NODE")
    assert res.exit_code == 2 and "PRIME_API_KEY was rejected" in res.output and "HTTP 401" in res.output
    assert _posts(fake_prime) == 0 and not fake_prime.pods


def test_unknown_gpu_type_no_stock_quota(fake_prime, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    res = invoke(*UP, "--gpu-type", "B300_NOPE")
    assert res.exit_code == 2 and "not a Prime Intellect GPU type" in res.output and "A100_80GB" in res.output
    res = invoke(*UP)  # the cpu profile names no GPU: nothing to rent by default
    assert res.exit_code == 2 and "pass --gpu-type" in res.output
    fake_prime.out_of_stock = True
    res = invoke(*UP, "--gpu-type", "CPU_NODE")
    assert res.exit_code == 1 and "in stock" in res.output and "fix:" in res.output
    assert _posts(fake_prime) == 0
    fake_prime.out_of_stock, fake_prime.quota_error = False, True
    res = invoke(*UP, "--gpu-type", "CPU_NODE")
    assert res.exit_code == 1 and "quota" in res.output and "billing" in res.output
    assert not fake_prime.pods  # the POST was refused: no pod exists
    assert not list((tmp_path / "nsa-launch-home").glob("runs/*.json"))


def test_pod_refusing_our_key_is_terminated(fake_prime, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    fake_prime.reject_pod_key = True
    res = invoke(*UP, "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config))
    assert res.exit_code == 2, res.output
    assert "authentication" in res.output and "terminating pod" in res.output
    assert not fake_prime.pods and ("DELETE" in {m for m, _ in fake_prime.requests})
    # the default offer is on-demand secure cloud, though the fake sells cheaper spot and community ones
    assert "from datacrunch eu_north/FIN-01, secure cloud, on-demand, $0.20/h" in res.output
    assert fake_prime.bodies[-1]["provider"] == {"type": "datacrunch"}
    assert (
        fake_prime.bodies[-1]["pod"]["name"].startswith("nsa-")
        and "_" not in fake_prime.bodies[-1]["pod"]["name"]
    )


def test_pods_create_ls_down(fake_prime, tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    res = invoke("pods", "create", "--gpu-type", "CPU_NODE", "--ssh-config", str(fake_prime.ssh_config))
    assert res.exit_code == 0, res.output
    (pod_id,) = fake_prime.pods
    port = fake_prime.pods[pod_id].server.port
    assert res.stdout.strip().endswith(f"-p {port}") and listening(port)
    # Its host key is recorded, so a later `up --host` to it connects with strict checking and no
    # --accept-new-host-key (it used to meet an unknown host).
    assert "recorded the host key of" in res.output and f"]:{port} " in fake_prime.known_hosts.read_text()
    t = open_transport(parse_target(res.stdout.strip().splitlines()[-1], str(fake_prime.ssh_config)))
    try:
        assert t.run("echo ok", timeout=30).stdout.strip() == "ok"
    finally:
        t.close()
    rows = json.loads(invoke("pods", "ls", "--json").stdout)
    assert [r["id"] for r in rows] == [pod_id] and rows[0]["status"] == "ACTIVE"
    assert rows[0]["price_hr"] == pytest.approx(0.2) and rows[0]["cost_usd"] is not None
    res = invoke("pods", "down", pod_id, "--yes")
    assert res.exit_code == 0 and f"terminated pod {pod_id}" in res.output
    assert json.loads(invoke("pods", "ls", "--json").stdout) == [] and not listening(port)
    assert f"]:{port} " not in fake_prime.known_hosts.read_text()  # the next pod on that port has a new key
