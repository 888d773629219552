"""nsa-train: a Ctrl-C while torch loads (before the run and its own SIGINT handling) ends with one
line and exit 143, as SIGTERM before the loop does, and removes the run dir that call made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The Ctrl-C lands while nsa.train.trainer (torch) is imported: an import hook raising KeyboardInterrupt
# there, as Python's SIGINT handler would (deterministic, unlike a timed signal).
CODE = """
import sys
class Interrupt:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "nsa.train.trainer":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt)
from nsa.train.cli import main
sys.exit(main(["--config", sys.argv[1], "--run-dir", sys.argv[2]]))
"""


def test_ctrl_c_while_torch_loads_is_one_line_exit_143_and_no_run_dir(tmp_path) -> None:
    run = tmp_path / "runs" / "new"
    p = subprocess.run(
        [sys.executable, "-c", CODE, str(ROOT / "configs" / "tiny.yaml"), str(run)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 143, p
    assert "Traceback" not in p.stderr and "interrupted (Ctrl-C) while loading torch" in p.stderr, p.stderr
    assert not run.exists()
