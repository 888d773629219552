"""`up --provision --down-when-done`'s end, the branches that keep the pod (no API call, no SSH): a run
stopped by `kill` and a failed run with --keep-failed keep their pod and say it bills on, with the
command that ends it; --keep-failed without --down-when-done is refused (exit 2), and --help names it.
The branches that pull and terminate: tests/e2e/test_qa_rent2_down.py (a basename of its own: pytest
imports both test dirs by basename)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.cli.up import _down_when_done
from launcher.providers.pods import PodRecord


class _Nothing:
    """A Prime client that must not be called: a kept pod is neither pulled nor terminated."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the pod was to be kept, but the client's {name} was used")


@pytest.mark.parametrize(
    ("state", "keep_failed", "why"),
    [("killed", False, "was stopped by `kill`"), ("failed", True, "failed (--keep-failed)"),
     ("lost", True, "lost (--keep-failed)")],
)  # fmt: skip
def test_a_killed_run_and_keep_failed_keep_the_pod_and_say_it_bills(state, keep_failed, why):
    said: list[str] = []
    pod = PodRecord(id="p1", run="r1", gpu_type="A100_80GB", gpu_count=1, price_hr=1.5,
                    created=time.time(), ssh=["root@h -p 22"])  # fmt: skip
    _down_when_done(SimpleNamespace(say=said.append), _Nothing(), pod, SimpleNamespace(run="r1"),
                    {"state": state}, keep_failed)  # fmt: skip
    assert said == [
        f"run r1 {why}: pod p1 kept, billing at $1.50/h; `nsa-launch pods down r1` pulls its newest "
        "checkpoint and terminates it"
    ]
    assert pod.terminated is None


def test_keep_failed_needs_down_when_done_and_help_says_what_it_keeps():
    res = CliRunner().invoke(cli, ["up", "--keep-failed"])
    assert res.exit_code == 2 and "--keep-failed goes with --down-when-done" in res.output, res.output
    res = CliRunner().invoke(cli, ["up", "--keep-failed", "--down-when-done"])
    assert res.exit_code == 2 and "--down-when-done need --provision prime" in res.output, res.output
    res = CliRunner().invoke(cli, ["up", "--help"], terminal_width=200)
    helptext = " ".join(res.output.split())
    assert "--keep-failed With --down-when-done: keep the pod of a run that failed" in helptext, helptext
    assert "A failed run's pod goes too (its logs are in the mirror)" in helptext
