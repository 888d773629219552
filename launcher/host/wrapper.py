"""The bash wrapper tmux runs for a run: exports, torchrun tee'd to train.log with pipefail, exit code.

Owns the wrapper's text (`launch.sh` in the run dir) and the one-shot secrets file it sources and
deletes (`.launch.secrets`, mode 0600), so secrets never appear in a command line, the manifest or
the wrapper. Every value is shlex-quoted. The wrapper re-executes itself once under `env -i` with
BASE_ENV only, so the workers see exactly the validated env plus that base, never the environment of
the tmux server (a user's shell, an earlier run). With `max_restarts` > 0 it runs torchrun in a
loop: after a failure launcher/host/restarts.py decides (and records) whether to run it again with
--resume. It keeps a small reserve file so that the exit
code can be written even on a full disk. It must not start anything (start.py does).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from launcher.host.procs import TAG

WRAPPER = "launch.sh"
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
SECRETS = ".launch.secrets"
RESERVE = ".exit_code.reserve"  # 1 MiB, deleted before exit_code is written: room on a full disk
# What the workers inherit from the host besides the validated env. LD_LIBRARY_PATH: GPU images set
# it for the driver's libraries (libcuda), without which torch sees no GPU.
BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TERM",
    "SHELL",
    "TMPDIR",
    "TZ",
    "LD_LIBRARY_PATH",
)
_CLEAN = "NSA_LAUNCH_CLEAN_ENV"


def wrapper_script(req: dict[str, Any]) -> str:
    """The bash wrapper tmux runs: exports, torchrun tee'd with pipefail, the true exit code."""
    q = shlex.quote
    rd = req["run_dir"]
    max_restarts = int(req.get("max_restarts") or 0)
    log, code = f"{rd}/train.log", f"{rd}/exit_code"
    reserve = q(f"{rd}/{RESERVE}")
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by nsa-launch for run {req['run']!r}; tmux runs it as `bash {WRAPPER} [--resume]`.",
        "# Once, under env -i: only the base below and the exports after it reach the workers.",
        f'if [ -z "${{{_CLEAN}:-}}" ]; then',
        f"  base=({_CLEAN}=1)",
        f"  for v in {' '.join(BASE_ENV)}; do",
        '    if [ -n "${!v+x}" ]; then base+=("$v=${!v}"); fi',
        "  done",
        '  exec /usr/bin/env -i "${base[@]}" "$BASH" "$0" "$@"',
        "fi",
        f"unset {_CLEAN}",
        "set -o pipefail",
        f"cd -- {q(req['workdir'])} || exit 97",
        f"head -c 1048576 /dev/zero > {reserve} 2>/dev/null || rm -f -- {reserve}",
    ]
    env = dict(req.get("env", {}))
    env.update({"PYTHONUNBUFFERED": "1", "NSA_RUN_ID": req["run"], TAG: rd, "PYTHONPATH": req["workdir"]})
    # torchrun --tee prefixes each worker line with this (default "[default0]:", the local rank);
    # the global rank tells the nodes of a multi-node run apart. Single-quoted: no shell expansion.
    env.setdefault("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", RANK_PREFIX_TEMPLATE)
    lines += [f"export {k}={q(v)}" for k, v in sorted(env.items())]
    lines += [
        f"if [ -f {q(rd + '/' + SECRETS)} ]; then . {q(rd + '/' + SECRETS)}; rm -f -- {q(rd + '/' + SECRETS)}; fi",
        # The restart loop (restarts.py decides and records each restart; max_restarts 0: none).
        "while :; do",
        f'printf \'%s\\n\' "[nsa-launch] $(date -u +%Y-%m-%dT%H:%M:%SZ) start: "{q(shlex.join(req["argv"]))}" $*"'
        f" >> {q(log)}",
        f'{shlex.join(req["argv"])} "$@" 2>&1 | tee -a -- {q(log)}',
        "ec=${PIPESTATUS[0]} tee_ec=${PIPESTATUS[1]}",
        f'if [ "$ec" = 0 ] || [ {max_restarts} = 0 ]; then break; fi',
        f'next=$({q(req["argv"][0])} -m launcher.host.restarts {q(rd)} {max_restarts} "$ec" 2>> {q(log)})',
        'case "$next" in resume) set -- --resume ;; fresh) set -- ;; *) break ;; esac',
        f"printf '%s\\n' \"[nsa-launch] torchrun exited with $ec; restarting ($next)\" >> {q(log)}",
        "done",
        f"rm -f -- {reserve}",
        # Always an exit code, never a stray .tmp: on a failed rename the code is written in place.
        f"{{ printf '%s\\n' \"$ec\" > {q(code + '.tmp')} && mv -f -- {q(code + '.tmp')} {q(code)}; }} 2>/dev/null"
        f" || {{ rm -f -- {q(code + '.tmp')}; printf '%s\\n' \"$ec\" > {q(code)}; }}",
        f"printf '%s\\n' \"[nsa-launch] torchrun exited with $ec\" >> {q(log)}",
        'if [ "$tee_ec" != 0 ]; then',
        f"  printf '%s\\n' \"[nsa-launch] writing train.log failed (tee exit $tee_ec)\" >> {q(log)}",
        "fi",
        'exit "$ec"',
        "",
    ]
    return "\n".join(lines)


def write_secrets(run_dir: Path, secrets: dict[str, str]) -> None:
    """The exports the wrapper sources once and deletes; created 0600 before any byte is written."""
    fd = os.open(run_dir / SECRETS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in secrets.items())
