"""The GPU suite's training section (issue 23, item 10): which runs it makes, and that every run's
command line is one nsa-train accepts. The runs themselves need CUDA; their `--set` lists are checked
here by nsa-train's own `--check`, so a GPU's minutes are not spent finding a bad key."""

from __future__ import annotations

import itertools

import pytest

from nsa.attention.gpusuite.checks import Plan
from nsa.attention.gpusuite.gpu import TRAIN_CONFIG, train_runs
from nsa.train.cli import main

FULL = train_runs(Plan.for_mode("full"))
QUICK = train_runs(Plan.for_mode("quick"))


def _key(r: dict) -> tuple:
    return (r["attention"], r["activation_checkpointing"], r["compile"], r["seq_len"])


def test_full_mode_runs_dense_and_nsa_x_checkpointing_x_compile_at_2k_and_8k() -> None:
    want = set(itertools.product(("dense", "nsa"), ("none", "full"), (False, True), (2048, 8192)))
    assert [_key(r) for r in FULL] and set(map(_key, FULL)) == want and len(FULL) == len(want)
    assert len({r["name"] for r in FULL}) == len(FULL)  # one run dir and log each


def test_quick_mode_keeps_the_shipped_and_the_old_setting_at_2k() -> None:
    want = {(a, ac, c, 2048) for a in ("dense", "nsa") for ac, c in (("none", True), ("full", False))}
    assert set(map(_key, QUICK)) == want and len(QUICK) == 4


@pytest.mark.parametrize("run", FULL, ids=[r["name"] for r in FULL])
def test_every_run_is_a_valid_nsa_train_command_line(run: dict, capsys, monkeypatch) -> None:
    for k in ("CONFIG", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    argv = ["--config", str(TRAIN_CONFIG), "--check"]
    for s in run["sets"]:
        argv += ["--set", s]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    for line in (
        f"attention: {run['attention']}",
        f"activation_checkpointing: {run['activation_checkpointing']}",
        f"compile: {str(run['compile']).lower()}",
        f"seq_len: {run['seq_len']}",
    ):
        assert line in out, line
