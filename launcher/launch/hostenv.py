"""The host's Python environment: a venv built once per dependency-spec hash, or a named python.

Owns deciding which interpreter runs the agent and torchrun on a host. A named interpreter (an
absolute path in the profile or --python) is used as is; preflight (launcher/launch/preflight.py)
has already checked it has what a run needs. `venv` builds <workdir>/.venv with the profile's base
python and pyproject.toml's dependencies (not the project: it runs from the synced checkout), planned
from the base's probe (launcher/host/probe.py) and the profile's device:
- reuse: the base already has a torch whose build fits (any torch for a cpu profile, a CUDA build
  for a GPU one): the venv sees the base's site-packages (a .pth file, which also works when the base
  is itself a venv) and pip installs only what is missing;
- cpu: the CPU torch wheel from the PyTorch CPU index first, so pip does not pull CUDA wheels;
- cuda: torch from PyPI as pyproject.toml asks (the CUDA build on Linux).
Each phase is reported with its elapsed time, and while it runs a ticker line every TICK_S says the
phase, its elapsed time and how many bytes the host has received since it began (its network
interfaces' counters, /proc/net/dev: pip's downloads, so a torch wheel's minutes are not silent). A
build is skipped when the marker for the current
spec hash (pyproject.toml + extras + pip args + plan) is there. Ctrl-C (or any failure) stops the
host's install process group and removes the half-built venv. Local runs use the interpreter running
nsa-launch. It must not start runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.profiles import PROJECT_ROOT, HostEnv
from launcher.core.errors import RuntimeFailure
from launcher.ssh.transport import Transport

MARKER_PREFIX = ".nsa-spec-"
BASE_PTH = "_nsa_host_base.pth"
BUILD_PID = ".nsa-venv-build.pid"
PHASE_TIMEOUT_S = 3600.0
TICK_S = 10.0  # a ticker line per this many seconds while a phase runs
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# Modules a host python needs to run the agent (libtmux) and the trainer (the rest); `import` names.
RUN_MODULES = ["libtmux", "yaml", "pydantic", "torch"]
# What pip installs for each of them, for the fix text.
PIP_NAMES = {"libtmux": "libtmux", "yaml": "pyyaml", "pydantic": "pydantic", "torch": "torch"}


@dataclass(frozen=True)
class EnvPlan:
    torch: str  # "reuse" | "cpu" | "cuda"
    base_site: tuple[str, ...] = ()  # the base's site dirs a reusing venv sees

    def describe(self) -> str:
        return {
            "reuse": "reusing the base python's torch, installing only what is missing",
            "cpu": f"CPU torch wheel ({CPU_TORCH_INDEX})",
            "cuda": "CUDA torch from PyPI",
        }[self.torch]


def plan_env(device: str, probe: dict[str, Any] | None) -> EnvPlan:
    """What the venv gets for a profile on `device` (cpu / cuda) given the base python's probe."""
    build = (probe or {}).get("torch_build")
    fits = build is not None and (device == "cpu" or build.startswith(("cu", "cuda")))
    if fits and (probe or {}).get("pip") and _torch_at_least((probe or {}).get("torch"), (2, 6)):
        return EnvPlan("reuse", tuple((probe or {}).get("site_packages") or ()))
    return EnvPlan("cpu" if device == "cpu" else "cuda")


def _torch_at_least(version: str | None, want: tuple[int, int]) -> bool:
    try:
        major, minor = (int(x) for x in (version or "").split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= want


def spec_hash(
    env: HostEnv, plan: EnvPlan | None = None, pyproject: Path = PROJECT_ROOT / "pyproject.toml"
) -> str:
    h = hashlib.sha256()
    h.update(pyproject.read_bytes())
    h.update(repr((sorted(env.extras), env.pip_args, env.base_python)).encode())
    if plan is not None:
        h.update(repr((plan.torch, plan.base_site)).encode())
    return h.hexdigest()[:16]


def venv_phases(workdir: str, env: HostEnv, plan: EnvPlan, digest: str) -> list[tuple[str, str]]:
    """(name, shell commands) per phase, run in `workdir`; the last writes the marker for `digest`."""
    q = shlex.quote
    venv = f"{workdir}/.venv"
    py = q(venv + "/bin/python")
    target = f".[{','.join(env.extras)}]" if env.extras else "."
    pip_args = " ".join(q(a) for a in env.pip_args)
    # Reusing, the venv gets no pip of its own (nor ensurepip's old setuptools): the base's pip and
    # build tools, seen through the .pth file, install into it.
    without_pip = " --without-pip" if plan.torch == "reuse" else ""
    create = [f"rm -rf {q(venv)}", f"{q(env.base_python)} -m venv{without_pip} {q(venv)}"]
    if plan.torch == "reuse":
        # A .pth line per site dir of the base: its packages (torch) become importable in the venv,
        # after the venv's own, so pip sees them as installed and adds only what is missing.
        write_pth = (
            "import os, site, sys; d = site.getsitepackages()[0]; "
            f"open(os.path.join(d, {BASE_PTH!r}), 'w').write(''.join(p + chr(10) for p in sys.argv[1:]))"
        )
        create.append(f"{py} -c {q(write_pth)} " + " ".join(q(d) for d in plan.base_site))
    else:
        create.append(f"{py} -m pip install -q --upgrade pip")
    phases = [("creating the venv", " && ".join(create))]
    if plan.torch == "cpu":
        phases.append(
            (
                "installing the CPU torch wheel",
                f"{py} -m pip install -q torch --index-url {CPU_TORCH_INDEX} {pip_args}",
            )
        )
    reqs = requirements(env.extras)
    touch = f"touch {q(venv + '/' + MARKER_PREFIX + digest)}"
    if plan.torch == "reuse":
        # Only the requirements the base does not already meet go to pip (none: no pip at all), so a
        # reused torch is never re-resolved against its own pins.
        install = (
            f"missing=$({py} -c {q(_MISSING)} {q(json.dumps(reqs))}) && "
            f'if [ -n "$missing" ]; then printf "%s\\n" "$missing" | xargs -d "\\n" {py} -m pip install -q {pip_args}; fi'
        )
        phases.append((f"installing what the base python lacks of {target}", f"{install} && {touch}"))
        return phases
    names = ", ".join(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in reqs)
    phases.append(
        (
            f"installing the dependencies of {target} ({names})",
            f"{py} -m pip install -q {' '.join(q(r) for r in reqs)} {pip_args} && {touch}",
        )
    )
    return phases


# Prints the requirements (argv[1], a JSON list) that this interpreter does not meet, one a line.
_MISSING = """
import json, sys
from importlib.metadata import PackageNotFoundError, version
from pip._vendor.packaging.requirements import Requirement
for r in json.loads(sys.argv[1]):
    req = Requirement(r)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        ok = req.specifier.contains(version(req.name), prereleases=True)
    except PackageNotFoundError:
        ok = False
    if not ok:
        print(r)
"""


def requirements(extras: list[str], pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """pyproject.toml's dependencies plus those of `extras`. The venv needs only these: the agent and
    the trainer run from the synced checkout (PYTHONPATH=<workdir>), so the project itself is not
    installed, and no build backend has to run on the host."""
    data = _load_toml(pyproject.read_text())
    proj = data.get("project", {})
    out = list(proj.get("dependencies", []))
    for extra in extras:
        out += [r for r in proj.get("optional-dependencies", {}).get(extra, []) if r not in out]
    return out


def _load_toml(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # python 3.10: pip vendors the same parser
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def ensure_python(
    t: Transport,
    workdir: str,
    env: HostEnv,
    python: str | None,
    log: Callable[[str], None] = lambda s: None,
    device: str = "cpu",
    probe: dict[str, Any] | None = None,
) -> str:
    """The absolute interpreter path to use on this host, building the venv if its spec changed."""
    if t.spec.is_local and not python:
        return sys.executable
    chosen = python or env.python
    if chosen != "venv":
        return chosen  # preflight checked it (missing packages are listed there with the fix)
    from launcher.core import format as fmt

    plan = plan_env(device, probe)
    digest = spec_hash(env, plan)
    q = shlex.quote
    venv_py = f"{workdir}/.venv/bin/python"
    marker = f"{workdir}/.venv/{MARKER_PREFIX}{digest}"
    if t.run(f"test -e {q(marker)}", check=False, timeout=30).exit_code == 0:
        return venv_py
    log(f"host env: building {workdir}/.venv on {t.label} ({plan.describe()}; spec {digest} is new)")
    t_all = time.monotonic()
    for i, (name, script) in enumerate(venv_phases(workdir, env, plan, digest), 1):
        log(f"host env [{i}] {name} ...")
        t0 = time.monotonic()
        with ticker(t, f"host env [{i}] {name}", log):
            _run_phase(t, workdir, script, name)
        log(f"host env [{i}] {name}: done in {fmt.duration(time.monotonic() - t0)}")
    log(f"host env ready in {fmt.duration(time.monotonic() - t_all)}")
    return venv_py


def received_bytes(t: Transport) -> int | None:
    """Bytes the host's network interfaces (loopback excluded) have received since boot; None where
    there is no /proc/net/dev (not Linux) or the read fails."""
    try:
        res = t.run("cat /proc/net/dev", check=False, timeout=10)
    except Exception:  # a ticker must never break the build it reports on
        return None
    if res.exit_code != 0:
        return None
    total = 0
    for line in res.stdout.splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() != "lo" and fields.split():
            total += int(fields.split()[0])
    return total


@contextlib.contextmanager
def ticker(t: Transport, what: str, log: Callable[[str], None], every_s: float = TICK_S) -> Iterator[None]:
    """While the body runs, log `what`, the elapsed time and the bytes the host received since the
    start, every `every_s` seconds (from a thread: the body blocks on the host)."""
    from launcher.core import format as fmt

    stop = threading.Event()
    t0 = time.monotonic()
    start = received_bytes(t)

    def tick() -> None:
        while not stop.wait(every_s):
            now = received_bytes(t)
            got = f", host received {fmt.size(now - start)}" if now is not None and start is not None else ""
            if not stop.is_set():
                log(f"{what}: {fmt.duration(time.monotonic() - t0)}{got}")

    th = threading.Thread(target=tick, name="hostenv-ticker", daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join(timeout=2.0)


def _run_phase(t: Transport, workdir: str, script: str, name: str) -> None:
    """Run one phase in its own process group on the host, whose id is kept in a pid file, so that
    Ctrl-C here (or a failure) can stop everything it started and remove the half-built venv."""
    q = shlex.quote
    pidfile = f"{workdir}/{BUILD_PID}"
    inner = f"echo $$ > {q(pidfile)}; {script}"
    cmd = f"cd {q(workdir)} && setsid -w bash -c {q(inner)}; ec=$?; rm -f {q(pidfile)}; exit $ec"
    try:
        res = t.run(cmd, timeout=PHASE_TIMEOUT_S, check=False)
    except KeyboardInterrupt:
        _abort_build(t, workdir)
        raise KeyboardInterrupt(
            f"interrupted while {name}: stopped the install on {t.label} and removed the half-built venv;"
            " nothing was started"
        ) from None
    except BaseException:
        _abort_build(t, workdir)
        raise
    if res.exit_code != 0:
        _abort_build(t, workdir)
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise RuntimeFailure(
            f"building the venv on {t.label} failed while {name}:\n{tail}",
            "fix the host's python / pip access (host.base_python, host.pip_args) and re-run",
        )


def _abort_build(t: Transport, workdir: str) -> None:
    """Stop the build's process group (TERM, then KILL) and remove the half-built venv."""
    q = shlex.quote
    pidfile, venv = q(f"{workdir}/{BUILD_PID}"), q(f"{workdir}/.venv")
    script = (
        f'pg=$(cat {pidfile} 2>/dev/null); if [ -n "$pg" ]; then kill -TERM -- "-$pg" 2>/dev/null; '
        f'for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- "-$pg" 2>/dev/null || break; sleep 0.3; done; '
        f'kill -KILL -- "-$pg" 2>/dev/null; fi; rm -rf {venv} {pidfile}'
    )
    t.run(script, timeout=30, check=False)


def missing_packages_fix(python: str, missing: list[str]) -> str:
    pip = " ".join(PIP_NAMES.get(m, m) for m in missing)
    return (
        f"install them into that interpreter ({python} -m pip install {pip}; torch from "
        f"{CPU_TORCH_INDEX} on a CPU host), or let nsa-launch build a venv: drop --python / use host.python: venv"
    )


def probe_args(modules: list[str]) -> str:
    return json.dumps(modules)
