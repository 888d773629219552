"""The bash wrapper tmux runs for a run: exports, torchrun tee'd to train.log with pipefail, exit code.

Owns the wrapper's text (`launch.sh` in the run dir) and the one-shot secrets file it sources and
deletes (`.launch.secrets`, mode 0600), so secrets never appear in a command line, the manifest or
the wrapper. Every value is shlex-quoted. It must not start anything (start.py does).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from launcher.host.procs import TAG

WRAPPER = "launch.sh"
SECRETS = ".launch.secrets"


def wrapper_script(req: dict[str, Any]) -> str:
    """The bash wrapper tmux runs: exports, torchrun tee'd with pipefail, the true exit code."""
    q = shlex.quote
    rd = req["run_dir"]
    log, code = f"{rd}/train.log", f"{rd}/exit_code"
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by nsa-launch for run {req['run']!r}; tmux runs it as `bash {WRAPPER} [--resume]`.",
        "set -o pipefail",
        f"cd -- {q(req['workdir'])} || exit 97",
    ]
    env = dict(req.get("env", {}))
    env.update({"PYTHONUNBUFFERED": "1", "NSA_RUN_ID": req["run"], TAG: rd, "PYTHONPATH": req["workdir"]})
    lines += [f"export {k}={q(v)}" for k, v in sorted(env.items())]
    lines += [
        f"if [ -f {q(rd + '/' + SECRETS)} ]; then . {q(rd + '/' + SECRETS)}; rm -f -- {q(rd + '/' + SECRETS)}; fi",
        f'printf \'%s\\n\' "[nsa-launch] $(date -u +%Y-%m-%dT%H:%M:%SZ) start: "{q(shlex.join(req["argv"]))}" $*"'
        f" >> {q(log)}",
        f'{shlex.join(req["argv"])} "$@" 2>&1 | tee -a -- {q(log)}',
        "ec=${PIPESTATUS[0]}",
        f"printf '%s\\n' \"$ec\" > {q(code + '.tmp')} && mv -f -- {q(code + '.tmp')} {q(code)}",
        f"printf '%s\\n' \"[nsa-launch] torchrun exited with $ec\" >> {q(log)}",
        'exit "$ec"',
        "",
    ]
    return "\n".join(lines)


def write_secrets(run_dir: Path, secrets: dict[str, str]) -> None:
    """The exports the wrapper sources once and deletes; created 0600 before any byte is written."""
    fd = os.open(run_dir / SECRETS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in secrets.items())
