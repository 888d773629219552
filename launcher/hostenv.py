"""The host's Python environment: a venv built once per dependency-spec hash, or a named python.

Owns deciding which interpreter runs the agent and torchrun on a host: an absolute path the profile
(or --python) names, used as is after a version check; or `venv`: <workdir>/.venv created with the
profile's base python and `pip install -e .[extras]`, skipped when a marker file for the current
dependency-spec hash (pyproject.toml + extras + pip args) is already there. Local runs use the
interpreter running nsa-launch. It must not start runs.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from launcher.errors import LaunchError, RuntimeFailure
from launcher.profiles import PROJECT_ROOT, HostEnv
from launcher.ssh.transport import Transport

MARKER_PREFIX = ".nsa-spec-"
VENV_TIMEOUT_S = 3600.0


def spec_hash(env: HostEnv, pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> str:
    h = hashlib.sha256()
    h.update(pyproject.read_bytes())
    h.update(repr((sorted(env.extras), env.pip_args, env.base_python)).encode())
    return h.hexdigest()[:16]


def venv_script(workdir: str, env: HostEnv, digest: str) -> str:
    """The shell commands that (re)build the venv and then write the marker for `digest`."""
    q = shlex.quote
    venv = f"{workdir}/.venv"
    extras = ",".join(env.extras)
    target = f".[{extras}]" if extras else "."
    return " && ".join(
        [
            f"cd {q(workdir)}",
            f"{{ test -x {q(venv + '/bin/python')} || {q(env.base_python)} -m venv {q(venv)}; }}",
            f"{q(venv + '/bin/python')} -m pip install -q --upgrade pip",
            f"{q(venv + '/bin/python')} -m pip install -q -e {q(target)} "
            + " ".join(q(a) for a in env.pip_args),
            f"rm -f {q(venv)}/{MARKER_PREFIX}*",
            f"touch {q(venv + '/' + MARKER_PREFIX + digest)}",
        ]
    )


def ensure_python(
    t: Transport, workdir: str, env: HostEnv, python: str | None, log: Callable[[str], None] = lambda s: None
) -> str:
    """The absolute interpreter path to use on this host, building the venv if its spec changed."""
    if t.spec.is_local and not python:
        return sys.executable
    chosen = python or env.python
    q = shlex.quote
    if chosen != "venv":
        res = t.run(
            f"{q(chosen)} -c 'import sys, libtmux, yaml; print(sys.version_info >= (3, 10))'",
            timeout=60,
            check=False,
        )
        if res.exit_code != 0 or res.stdout.strip() != "True":
            raise LaunchError(
                f"python {chosen} on {t.label} cannot run the agent: "
                + (res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "needs Python >= 3.10"),
                "point --python / host.python at an interpreter with the project installed, or use host.python: venv",
            )
        return chosen
    digest = spec_hash(env)
    venv_py = f"{workdir}/.venv/bin/python"
    if (
        t.run(f"test -e {q(workdir + '/.venv/' + MARKER_PREFIX + digest)}", check=False, timeout=30).exit_code
        == 0
    ):
        return venv_py
    log(f"building the host venv (dependency spec {digest} changed or new); this takes minutes once")
    res = t.run(venv_script(workdir, env, digest), timeout=VENV_TIMEOUT_S, check=False)
    if res.exit_code != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise RuntimeFailure(
            f"building the venv on {t.label} failed:\n{tail}",
            "fix the host's python / pip access (host.base_python, host.pip_args) and re-run",
        )
    return venv_py
