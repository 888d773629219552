"""A pod terminated outside nsa-launch (Prime's web app, `prime pods terminate`), as a user renting by the
hour meets it (QA): the ledger kept it live, so `pods ls` and `status` showed its cost growing forever.
When nsa-launch asks the API about a pod it holds (`pods ls`, `pods down`, a provisioned run's status)
and the API says TERMINATED, or 404 for its id (a terminated pod leaves /pods/ for /pods/history in
the `prime` CLI's client), the ledger ends it at the time it was seen gone, its host key is forgotten,
and it is said once. A STOPPED pod is not gone (it may still bill). The API down or no key: status
shows the ledger's cost as before, without waiting. The FAKE Prime API (tests/fixtures/fake_prime.py);
the pods are the fake's listed pods with no sshd behind them, in this machine's ledger."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.providers import pods
from launcher.providers.pods import PodRecord, load_pod, save_pod


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from tests.fixtures.fake_prime import fake_prime_env

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(pods, "_checked", {})
    with fake_prime_env(monkeypatch, tmp_path) as api:
        yield api


def _ours(api, run: str, port: int, status: str = "ACTIVE") -> str:
    """A pod of the account, in this machine's ledger as `up --provision` records one (an hour old, at
    $1.20/h), with its host key in the known_hosts of the ssh config it was reached with."""
    pod_id = api.add_foreign_pod(f"nsa-{run}", status=status)
    api.pods[pod_id].foreign = False
    save_pod(PodRecord(id=pod_id, run=run, gpu_type="A100_80GB", gpu_count=1, price_hr=1.2,
                       created=time.time() - 3600, ssh=[f"root@127.0.0.1 -p {port}"],
                       ssh_config=str(api.ssh_config), name=f"nsa-{run}"))  # fmt: skip
    with api.known_hosts.open("a") as f:
        f.write(_key_line(api, port) + "\n")
    return pod_id


def _key_line(api, port: int) -> str:
    """A known_hosts line for 127.0.0.1:port (any valid key: the account key's public half)."""
    kind, blob = api.account_key.with_suffix(".pub").read_text().split()[:2]
    return f"[127.0.0.1]:{port} {kind} {blob}"


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_pods_ls_ends_the_pods_terminated_elsewhere_once_and_keeps_a_stopped_one(fake):
    ended = _ours(fake, "ra", 40001)
    deleted = _ours(fake, "rb", 40002)
    stopped = _ours(fake, "rc", 40003)
    fake.pods[ended].status = "TERMINATED"  # in the web app: still listed, TERMINATED
    assert fake.delete(deleted)  # or gone from the API altogether: GET /pods/{id} is a 404
    fake.pods[stopped].status = "STOPPED"  # stopped, not terminated: it may still bill
    before = time.time()
    res = _run("pods", "ls")
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    for pod_id, run, why in ((ended, "ra", "the API says TERMINATED"),
                             (deleted, "rb", "the API no longer knows it (HTTP 404)")):  # fmt: skip
        assert (
            f"pod {pod_id} (run {run}) was terminated outside nsa-launch ({why}): the ledger ends it at"
            in said
        )
        rec = load_pod(pod_id)
        assert rec is not None and rec.terminated is not None and before <= rec.terminated <= time.time()
        assert rec.cost() == pytest.approx(1.2, rel=0.01)  # an hour at $1.20/h, no more
    assert "it bills no more" in said and stopped not in said.split("terminated outside")[-1]
    assert load_pod(stopped).terminated is None  # type: ignore[union-attr]
    # the ended pods' host keys are forgotten (their address goes to the next pod), the stopped one's kept
    assert fake.known_hosts.read_text().splitlines() == [_key_line(fake, 40003)]
    # said once: the next `pods ls` asks nothing of them and says nothing
    res = _run("pods", "ls", "--json")
    assert res.exit_code == 0 and "terminated outside" not in res.output, res.output
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert rows[ended]["cost_usd"] == pytest.approx(1.2, rel=0.01) and deleted not in rows


def test_pods_down_of_a_pod_gone_elsewhere_says_so_and_deletes_nothing(fake):
    pod_id = _ours(fake, "rd", 40004)
    assert fake.delete(pod_id)
    res = _run("pods", "down", "rd", "--yes")
    assert res.exit_code == 0, res.output
    assert f"pod {pod_id} (run rd) was terminated outside nsa-launch" in " ".join(res.output.split())
    assert "already terminated" not in res.output  # said once, not twice
    assert not any(m == "DELETE" for m, _p in fake.requests) and load_pod(pod_id).terminated  # type: ignore[union-attr]


def test_a_runs_cost_stops_at_the_sight_of_its_pod_gone_and_asks_once_a_while(fake, monkeypatch):
    pod_id = _ours(fake, "re", 40005)
    gets = lambda: sum(1 for m, p in fake.requests if m == "GET" and p.endswith(pod_id))  # noqa: E731
    assert pods.run_cost("re")["gone"] == [] and gets() == 1  # type: ignore[index]
    assert pods.run_cost("re")["gone"] == [] and gets() == 1  # type: ignore[index]  # within CHECK_EVERY_S
    monkeypatch.setattr(pods, "_checked", {})
    assert fake.delete(pod_id)
    (line,) = pods.run_cost("re")["gone"]  # type: ignore[index]
    assert f"pod {pod_id} (run re) was terminated outside nsa-launch" in line, line
    cost = pods.run_cost("re")["cost_usd"]  # type: ignore[index]
    time.sleep(0.05)
    monkeypatch.setattr(pods, "_checked", {})
    again = pods.run_cost("re")
    assert again["cost_usd"] == cost and again["gone"] == [] and again["terminated"], again  # type: ignore[index]


def test_status_with_the_api_down_or_no_key_shows_the_ledgers_cost_without_waiting(fake, monkeypatch):
    from tests.fixtures.sshd import free_port

    pod_id = _ours(fake, "rf", 40006)
    monkeypatch.setenv("PRIME_API_BASE_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    t0 = time.monotonic()
    res = pods.run_cost("rf")
    assert res["gone"] == [] and res["cost_usd"] > 1.19 and time.monotonic() - t0 < 3, res  # type: ignore[index]
    monkeypatch.setattr(pods, "_checked", {})
    monkeypatch.delenv("PRIME_API_KEY")
    assert pods.run_cost("rf")["gone"] == []  # type: ignore[index]
    assert load_pod(pod_id).terminated is None  # type: ignore[union-attr]


def test_down_when_done_of_a_run_lost_with_its_pod_terminated_elsewhere_says_so_and_pulls_nothing(fake):
    """`up --down-when-done` whose pod is terminated in the web app mid-run: the run is lost; the pull
    failed and `up` shouted `POD ... IS STILL BILLING` for a pod that was gone."""
    from types import SimpleNamespace

    from launcher.cli.up import _down_when_done
    from launcher.providers.prime import PrimeClient

    pod_id = _ours(fake, "rg", 40007)
    pod = load_pod(pod_id)
    assert fake.delete(pod_id)
    said: list[str] = []
    # a run record with no nodes: a pull would fail on it, so none may be tried
    _down_when_done(SimpleNamespace(say=said.append), PrimeClient(), pod, SimpleNamespace(run="rg"),
                    {"state": "lost"})  # fmt: skip
    text = " ".join(said)
    assert f"pod {pod_id} (run rg) was terminated outside nsa-launch" in text, said
    assert (
        said[-1]
        == f"run rg lost with pod {pod_id}, terminated outside nsa-launch: nothing to pull or terminate"
    )
    assert "STILL BILLING" not in text and pod.terminated and load_pod(pod_id).terminated  # type: ignore[union-attr]
    assert not any(m == "DELETE" for m, _p in fake.requests)
