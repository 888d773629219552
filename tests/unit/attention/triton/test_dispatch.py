"""NSAAttention's backend dispatch: auto/eager/triton, the config key, the CPU error, the banner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nsa.attention import NSAAttention
from nsa.attention import nsa as nsa_mod
from nsa.attention.nsa import resolve_backend
from nsa.train.cli import backend_problem
from nsa.train.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[4]
TINY = REPO / "configs" / "tiny.yaml"


def _env_without_interpreter() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CONFIG", "RANK", "WORLD_SIZE")
    }
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_conftest_sets_the_interpreter() -> None:
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_resolution_rules(monkeypatch) -> None:
    assert resolve_backend("auto", "cpu") == "eager"
    assert resolve_backend("auto", "meta") == "eager"
    assert resolve_backend("eager", "cuda") == "eager"
    assert resolve_backend("auto", "cuda") == "triton"  # triton is installed here (dev extra)
    assert resolve_backend("triton", "cuda") == "triton"
    assert resolve_backend("triton", "cpu") == "triton"  # interpreter on (conftest)
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match=r"TRITON_INTERPRET=1.*Fix"):
        resolve_backend("triton", "cpu")
    with pytest.raises(ValueError, match="CUDA only"):
        resolve_backend("triton", "meta")
    monkeypatch.setattr(nsa_mod._triton_pkg, "available", lambda: False)
    assert resolve_backend("auto", "cuda") == "eager"  # a CUDA torch without triton still runs
    with pytest.raises(ValueError, match="not installed"):
        resolve_backend("triton", "cuda")


def test_constructor_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend='cuda' must be one of 'auto', 'eager', 'triton'"):
        NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, backend="cuda")


@pytest.fixture(scope="module")
def fresh_cpu_process() -> subprocess.CompletedProcess:
    """One fresh process without the interpreter for the two tests below (a python start with torch is
    most of either's cost): the auto backend on CPU runs forward, backward and the selection and prints
    what it resolved and whether any kernel module was imported, then a backend='triton' module's
    forward on CPU tensors, which must fail."""
    code = (
        "import sys, torch\n"
        "from nsa.attention import NSAAttention\n"
        "a = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32)\n"
        "y = a(torch.randn(1, 40, 32)); y.sum().backward()\n"
        "a.selected_blocks(torch.randn(1, 40, 32))\n"
        "print(a.resolved_backend(torch.device('cpu')), any(m.startswith('nsa.attention.triton.') and "
        "m != 'nsa.attention.triton.spec' for m in sys.modules), flush=True)\n"
        "a = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, backend='triton')\n"
        "a(torch.randn(1, 40, 32))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env_without_interpreter(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_auto_on_cpu_is_eager_and_imports_no_kernel_module(fresh_cpu_process) -> None:
    # A fresh process: the auto backend on CPU must run eager and never import a kernel module
    # (importing one decides interpretation for the whole process). Its line is printed before the
    # triton module is built; the process's only error is that module's (the test below).
    out = fresh_cpu_process
    assert out.stdout.split() == ["eager", "False"], out.stderr
    assert out.stderr.count("Traceback") == 1 and "ValueError: NSAAttention: backend='triton'" in out.stderr


def test_triton_on_cpu_without_the_interpreter_is_a_clear_error(fresh_cpu_process) -> None:
    out = fresh_cpu_process
    assert out.returncode != 0
    assert "ValueError: NSAAttention: backend='triton' got CPU tensors" in out.stderr
    assert "TRITON_INTERPRET=1" in out.stderr and "backend='auto'/'eager'" in out.stderr


def test_forward_uses_the_ops_bound_at_construction(monkeypatch) -> None:
    # The ops are bound per device type when the module is built; a forward only looks them up by
    # x.device (a lazy import or resolution inside forward made torch.compile compile nothing).
    a = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, backend="auto")
    assert a._dispatch["cpu"] is nsa_mod._EAGER and a._dispatch["meta"] is nsa_mod._EAGER
    t = NSAAttention(32, 4, 2, 8, 8, 4, 16, 4, 32, backend="triton")
    assert t._dispatch["cpu"] is nsa_mod._ops("triton") and "meta" not in t._dispatch  # interpreter on

    def boom(*args: object) -> None:
        raise AssertionError("resolved or imported inside forward")

    monkeypatch.setattr(nsa_mod, "_ops", boom)
    monkeypatch.setattr(nsa_mod, "resolve_backend", boom)
    a(torch.randn(1, 20, 32))
    a.selected_blocks(torch.randn(1, 20, 32))


def test_config_key(tmp_path) -> None:
    assert load_config(TINY).model.nsa.backend == "auto"
    for b in ("eager", "triton", "auto"):
        assert load_config(TINY, [f"model.nsa.backend={b}"]).model.nsa.backend == b
    with pytest.raises(ConfigError) as e:
        load_config(TINY, ["model.nsa.backend=cuda"])
    assert e.value.key == "model.nsa.backend" and e.value.value == "cuda"
    assert "'auto', 'eager' or 'triton'" in str(e.value) and "Fix:" in str(e.value)


def test_model_passes_the_backend() -> None:
    from nsa.model import Transformer

    cfg = load_config(TINY, ["model.nsa.backend=eager"])
    m = Transformer(cfg.model, cfg.resolved_vocab_size())
    assert {blk.attn.backend for blk in m.blocks} == {"eager"}


def test_backend_problem_is_checked_before_torch() -> None:
    assert backend_problem("nsa", "auto", "cpu", gpu=False) is None
    assert backend_problem("dense", "triton", "cpu", gpu=False) is None
    assert backend_problem("nsa", "triton", "cuda", gpu=False) is None
    assert backend_problem("nsa", "triton", "cpu", gpu=False) is None  # interpreter on here
    os.environ.pop("TRITON_INTERPRET")
    try:
        msg = backend_problem("nsa", "triton", "auto", gpu=False)
        assert msg and "model.nsa.backend" in msg and "Fix:" in msg
        assert backend_problem("nsa", "triton", "auto", gpu=True) is None
    finally:
        os.environ["TRITON_INTERPRET"] = "1"


def test_nsa_train_refuses_triton_on_cpu_with_exit_2(tmp_path) -> None:
    cmd = [sys.executable, "-m", "nsa.train", "--config", str(TINY), "--run-dir", str(tmp_path / "r")]
    cmd += ["--set", "train.device=cpu", "--set", "model.nsa.backend=triton"]
    out = subprocess.run(
        cmd, cwd=REPO, env=_env_without_interpreter(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr
    assert "model.nsa.backend = 'triton'" in out.stderr and "TRITON_INTERPRET=1" in out.stderr
    assert not (tmp_path / "r").exists()  # nothing half-started


def test_banner_names_the_resolved_backend(tmp_path) -> None:
    cmd = [sys.executable, "-m", "nsa.train", "--config", str(TINY), "--run-dir", str(tmp_path / "r")]
    cmd += ["--set", "train.device=cpu", "--set", "train.steps=1", "--set", "train.warmup_steps=0"]
    env = _env_without_interpreter()
    env["NSA_MALLOC"] = "system"
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if "attention:" in ln]
    assert lines == ["[nsa] attention: nsa (eager); model.nsa.backend=auto"], out.stdout[:2000]
    assert "TF32" not in out.stdout  # CPU: no TF32 claim


def test_fsdp_on_cpu_with_a_torch_whose_fsdp2_fails_there_is_refused() -> None:
    from nsa.train.cli import fsdp_cpu_problem

    msg = fsdp_cpu_problem("fsdp", "auto", gpu=False, torch_version="2.6.0+cu124")
    assert msg and "found 2.6.0+cu124" in msg and "parallel.strategy=ddp" in msg
    assert fsdp_cpu_problem("fsdp", "cpu", gpu=True, torch_version="2.6.0") is not None
    assert fsdp_cpu_problem("fsdp", "cuda", gpu=True, torch_version="2.6.0") is None  # CUDA FSDP2 is fine
    assert fsdp_cpu_problem("ddp", "cpu", gpu=False, torch_version="2.6.0") is None
    assert fsdp_cpu_problem("fsdp", "cpu", gpu=False, torch_version="2.13.0+cpu") is None
    assert fsdp_cpu_problem("fsdp", "cpu", gpu=False) is None  # this venv's torch (CI: 2.13)
