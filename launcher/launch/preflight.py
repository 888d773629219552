"""`up`, step 2: preflight on each host before anything is synced or started (also `doctor`'s check).

Owns the read-only probe of a host (one shell exec: workdir, tools, python version, free disk, an
existing run dir, the GPUs through launcher/host/gpu.py and the python's packages and torch build
through launcher/host/probe.py, whose sources it runs with the host's python since the project is
not synced there yet; a named python that lacks what a run needs is refused with the packages and
the fix) and the LaunchError that names what is missing
and the fix. It must not change the host and must not touch tmux (the agent's `start` refuses a
session that already exists).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from launcher.core.errors import LaunchError
from launcher.launch.hostenv import PIP_NAMES, RUN_MODULES, missing_packages_fix
from launcher.launch.plan import Plan
from launcher.ssh.transport import Transport

HOST_DIR = Path(__file__).resolve().parent.parent / "host"
GPU_PROBE = HOST_DIR / "gpu.py"
PY_PROBE = HOST_DIR / "probe.py"


def _preflight_script(workdir: str, run: str, python: str) -> str:
    q = shlex.quote
    # A relative workdir is relative to the host's home, as rsync reads it; resolving it here keeps
    # the agent (which runs inside the workdir) from nesting it again (~/relwd/relwd/runs/...).
    if workdir in ("~", "~/"):
        wd = '"$HOME"'
    elif workdir.startswith("~/"):
        wd = f'"$HOME"/{q(workdir[2:])}'
    elif not workdir.startswith("/"):
        wd = f'"$HOME"/{q(workdir)}'
    else:
        wd = q(workdir)
    py = q(python)
    return "\n".join(
        [
            f"wd={wd}",
            'printf "workdir=%s\\n" "$wd"',
            'printf "tmux=%s\\n" "$(command -v tmux)"',
            'printf "rsync=%s\\n" "$(command -v rsync)"',
            f'printf "python=%s\\n" "$({py} -c \'import sys; print("%d.%d" % sys.version_info[:2])\' 2>/dev/null)"',
            'd="$wd"; while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done',
            'printf "free_kb=%s\\n" "$(df -Pk -- "$d" | awk \'NR==2{print $4}\')"',
            f'[ -e "$wd"/runs/{q(run)} ] && echo run_dir_exists=1',
            '[ -f "$wd"/launcher/host/__main__.py ] && echo synced=1',
            # The GPU query and the python probe are launcher/host/gpu.py and probe.py themselves,
            # fed to the host's python on stdin (the project is not on the host yet).
            f"{py} - 2>/dev/null <<'NSA_GPU_PROBE_EOF'",
            GPU_PROBE.read_text(),
            "NSA_GPU_PROBE_EOF",
            f"{py} - {q(json.dumps(RUN_MODULES))} 2>/dev/null <<'NSA_PY_PROBE_EOF'",
            PY_PROBE.read_text(),
            "NSA_PY_PROBE_EOF",
            "true",
        ]
    )


def gpu_found(names: list[str]) -> str:
    """What the host has, e.g. "1 x NVIDIA H100 80GB HBM3 (H100 SXM)": the SKU from the trainer's peak table."""
    from nsa.train.flops import peak_for  # torch-free

    if not names:
        return "no GPU"
    kinds = sorted(set(names))
    skus = {peak_for(n)[0] for n in kinds if peak_for(n)}
    return ", ".join(f"{names.count(k)} x {k}" for k in kinds) + (
        f" ({', '.join(sorted(skus))})" if skus else ""
    )


def preflight(t: Transport, plan: Plan, i: int) -> dict[str, Any]:
    """Check the host can take the run; returns facts (absolute workdir, has rsync). LaunchError if not."""
    prof = plan.profile
    python = (
        plan.pythons[i]
        if plan.pythons[i] not in (None, "venv")
        else (prof.host.python if prof.host.python != "venv" else None)
    )
    if t.spec.is_local and not plan.pythons[i]:
        python = sys.executable
    res = t.run(_preflight_script(plan.workdirs[i], plan.run, python or prof.host.base_python), timeout=60)
    facts: dict[str, Any] = {"gpus": []}
    for line in res.stdout.splitlines():
        k, _, v = line.partition("=")
        if k == "gpus":
            try:
                facts["gpus"] = [str(g.get("name")) for g in json.loads(v)]
            except (ValueError, AttributeError):
                facts["gpus"] = []
        elif k == "probe":
            with contextlib.suppress(ValueError):
                facts["probe"] = json.loads(v)
        else:
            facts[k] = v.strip()
    where = t.label
    if not facts.get("tmux"):
        raise LaunchError(
            f"{where}: tmux is not installed", "install it on the host: sudo apt-get install -y tmux"
        )
    if not facts.get("python"):
        raise LaunchError(
            f"{where}: python {python or prof.host.base_python} does not run",
            "set --python (or host.python / host.base_python in the profile) to an existing interpreter",
        )
    major, minor = (int(x) for x in facts["python"].split("."))
    if (major, minor) < (3, 10):
        raise LaunchError(
            f"{where}: python is {facts['python']}, need >= 3.10", "point host.base_python at a newer one"
        )
    missing = (facts.get("probe") or {}).get("missing", [])
    if python and missing:
        # A named interpreter is used as is: what it lacks would fail after the sync, one import at
        # a time. (A venv's base python may lack them all: the venv build installs them.)
        raise LaunchError(
            f"{where}: python {python} lacks {', '.join(PIP_NAMES.get(m, m) for m in missing)} "
            f"(a run needs {', '.join(PIP_NAMES[m] for m in RUN_MODULES)})",
            missing_packages_fix(python, missing),
        )
    want = prof.expected_gpus
    got = facts["gpus"]
    if want and len(got) < want:
        raise LaunchError(
            f"{where}: profile {prof.name} expects {want} GPUs, the host shows {len(got)} {got}",
            "pick the profile that matches the host (nsa-launch profiles) or the right host",
        )
    facts["gpu_found"] = gpu_found(got)
    family = prof.expect.gpu_name
    if family and not all(family.lower() in g.lower() for g in got):
        raise LaunchError(
            f"{where}: profile {prof.name} expects {family} GPUs; found {facts['gpu_found']}",
            "pick the profile for the GPUs found (nsa-launch profiles: 1xa100/2xa100 for A100, "
            "1xh100/2xh100/8xh100 for H100 and H200)",
        )
    free_gb = int(facts.get("free_kb") or 0) / 2**20
    if free_gb < prof.expect.min_free_disk_gb:
        raise LaunchError(
            f"{where}: {free_gb:.1f} GB free at {facts.get('workdir')}, profile needs "
            f"{prof.expect.min_free_disk_gb} GB",
            "free disk space or change host.workdir",
        )
    if facts.get("run_dir_exists") and not plan.opts.resume:
        raise LaunchError(
            f"{where}: a run named {plan.run!r} already exists there (its run dir)",
            f"pick another --name, or `nsa-launch restart --run {plan.run}`",
        )
    return facts
