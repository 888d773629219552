"""The Prime Intellect client against the FAKE API rebuilt from the real client and schema
(tests/fixtures/fake_prime.py): exact paths and redirects, a body the schema accepts, key/team/base URL
from env then ~/.prime/config.json, paging, honest offers, fail-fast pod states with the API's words,
hints per HTTP status. No sshd: pods that would come up are sent elsewhere by the fake's `next_fate`."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from launcher.core.errors import LaunchError
from launcher.providers.prime import PrimeAPIError, PrimeClient, http_error, load_config, pod_name
from tests.e2e.launch_support import invoke
from tests.e2e.prime_support import ledger, posts, write_prime_config
from tests.fixtures.fake_prime import Fate

pytestmark = [pytest.mark.e2e]
GPU = ("--gpu-type", "CPU_NODE")


@pytest.fixture
def home(fake_prime, tmp_path, monkeypatch):
    monkeypatch.setattr("launcher.providers.pods.POLL_S", 0.2)
    fake_prime.start_delay_s = 0.1
    return tmp_path / "nsa-launch-home"  # the e2e conftest's NSA_LAUNCH_HOME


def create(api, *args: str):
    """`pods create` with the fake's ssh config: a pod that does come up records its host key there,
    never in ~/.ssh/known_hosts."""
    return invoke("pods", "create", *GPU, "--ssh-config", str(api.ssh_config), *args)


def test_collections_redirect_and_the_client_follows_with_method_and_body(fake_prime, home):
    # the fake answers the unslashed collection with a 307, as the API's FastAPI app does
    req = urllib.request.Request(f"{fake_prime.url}/api/v1/pods", data=b"{}", method="POST")
    opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                              {"redirect_request": lambda *a, **k: None}))  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(req)
    assert e.value.code == 307 and e.value.headers["Location"].endswith("/api/v1/pods/")
    client = PrimeClient()
    offer = client.availability("CPU_NODE", 2)[0]
    fake_prime.next_fate = Fate("ERROR")  # no sshd needed
    body = {"pod": {"name": "nsa-redirected", "cloudId": offer.cloud_id, "gpuType": "CPU_NODE", "socket": "PCIe",
                    "gpuCount": 2}, "provider": {"type": offer.provider}}  # fmt: skip
    pod = client._request("POST", "/pods", body=body)  # the unslashed path: followed, not refused
    assert pod["name"] == "nsa-redirected" and pod["id"] in fake_prime.pods
    assert fake_prime.requests[-2:] == [("POST", "/api/v1/pods"), ("POST", "/api/v1/pods/")]
    assert fake_prime.bodies[-1] == body  # the same body after the redirect
    assert client.get_pod(pod["id"]).status in ("PROVISIONING", "PENDING", "ERROR")


def test_the_create_body_is_one_the_schema_takes(fake_prime, home, monkeypatch):
    monkeypatch.setenv("PRIME_TEAM_ID", "team-fake")
    fake_prime.next_fate = Fate("ERROR", failure="no")
    res = create(fake_prime, "--name", "my_run.v2")
    assert res.exit_code == 1, res.output
    (body,) = fake_prime.bodies
    pod = body["pod"]
    assert pod["name"] == "nsa-my-run-v2" and pod_name("nsa-a_b") == "nsa-a-b"  # letters, digits, dashes
    assert None not in (pod.get("image"), pod["socket"]) and body["provider"] == {"type": "datacrunch"}
    assert body["team"] == {"teamId": "team-fake"}  # the configured team goes along
    assert pod["security"] == "secure_cloud" and fake_prime.requests.count(("POST", "/api/v1/pods/")) == 1
    # the fake refuses what the old client sent: null image/socket, an empty provider, `_` in the name
    with pytest.raises(PrimeAPIError) as e:
        PrimeClient()._request("POST", "/pods/", body={"pod": {**pod, "name": "nsa-a_b", "image": None,
                                                               "socket": None, "bogus": 1}, "provider": {}})  # fmt: skip
    msg = e.value.message
    assert e.value.status == 422 and e.value.exit_code == 2
    for field in ("pod.name", "pod.image", "pod.socket", "pod.bogus", "provider.type"):
        assert field in msg, msg
    assert "Extra inputs are not permitted" in msg and "[{" not in msg  # quoted, not a raw Python list
    assert "--name" in e.value.fix and "--image" in e.value.fix and "--provider" in e.value.fix


def test_key_team_and_base_url_from_prime_config_json(fake_prime, home, tmp_path, monkeypatch):
    cfg = tmp_path / "dot-prime" / "config.json"  # where the fixture points ~/.prime/config.json
    write_prime_config(
        cfg, api_key="fake-prime-key", team_id="team-file", base_url=fake_prime.url + "/api/v1/"
    )
    monkeypatch.delenv("PRIME_API_KEY")
    monkeypatch.delenv("PRIME_API_BASE_URL")
    fake_prime.add_foreign_pod()
    res = invoke("pods", "ls", "--json")  # only the file: key and base URL (its /api/v1 suffix dropped)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [] and "--all" in res.output  # the account's foreign pod is hidden
    assert len(json.loads(invoke("pods", "ls", "--all", "--json").stdout)) == 1
    c = load_config()
    assert (c.api_key, c.team_id, c.base_url) == ("fake-prime-key", "team-file", fake_prime.url)
    # the environment wins over the file, field by field (core/config.py)
    monkeypatch.setenv("PRIME_API_KEY", "env-key")
    monkeypatch.setenv("PRIME_TEAM_ID", "team-env")
    c = load_config()
    assert (c.api_key, c.key_source, c.team_id) == ("env-key", "PRIME_API_KEY", "team-env")
    res = invoke("pods", "ls")
    assert res.exit_code == 2 and "PRIME_API_KEY was rejected" in res.output
    monkeypatch.delenv("PRIME_API_KEY")
    fake_prime.next_fate = Fate("ERROR")
    res = create(fake_prime)  # team-env is not the user's: 403 with the team named
    assert res.exit_code == 2 and "HTTP 403" in res.output and "team-env (from PRIME_TEAM_ID)" in res.output
    assert "--team" in res.output and not fake_prime.pods.keys() - {
        p for p, v in fake_prime.pods.items() if v.foreign
    }
    cfg.write_text("{not json")
    res = invoke("pods", "ls")
    assert res.exit_code == 2 and str(cfg) in res.output and "prime login" in res.output


def test_lists_are_paged(fake_prime, home):
    fake_prime.page_cap = 1
    ids = {fake_prime.add_foreign_pod(f"other-{i}") for i in range(3)}
    client = PrimeClient()
    assert {p.id for p in client.list_pods()} == ids
    assert len(client.availability("CPU_NODE", 2)) == 3  # page by page
    assert [k["id"] for k in client.ssh_keys()] == ["sshkey-fake-1"]


def test_offers_default_to_on_demand_secure_and_options_are_checked(fake_prime, home):
    rows = json.loads(invoke("pods", "offers", *GPU, "--json").stdout)
    rent = [r for r in rows if r["choice"] == "rent"]
    assert len(rows) == 3 and len(rent) == 1
    assert rent[0]["security"] == "secure_cloud" and not rent[0]["is_spot"]
    assert rent[0]["price_hr"] > min(r["price_hr"] for r in rows)  # not the cheapest: that one is spot
    pick = {
        opt: next(
            r
            for r in json.loads(invoke("pods", "offers", *GPU, opt, "--json").stdout)
            if r["choice"] == "rent"
        )
        for opt in ("--spot", "--community")
    }
    assert pick["--spot"]["is_spot"] and pick["--community"]["security"] == "community_cloud"
    res = invoke("up", "--provision", "prime", *GPU, "--dry-run", "--spot", "--max-price", "0.1")
    assert (
        res.exit_code == 0
        and "would rent 2x CPU_NODE from hyperstack" in res.output
        and "nothing rented" in res.output
    )
    bad = {
        ("--region", "mars"): "FIN-01",
        ("--provider", "acme"): "datacrunch",
        ("--image", "win95"): "cuda_12_4_pytorch_2_5",
        ("--disk", "10"): "50-1000 GB",
        ("--max-price", "0.01"): "cheapest is $0.08/h",
        ("--ssh-key-id", "nope"): "sshkey-fake-1 (laptop)",
        ("--region", "canada"): "spot (--spot)",  # only a spot offer there
    }
    for (opt, value), hint in bad.items():
        res = invoke("up", "--provision", "prime", *GPU, opt, value, "--python", "/usr/bin/python3")
        assert res.exit_code == 2 and hint in res.output and "fix:" in res.output, (opt, res.output)
    assert invoke("up", "--spot").exit_code == 2  # renting options without --provision
    assert posts(fake_prime) == 0 and not fake_prime.pods


def test_options_pass_through_to_the_create_body(fake_prime, home):
    fake_prime.next_fate = Fate("ERROR")
    res = create(fake_prime, "--community", "--region", "US-TX-3", "--image", "cuda_12_4_pytorch_2_5",
                 "--disk", "200", "--team", "team-fake", "--ssh-key-id", "sshkey-fake-1", "--max-price", "0.5")  # fmt: skip
    assert res.exit_code == 1, res.output
    (body,) = fake_prime.bodies
    pod = body["pod"]
    assert (pod["dataCenterId"], pod["image"], pod["diskSize"], pod["sshKeyId"], pod["maxPrice"]) == (
        "US-TX-3", "cuda_12_4_pytorch_2_5", 200, "sshkey-fake-1", 0.5)  # fmt: skip
    assert body["team"] == {"teamId": "team-fake"} and body["provider"] == {"type": "runpod"}
    (rec,) = ledger(home).values()
    assert rec["choice"]["community"] and rec["choice"]["disk"] == 200  # a replacement pod is rented alike


@pytest.mark.parametrize(
    "fate, words",
    [
        (
            Fate("ERROR", failure="host failed its GPU health check"),
            "is ERROR: host failed its GPU health check",
        ),
        (Fate("STOPPED"), "is STOPPED"),
        (Fate("DELETING"), "is DELETING"),
        (Fate("TERMINATED"), "is TERMINATED"),
        (
            Fate("ACTIVE", failure="pull of image timed out", install_error=True),
            "failed to install its image: pull",
        ),
        (Fate(None, unknown_s=30), "UNKNOWN to the API for 1 s"),
    ],
)
def test_a_pod_that_will_not_come_up_ends_the_wait_with_the_apis_words(
    fake_prime, home, monkeypatch, fate, words
):
    monkeypatch.setattr("launcher.providers.pods.UNKNOWN_GRACE_S", 1.0)
    fake_prime.next_fate = fate
    t0 = time.monotonic()
    res = create(fake_prime, "--ready-timeout", "60")
    assert res.exit_code == 1 and words in res.output, res.output
    assert time.monotonic() - t0 < 10  # one poll after the state shows, not the ready timeout
    assert not fake_prime.pods and ("DELETE" in {m for m, _ in fake_prime.requests})
    (rec,) = ledger(home).values()
    assert rec["terminated"] is not None and "terminated pod" in res.output and "(cost $" in res.output


def test_a_passing_api_error_while_waiting_is_retried(fake_prime, home):
    fake_prime.next_fate = Fate("ERROR", failure="no GPU left on the host")
    for _ in range(2):
        fake_prime.inject("GET", "/pods/*", 503, "Service Unavailable")
    res = create(fake_prime)
    assert res.exit_code == 1 and "is ERROR: no GPU left on the host" in res.output, res.output
    assert not fake_prime.injected and not fake_prime.pods


def test_http_status_hints_name_the_real_fix(fake_prime, home):
    cfg = load_config()
    hints = {
        401: "Pods permission",
        402: "dashboard/billing",
        403: "Pods read+write",
        405: "API root",
        409: "wait a minute and retry",
        429: "wait a minute, then retry",
    }
    for code, hint in hints.items():
        e = http_error("POST", "/pods/", code, '{"detail": "nope"}', cfg)
        assert hint in e.fix and f"HTTP {code}: nope" in e.message, (code, e.fix)
    assert "pods ls --all" in http_error("GET", "/pods/abc", 404, '{"detail": "Pod abc not found"}', cfg).fix
    assert "PRIME_API_BASE_URL" in http_error("GET", "/podz", 404, '{"detail": "Not Found"}', cfg).fix
    schema_shape = (
        '{"errors": [{"param": "pod.diskSize", "details": "too small"}]}'  # the schema's ErrorResponse
    )
    e = http_error("POST", "/pods/", 422, schema_shape, cfg)
    assert "pod.diskSize: too small" in e.message and "--disk" in e.fix
    # end to end: the API's own statuses through the client, then the CLI
    fake_prime.inject("GET", "/pods/", 429, "Too many requests")
    res = invoke("pods", "ls")
    assert res.exit_code == 1 and "Too many requests" in res.output and "wait a minute" in res.output
    with pytest.raises(LaunchError) as e:
        PrimeClient()._request("PUT", "/pods/")
    assert "HTTP 405" in e.value.message and "API root" in e.value.fix
