"""nsa-train: a Ctrl-C while torch loads (before the run and its own SIGINT handling) ends with one
line and exit 143, as SIGTERM before the loop does, and removes the run dir that call made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.interrupt import ctrl_c_while_importing

ROOT = Path(__file__).resolve().parents[3]
CODE = ctrl_c_while_importing(
    "nsa.train.trainer",
    'from nsa.train.cli import main\nsys.exit(main(["--config", sys.argv[1], "--run-dir", sys.argv[2]]))',
)


def test_ctrl_c_while_torch_loads_is_one_line_exit_143_and_no_run_dir(tmp_path) -> None:
    run = tmp_path / "runs" / "new"
    p = subprocess.run(
        [sys.executable, "-c", CODE, str(ROOT / "configs" / "tiny.yaml"), str(run)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 143, p
    assert "Traceback" not in p.stderr and "interrupted (Ctrl-C) while loading torch" in p.stderr, p.stderr
    assert not run.exists()
