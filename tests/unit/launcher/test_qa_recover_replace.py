"""A lost pod whose replacement fails (the new pod goes to ERROR), as a user asleep while `watch`
guards a days-long run meets it (the qa walk of 2026-11-27): the new pod is terminated, the run
record is put back, and `watch` keeps watching and tries again, each failed pod counted against
--max-replacements ("Pods to rent at most"); only a spent budget stops it. Real parts: the FAKE
Prime API (tests/fixtures/fake_prime.py: its pods are real sshds, `next_fate` sends one to ERROR),
the run's status over that sshd, the real mirror pull (rsync)."""

from __future__ import annotations

import sys

import pytest

from launcher.config.profiles import PROJECT_ROOT, load_profile
from launcher.core.errors import LaunchError
from launcher.run import registry
from launcher.run.control import fetch_status
from tests.fixtures.checkpoints import write_checkpoint as _ckpt

RUN = "qr1"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    from tests.fixtures.fake_prime import fake_prime_env

    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path / "home"))
    with fake_prime_env(monkeypatch, tmp_path) as api:
        yield api


def test_a_failed_replacement_is_said_counted_and_tried_again_until_the_budget_is_spent(fake, tmp_path):
    """Before: the first failed replacement ended `watch` (exit 1) with the run lost and nobody
    watching it, whatever --max-replacements said."""
    from launcher.providers.pods import provision
    from launcher.providers.prime import PrimeClient
    from launcher.recover.mirror import pull
    from launcher.recover.watcher import Watcher
    from launcher.run.recovery_status import recovery_status
    from tests.fixtures.fake_prime import Fate

    pod1, hosts = provision(PrimeClient(), load_profile("cpu"), "CPU_NODE", f"nsa-{RUN}", RUN, lambda _: None, 30,
                            str(fake.ssh_config))  # fmt: skip
    rd = tmp_path / "run"
    _ckpt(rd, 4, b"w4" * 1000)
    node = registry.NodeRecord(hosts[0], str(PROJECT_ROOT), sys.executable, str(rd))
    rec = registry.RunRecord(
        run=RUN, profile="cpu", created=1.0, nodes=[node], provider="prime", pod_id=pod1.id
    )
    registry.save(rec)
    assert pull(rec, lambda _: None)["checkpoint"] == "step-00000004"
    fake.lose(pod1.id)  # the pod's host dies; the API still lists it
    said: list[str] = []
    w = Watcher(
        RUN, said.append, who="nsa-launch watch", lost_after_s=0.0, max_replacements=2, ready_timeout=30
    )
    try:
        for attempt in (1, 2):
            fake.next_fate = Fate(status="ERROR", failure="host failed its health check")
            st = w.tick(fetch_status([w.refresh()])[0])
            assert st["state"] == "lost"
            assert list(fake.pods) == [pod1.id], "the failed pod must not be left billing"
            assert registry.load(RUN).pod_id == pod1.id and registry.load(RUN).host == rec.host
            assert recovery_status(RUN) is None
            line = next(s for s in reversed(said) if s.startswith(f"replacing the host of {RUN} failed"))
            assert f"(pod {attempt} of 2 --max-replacements): pod " in line, said
            assert "is ERROR: host failed its health check" in line, line
            assert line.endswith("watch tries again" if attempt == 1 else "no replacement left"), line
        with pytest.raises(
            LaunchError, match=f"run {RUN} lost its host 1 time; stopped replacing \\(2 replacement"
        ):
            w.tick(fetch_status([w.refresh()])[0])
        assert list(fake.pods) == [pod1.id]  # nothing rented past the budget
        assert len(w.failed) == 2 and w.replacements == [] and all(f["old_pod"] == pod1.id for f in w.failed)
    finally:
        w.close()
