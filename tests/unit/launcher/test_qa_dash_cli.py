"""QA of `nsa-launch dashboard`'s options as a new user types them (qadash, 2026-11-27): values that
`nsa-launch watch` takes mean the same here, and options that would be silently ignored are refused
with exit 2 before anything is drawn. Each case exits before the app is built: no screen, no host."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from launcher.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, ["dashboard", *args])


@pytest.fixture(autouse=True)
def _no_screen(monkeypatch):
    """A tripwire, not a stand-in: an option these tests expect refused that got through would start
    the real app inside CliRunner (no terminal; it ran 5 minutes before failing)."""

    def started(*a, **k):
        raise AssertionError("the dashboard was started: the options were not refused")

    monkeypatch.setattr("launcher.dashboard.make_app", started)


def test_lost_after_zero_is_taken_as_watch_takes_it(tmp_path, monkeypatch):
    """`watch --lost-after 0` replaces a pod at the first failed check; the dashboard's watch is the
    same Watcher, so 0 means the same there (it was refused: exit 2 "must be in (0, 86400]")."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    r = _run("--run", "no-such-run", "--lost-after", "0")  # the unknown run stops it before the UI
    assert r.exit_code == 2, r.output
    assert "--lost-after" not in r.output and "unknown run 'no-such-run'" in r.output
    for bad in ("-1", "nan", "inf", "1e9"):
        r = _run("--lost-after", bad)
        assert r.exit_code == 2 and "--lost-after" in r.output and "fix:" in r.output, (bad, r.output)
        assert "[0, 86400]" in r.output, r.output


def test_options_that_would_be_ignored_are_refused(tmp_path, monkeypatch):
    """`--no-watch --pull-every 5` pulled nothing and `--replay DIR --lost-after 5` replaced nothing,
    silently: the user believed the dashboard kept the mirror. Exit 2 naming both options and the fix."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    rec = "tests/dashboard/recorded"
    for args, named in (
        (("--no-watch", "--pull-every", "5"), "--pull-every"),
        (("--no-watch", "--lost-after", "5"), "--lost-after"),
        (("--replay", rec, "--pull-every", "5"), "--pull-every"),
        (("--replay", rec, "--lost-after", "60"), "--lost-after"),
        (("--replay", rec, "--no-watch"), "--no-watch"),
    ):
        r = _run(*args)
        assert r.exit_code == 2, (args, r.output)
        assert named in r.output and ("--no-watch" in r.output or "--replay" in r.output), r.output
        assert "fix:" in r.output, r.output


def test_help_names_every_key_a_user_can_press():
    """`?` listed no Esc (clears the search), no Tab (which `z` needs) and no Ctrl+P (the palette with
    its Screenshot), though docs/dashboard.md's key table names them."""
    from pathlib import Path

    from launcher.dashboard.screens.help import KEYS
    from launcher.dashboard.screens.main import MainScreen

    listed = {k for keys, _ in KEYS for k in keys.replace("/", " ").split()}
    names = {"slash": "/", "question_mark": "?", "escape": "Esc"}
    bound = {names.get(b.key, b.key) for b in MainScreen.BINDINGS} - {"/"}
    wanted = bound | {"Tab", "Ctrl+P"}
    assert wanted <= listed | {"/"}, sorted(wanted - listed)
    doc = (Path(__file__).resolve().parents[3] / "docs" / "dashboard.md").read_text()
    for key in ("Tab", "Ctrl+P", "Esc"):
        assert key in doc
