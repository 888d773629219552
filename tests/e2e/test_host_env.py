"""The host environment over the real loopback sshd: a venv that reuses the host's torch, progress by
phase, Ctrl-C during the build, and a named python checked in preflight.

No network but PyPI here, so no test downloads torch: the reuse path installs with `--no-index`
(everything is already on the base python), and the Ctrl-C test's base python is a FAKE interpreter
wrapper whose `-m venv` step is a real slow process (`sleep`) that the interrupt must stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import venv
from pathlib import Path

from tests.e2e.launch_support import PYTHON, invoke, isolate, wait_for

CLI = str(Path(sys.executable).parent / "nsa-launch")


def _profile(tmp_path: Path, base_python: str, pip_args: list[str] | None = None) -> Path:
    p = tmp_path / "venvcpu.yaml"
    p.write_text(
        "name: venvcpu\ndevice: cpu\nnodes: 1\nnproc_per_node: 1\nconfig: configs/tiny.yaml\n"
        'overrides: ["train.device=cpu"]\nenv:\n  OMP_NUM_THREADS: "1"\n'
        f"host:\n  python: venv\n  base_python: {base_python}\n  pip_args: {pip_args or []}\n"
        "expect:\n  gpus: 0\n  min_free_disk_gb: 1\n"
    )
    return p


def _host_args(sshd, workdir: Path) -> list[str]:
    return ["--host", sshd.alias, "--ssh-config", str(sshd.ssh_config), "--workdir", str(workdir)]


def test_venv_reuses_the_base_pythons_torch_and_reports_phases(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    wd = tmp_path / "wd"
    prof = _profile(tmp_path, PYTHON, ["--no-index"])  # all there already: no download, no build
    res = invoke(
        "up", "--profile", str(prof), *_host_args(sshd, wd), "--name", "reuse", "--set", "train.steps=3"
    )
    try:
        assert res.exit_code == 0, res.output
        assert "reusing the base python's torch, installing only what is missing" in res.output
        assert "host env [1] creating the venv ..." in res.output
        assert "host env [2] installing what the base python lacks of .[train] ..." in res.output
        assert "done in" in res.output and "host env ready in" in res.output
        assert "CPU torch wheel" not in res.output
        vpy = wd / ".venv" / "bin" / "python"
        out = subprocess.run(  # as the agent and the wrapper run it: from the synced checkout
            [str(vpy), "-c", "import torch, nsa, sys; print(torch.__file__); print(nsa.__file__)"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=wd,
            env={**os.environ, "PYTHONPATH": str(wd)},
        )
        torch_file, nsa_file = out.stdout.split()
        assert not torch_file.startswith(str(wd)), "torch was installed again instead of reused"
        assert nsa_file.startswith(str(wd))  # the synced project
        assert list((wd / ".venv").glob(".nsa-spec-*"))
        # a second `up` with the same spec reuses the venv: no build
        again = invoke(
            "up", "--profile", str(prof), *_host_args(sshd, wd), "--name", "reuse2", "--set", "train.steps=3"
        )
        assert again.exit_code == 0, again.output
        assert "host env" not in again.output
    finally:
        invoke("kill", "--run", "reuse")
        invoke("kill", "--run", "reuse2")


def test_ctrl_c_during_the_build_stops_it_on_the_host_and_removes_the_venv(sshd, tmp_path, tmux_server):
    marker = f"{317 + os.getpid() % 1000}"  # a sleep no one else runs: its survival is visible
    fake = tmp_path / "fakepython"
    fake.write_text(
        "#!/bin/sh\n# FAKE base python: `-m venv DIR` starts a slow real process; anything else is python.\n"
        'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then for a; do dir=$a; done; mkdir -p "$dir/bin"\n'
        f"  exec sleep {marker}\nfi\n"
        f'exec {PYTHON} "$@"\n'
    )
    fake.chmod(0o755)
    wd = tmp_path / "wd"
    env = {
        **os.environ,
        "NSA_LAUNCH_HOME": str(tmp_path / "home"),
        "NSA_LAUNCH_TMUX_SOCKET": tmux_server.socket_name,
    }
    env.pop("NSA_LAUNCH_HOST", None)
    cli = subprocess.Popen(
        [CLI, "up", "--profile", str(_profile(tmp_path, str(fake))), *_host_args(sshd, wd), "--name", "cc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        err: list[str] = []
        while not any("host env [1] creating the venv ..." in ln for ln in err):
            line = cli.stderr.readline()
            assert line, "up ended before the venv build: " + "".join(err)
            err.append(line)
        wait_for(lambda: _sleepers(marker), 30, "the fake install step to run on the host")
        assert (wd / ".venv").exists()
        cli.send_signal(signal.SIGINT)
        code = cli.wait(timeout=60)
        rest = cli.stderr.read()
    finally:
        if cli.poll() is None:
            cli.kill()
    assert code == 130, rest
    assert "stopped the install" in rest and "removed the half-built venv" in rest
    assert not _sleepers(marker), "the host's install process survived Ctrl-C"
    assert not (wd / ".venv").exists() and not (wd / ".nsa-venv-build.pid").exists()


def _sleepers(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[:2] == [b"sleep", marker.encode()]:
            found.append(int(pid))
    return found


def test_a_named_python_lacking_packages_is_refused_in_preflight(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    wd = tmp_path / "wd"
    res = invoke("up", *_host_args(sshd, wd), "--python", str(bare / "bin" / "python"), "--name", "bare")
    assert res.exit_code == 2, res.output
    assert "lacks libtmux, pyyaml, pydantic, torch" in res.output
    assert f"{bare}/bin/python -m pip install libtmux pyyaml pydantic torch" in res.output
    assert "host.python: venv" in res.output
    assert not wd.exists(), "preflight must refuse before anything is synced"


def test_doctor_on_a_fresh_host_reports_the_python_env(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    fresh = tmp_path / "never synced"
    res = invoke("doctor", *_host_args(sshd, fresh), "--python", PYTHON)
    assert res.exit_code == 0, res.output
    assert f"ok   python 3.{sys.version_info[1]} ({PYTHON})" in res.output
    assert "ok   torch 2." in res.output and "CPU build" in res.output
    assert "ok   0 GPU(s)" in res.output and "GB free at" in res.output
    assert "not synced to" in res.output and "No such file" not in res.output
    assert not fresh.exists()
    # the default host.python: venv says what `up` would build there
    res = invoke("doctor", *_host_args(sshd, fresh))
    assert res.exit_code == 0, res.output
    assert "host env: a venv at" in res.output
    # no --host: it says which machine it checked
    local = invoke("doctor")
    assert local.exit_code == 0, local.output
    assert "host 0: this machine (no --host given)" in local.output


def test_doctor_lists_each_problem_with_its_own_fix(sshd, tmux_server, tmp_path, monkeypatch):
    isolate(monkeypatch, tmp_path, tmux_server)
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    res = invoke("doctor", *_host_args(sshd, tmp_path / "wd"), "--python", str(bare / "bin" / "python"))
    assert res.exit_code == 1, res.output
    assert "FAIL " in res.output and "lacks libtmux, pyyaml, pydantic, torch" in res.output
    assert res.output.count("lacks libtmux, pyyaml, pydantic, torch") == 1  # once, with its fix
    assert "-m pip install libtmux pyyaml pydantic torch" in res.output
    assert "run doctor again" not in res.output
