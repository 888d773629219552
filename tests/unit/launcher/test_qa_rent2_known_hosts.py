"""`up --host` with a UserKnownHostsFile that cannot be used (a directory; a path under a file, where a
new key would go): one clear error naming the file and the config, exit 2, nothing started. It was a
traceback (IsADirectoryError from paramiko); the renting path already said it (tests/e2e/
test_qa_rent_leaks.py). Nothing is contacted: the file is checked before the connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli


def _config(tmp_path: Path, known_hosts: Path) -> Path:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host qa2box\n  HostName 127.0.0.1\n  Port 1\n  User nobody\n  UserKnownHostsFile {known_hosts}\n"
    )
    return cfg


@pytest.mark.parametrize(
    ("where", "accept", "why"),
    [("dir", False, "Is a directory"), ("under-a-file", True, "File exists: {tmp}/afile")],
)
def test_an_unusable_known_hosts_is_one_clear_error_exit_2(tmp_path, monkeypatch, where, accept, why):
    home = tmp_path / "home"
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(home))
    if where == "dir":
        known = tmp_path / "known_hosts"
        known.mkdir()
    else:
        (tmp_path / "afile").write_text("")
        known = tmp_path / "afile" / "known_hosts"
    cfg = _config(tmp_path, known)
    args = ["up", "--host", "qa2box", "--ssh-config", str(cfg)] + ["--accept-new-host-key"] * accept
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    # which file, why, and the fix in the config that names it
    why = why.format(tmp=tmp_path)
    assert f"known_hosts {known} is unusable ({why})" in res.output, res.output
    assert f"make UserKnownHostsFile in {cfg} name a file you can read and write" in res.output
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # nothing started
