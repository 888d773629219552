"""An offer whose DEFAULT disk is under the profile's expect.min_free_disk_gb (QA, a user renting by the
hour): without --disk it is left out, naming the --disk that takes it, before anything is rented. Such
a pod was rented with the offer's default disk, then refused by the host's disk check after the rent
(billed, nothing run); only an explicit --disk was checked. The FAKE Prime API
(tests/fixtures/fake_prime.py: every offer's disk is min 50, default 100, max 1000 GB, as GpuAvailability's
disk.{minCount,defaultCount,maxCount}); no pod comes up, no sshd."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launcher.cli import cli


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from tests.fixtures.fake_prime import fake_prime_env

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    with fake_prime_env(monkeypatch, tmp_path) as api:
        yield api


def _profile(tmp_path, need_gb: float) -> str:
    path = tmp_path / f"disk{need_gb:g}.yaml"
    path.write_text(  # JSON is YAML
        json.dumps({"name": f"disk{need_gb:g}", "device": "cpu", "nodes": 1, "nproc_per_node": 1,
                    "config": "configs/tiny.yaml", "overrides": ["train.device=cpu"],
                    "expect": {"gpus": 0, "min_free_disk_gb": need_gb}})
    )  # fmt: skip
    return str(path)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_an_offer_whose_default_disk_is_under_the_profiles_need_is_not_rented(fake, tmp_path):
    prof = _profile(tmp_path, 150)
    every = ("--profile", prof, "--gpu-type", "CPU_NODE", "--spot", "--community")
    res = _run("pods", "create", *every)
    assert res.exit_code == 2, res.output
    assert not any(m == "POST" for m, _p in fake.requests) and not fake.pods, res.output
    assert "3 default disk 100 GB, under the profile's 150 GB (--disk 150 or more)" in res.output
    assert not (tmp_path / "home" / "pods").exists() or not list((tmp_path / "home" / "pods").iterdir())
    # `pods offers` (and `up --dry-run`) say the same per offer ...
    rows = json.loads(_run("pods", "offers", *every, "--json").stdout)
    assert [r["choice"] for r in rows] == [
        "default disk 100 GB, under the profile's 150 GB (--disk 150 or more)"
    ] * 3
    # ... and the --disk it names takes them, cheapest first, as before
    rows = json.loads(_run("pods", "offers", *every, "--disk", "150", "--json").stdout)
    assert [r["choice"] for r in rows] == ["rent", "ok", "ok"], rows
    # an offer that cannot hold the need at any size says so (no --disk helps: its maximum is 1000 GB)
    rows = json.loads(_run("pods", "offers", "--profile", _profile(tmp_path, 1500), *every[2:],
                           "--json").stdout)  # fmt: skip
    assert {r["choice"] for r in rows} == {"disk at most 1000 GB, under the profile's 1500 GB"}, rows
    # a need the default holds: taken without --disk, as it always was
    rows = json.loads(_run("pods", "offers", "--profile", _profile(tmp_path, 100), *every[2:],
                           "--json").stdout)  # fmt: skip
    assert rows[0]["choice"] == "rent", rows
    helptext = " ".join(_run("pods", "offers", "--help").output.split())
    assert "(default: the offer's; an offer whose default is under that is left out)" in helptext, helptext
