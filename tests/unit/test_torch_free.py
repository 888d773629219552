"""The launcher half must run on a laptop without torch: every launcher module, the torch-free nsa
modules (run-dir contract, env registry, config schemas) and `nsa-launch --help` are checked in a
subprocess where `import torch` fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_TORCH = "import sys; sys.modules['torch'] = None  # any `import torch` now raises ImportError\n"

TORCH_FREE_NSA = ["nsa", "nsa.runfiles", "nsa.envvars", "nsa.malloc", "nsa.train.config", "nsa.data.config"]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True, timeout=120
    )


def test_every_launcher_module_imports_without_torch():
    code = textwrap.dedent(
        """
        import importlib, pkgutil, launcher
        names = ["launcher"] + [m.name for m in pkgutil.walk_packages(launcher.__path__, "launcher.")]
        for name in names:
            importlib.import_module(name)
        print(len(names))
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 2


def test_torch_free_nsa_modules_import_without_torch():
    code = textwrap.dedent(
        f"""
        import importlib, importlib.util
        for name in {TORCH_FREE_NSA!r}:
            parent = name.rpartition(".")[0]
            if parent and importlib.util.find_spec(parent) is None:
                continue
            if importlib.util.find_spec(name) is None:
                continue
            importlib.import_module(name)
            print(name)
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "nsa.runfiles" in out.stdout.split()


def test_nsa_launch_help_without_torch():
    code = "import sys; sys.argv = ['nsa-launch', '--help']\nfrom launcher.cli import main\nmain()"
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "Usage: nsa-launch" in out.stdout


HOST_BLOCKED = ["torch", "yaml", "pydantic", "click", "rich", "paramiko", "fabric", "textual", "psutil"]


def test_host_agent_modules_need_only_the_standard_library_and_libtmux():
    """launcher/host/ runs on a host that may have nothing but a bare python with libtmux: every module
    of it imports where the laptop side's dependencies are absent."""
    code = textwrap.dedent(
        f"""
        import sys
        for name in {HOST_BLOCKED!r}:
            sys.modules[name] = None
        import importlib, pkgutil, launcher.host
        names = [m.name for m in pkgutil.walk_packages(launcher.host.__path__, "launcher.host.")]
        for name in names:
            importlib.import_module(name)
        print(sorted(names))
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "launcher.host.tmux" in out.stdout and "launcher.host.gpu" in out.stdout
