"""`nsa-launch dashboard` rejects bad options with exit 2 and a fix, before any screen is drawn."""

from __future__ import annotations

from click.testing import CliRunner

from launcher.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, ["dashboard", *args])


def test_run_and_all_exclude_each_other():
    r = _run("--run", "x", "--all")
    assert r.exit_code == 2 and "--run and --all" in r.output and "fix:" in r.output


def test_refresh_must_be_positive():
    for bad in ("0", "-1", "nan", "99999"):
        r = _run("--refresh", bad)
        assert r.exit_code == 2 and f"--refresh {float(bad)}" in r.output and "fix:" in r.output


def test_replay_of_a_dir_that_is_not_a_recording(tmp_path):
    r = _run("--replay", str(tmp_path))
    assert r.exit_code == 2 and "status.json" in r.output and str(tmp_path) in r.output


def test_help_lists_the_keys():
    r = _run("--help")
    assert r.exit_code == 0 and "k kill" in r.output and "q quit" in r.output


def test_unknown_run_exits_2_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    r = _run("--run", "no-such-run")
    assert r.exit_code == 2 and "no-such-run" in r.output and "fix:" in r.output
