"""A relative --workdir is resolved against the host's home by the preflight probe itself (issue 13,
item 8: `--workdir relwd` synced to ~/relwd but created the run dir at ~/relwd/relwd/runs/...).
The probe is run by the real bash with a chosen HOME."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launcher.launch.preflight import _preflight_script


@pytest.mark.parametrize(
    ("workdir", "want"),
    [
        ("relwd", "{home}/relwd"),
        ("a b/c", "{home}/a b/c"),
        ("~/x", "{home}/x"),
        ("~", "{home}"),
        ("/abs/w", "/abs/w"),
    ],
)
def test_workdir_is_absolute_on_the_host(tmp_path, workdir: str, want: str) -> None:
    home = tmp_path / "home dir"
    home.mkdir()
    script = _preflight_script(workdir, "r1", sys.executable)
    out = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path, timeout=60,
    ).stdout  # fmt: skip
    got = next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("workdir="))
    assert got == want.format(home=home)
