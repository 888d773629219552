"""exit_process, the way a rank of a multi-process nsa-train ends: it keeps what was printed, keeps
the exit code, and skips interpreter teardown (atexit handlers and finalisers do not run)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import atexit, logging, sys
    from nsa.train.dist import exit_process

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    atexit.register(lambda: print("atexit ran", flush=True))
    print("buffered line", end="")          # stdout is a pipe: block-buffered, not yet written
    sys.stderr.write("err text")
    logging.getLogger("probe").info("logged")
    exit_process(int(sys.argv[1]))
    print("after exit_process")
    """
)


@pytest.mark.parametrize("code", [0, 1, 3])
def test_exit_process_keeps_output_and_code_and_skips_teardown(code: int) -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no PYTHONUNBUFFERED: the flush must be exit_process's own
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(code)], capture_output=True, text=True, timeout=60, env=env
    )
    assert p.returncode == code, p.stderr
    assert p.stdout == "buffered line", p.stdout
    assert "err text" in p.stderr and "logged" in p.stderr
    assert "atexit ran" not in p.stdout
