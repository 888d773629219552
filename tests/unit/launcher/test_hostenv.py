"""The host-env plan (launcher/launch/hostenv.py) and the host's python probe (launcher/host/probe.py).

The plan is a pure function of the profile's device and the base python's probe: which torch the
venv gets. The probe runs here on real interpreters (this one, which has torch, and a bare venv)."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

from launcher.config.profiles import HostEnv
from launcher.host import probe
from launcher.launch.hostenv import CPU_TORCH_INDEX, EnvPlan, plan_env, spec_hash, venv_phases


def _probe(torch: str | None) -> dict:
    return {
        "torch": torch,
        "torch_build": probe.torch_build(torch),
        "site_packages": ["/base/site-packages"],
        "pip": True,
    }


def test_the_torch_build_fits_the_profile():
    assert plan_env("cpu", None) == EnvPlan("cpu")  # a fresh host: the CPU wheel for the cpu profile
    assert plan_env("cuda", None) == EnvPlan("cuda")
    assert plan_env("cpu", _probe(None)) == EnvPlan("cpu")
    # a base python whose torch meets the spec is reused, whatever build a cpu profile gets
    assert plan_env("cpu", _probe("2.13.0+cpu")) == EnvPlan("reuse", ("/base/site-packages",))
    assert plan_env("cpu", _probe("2.7.1+cu126")).torch == "reuse"
    # a GPU profile reuses only a CUDA build (a bare Linux PyPI version is one)
    assert plan_env("cuda", _probe("2.13.0+cpu")) == EnvPlan("cuda")
    assert plan_env("cuda", _probe("2.7.1+cu126")).torch == "reuse"
    if sys.platform.startswith("linux"):
        assert plan_env("cuda", _probe("2.7.1")).torch == "reuse"
    # too old for pyproject.toml's torch>=2.6, or no pip to install the rest with: not reused
    assert plan_env("cpu", _probe("2.4.0+cpu")) == EnvPlan("cpu")
    assert plan_env("cpu", {**_probe("2.13.0+cpu"), "pip": False}) == EnvPlan("cpu")


def test_phases_install_only_what_the_plan_needs():
    env = HostEnv(python="venv", base_python="/usr/bin/python3", pip_args=["--retries", "1"])
    cpu = venv_phases("/w", env, EnvPlan("cpu"), "d1")
    assert [n for n, _ in cpu][1] == "installing the CPU torch wheel"
    assert f"torch --index-url {CPU_TORCH_INDEX} --retries 1" in cpu[1][1]
    cuda = venv_phases("/w", env, EnvPlan("cuda"), "d1")
    assert len(cuda) == 2 and CPU_TORCH_INDEX not in " ".join(s for _, s in cuda)
    reuse = venv_phases("/w", env, EnvPlan("reuse", ("/base/site-packages",)), "d1")
    assert len(reuse) == 2 and "torch" not in reuse[0][1] and "/base/site-packages" in reuse[0][1]
    assert reuse[-1][1].endswith("/w/.venv/.nsa-spec-d1")  # the marker comes last, after pip
    # the plan is part of the spec hash: a host whose torch changes gets another venv
    assert spec_hash(env, EnvPlan("cpu")) != spec_hash(env, EnvPlan("reuse", ("/b",)))


def _run_probe(python: str, modules: list[str]) -> dict:
    out = subprocess.run(
        [python, "-", json.dumps(modules)],
        input=Path(probe.__file__).read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("probe="))
    return json.loads(line.partition("=")[2])


def test_probe_finds_torch_without_importing_it_and_lists_missing(tmp_path):
    here = _run_probe(sys.executable, ["libtmux", "yaml", "torch", "no_such_module_xyz"])
    assert here["missing"] == ["no_such_module_xyz"]
    assert here["torch"] and here["torch_build"] == probe.torch_build(here["torch"])
    assert any("site-packages" in d for d in here["site_packages"])
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    got = _run_probe(str(bare / "bin" / "python"), ["libtmux", "yaml", "torch"])
    assert got["missing"] == ["libtmux", "yaml", "torch"] and got["torch"] is None


def test_ticker_reports_phase_elapsed_time_and_bytes_received(tmp_path):
    """The ticker over a real (local) transport: lines while the body runs, none after it ends."""
    import time

    from launcher.launch.hostenv import received_bytes, ticker
    from launcher.ssh.hosts import local_host
    from launcher.ssh.transport import LocalTransport

    t = LocalTransport(local_host())
    assert isinstance(received_bytes(t), int)  # /proc/net/dev on Linux
    lines: list[str] = []
    with ticker(t, "host env [2] installing the CPU torch wheel", lines.append, every_s=0.2):
        time.sleep(0.9)
    n = len(lines)
    assert n >= 2, lines
    assert all(ln.startswith("host env [2] installing the CPU torch wheel: ") for ln in lines)
    assert all("host received " in ln and ln.rstrip().endswith("B") for ln in lines), lines
    time.sleep(0.4)
    assert len(lines) == n  # stopped with the body
