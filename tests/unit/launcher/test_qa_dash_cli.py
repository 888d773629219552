"""QA of `nsa-launch dashboard`'s options as a new user types them (qadash, 2026-11-27): values that
`nsa-launch watch` takes mean the same here, and options that would be silently ignored are refused
with exit 2 before anything is drawn. Each case exits before the app is built: no screen, no host."""

from __future__ import annotations

from click.testing import CliRunner

from launcher.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, ["dashboard", *args])


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
