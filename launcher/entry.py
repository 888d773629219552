"""The `nsa-launch` console script. It imports nothing but `sys` before the command root, so that a
Ctrl-C during the root's own imports (click and the app: ~0.2 s of a cold start, before
`LauncherGroup.invoke` catches interrupts) ends with one line and exit 130, not an import traceback."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # launcher.core.errors.EXIT_INTERRUPTED, not imported: that is what is guarded


def main() -> None:
    try:
        from launcher.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    cli_main()
