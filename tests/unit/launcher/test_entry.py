"""The `nsa-launch` console script (launcher/entry.py): a Ctrl-C while the command root is still being
imported ends with one line and exit 130, not an import traceback."""

from __future__ import annotations

import subprocess
import sys

from tests.fixtures.interrupt import ctrl_c_while_importing

INTERRUPTED_IMPORT = ctrl_c_while_importing(
    "launcher.cli", 'sys.argv = ["nsa-launch", "--help"]\nfrom launcher.entry import main\nmain()'
)


def test_ctrl_c_during_the_command_roots_import_is_one_line_and_exit_130() -> None:
    p = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130, p
    assert p.stderr == "interrupted\n" and p.stdout == "", p


def test_the_entry_imports_nothing_before_the_command_root_and_runs_it() -> None:
    code = (
        "import sys; import launcher.entry; assert 'click' not in sys.modules, sorted(sys.modules);"
        "sys.argv = ['nsa-launch', '--version']; launcher.entry.main()"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "nsa-launch" in p.stdout, p
