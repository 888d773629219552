"""nsa-train's front door: bad input exits 2 with one clear paragraph, before torch is imported or
anything is written; the CONFIG environment variable can never silently choose the config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nsa.train.cli import main
from tests.assets.trainrun import REPO, TINY, clean_env, train_cmd

pytestmark = pytest.mark.e2e


def _main(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("sets", "needles"),
    [
        (["model.n_layrs=2"], ["model.n_layrs", "did you mean 'model.n_layers'"]),
        (["train.lr=fast"], ["train.lr", "'fast'", "valid number"]),
        (["model.nsa.block_stride=3"], ["block_stride=3 must divide nsa.block_len=8"]),
        (["train.global_batch=5"], ["train.global_batch", "4 x 1 x 1 = 4"]),
        (["train.steps"], ["section.key=value"]),
    ],
)
def test_bad_config_exits_2_and_creates_nothing(tmp_path: Path, capsys, monkeypatch, sets, needles) -> None:
    monkeypatch.delenv("CONFIG", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run)]
    for s in sets:
        argv += ["--set", s]
    rc, err = _main(capsys, *argv)
    assert rc == 2
    for n in needles:
        assert n in err, err
    assert "Fix:" in err and (str(TINY) in err or "config error in --set" in err)
    assert not run.exists()


def test_config_env_that_disagrees_is_an_error(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CONFIG", str(REPO / "configs" / "m7c_125m.yaml"))
    rc, err = _main(capsys, "--config", str(TINY), "--run-dir", str(tmp_path / "r"))
    assert rc == 2 and "CONFIG=" in err and "disagrees with --config" in err and "unset CONFIG" in err
    monkeypatch.setenv("CONFIG", str(TINY))  # agreeing is fine
    rc, out = (
        main(["--config", str(TINY), "--run-dir", str(tmp_path / "r"), "--check"]),
        capsys.readouterr().out,
    )
    assert rc == 0 and "hash" in out


def test_existing_checkpoints_need_resume(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CONFIG", raising=False)
    ck = tmp_path / "checkpoints" / "step-00000004"
    ck.mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").write_text("step-00000004\n")
    rc, err = _main(capsys, "--config", str(TINY), "--run-dir", str(tmp_path))
    assert rc == 2 and "--resume" in err


def test_bad_fault_variable_is_named(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CONFIG", raising=False)
    monkeypatch.setenv("NSA_FAULT", "explode")
    rc, err = _main(capsys, "--config", str(TINY), "--run-dir", str(tmp_path / "r"))
    assert rc == 2 and "NSA_FAULT='explode'" in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("rank0_delay", [0.0, 3.0])
def test_bad_input_under_torchrun_is_printed_once_even_when_rank0_is_late(
    tmp_path: Path, rank0_delay
) -> None:
    # Real torchrun, 2 ranks, both fail validation. With rank 0 late (cold start), rank 1 exits first
    # and torchrun SIGTERMs rank 0 before it prints: when only rank 0 printed, the log held no cause
    # at all (seen in CI). Now rank 0 prints at once; another rank after FAIL_GRACE_S, tagged.
    from nsa.train.cli import FAIL_GRACE_S

    assert rank0_delay in (0.0, FAIL_GRACE_S + 1)
    script = tmp_path / "late_rank0.py"
    script.write_text(
        "import os, sys, time\n"
        f"if os.environ['RANK'] == '0':\n    time.sleep({rank0_delay})\n"
        "from nsa.train.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    cmd = [*train_cmd(2)[:-2], str(script), "--config", str(TINY), "--run-dir", str(tmp_path / "r")]
    p = subprocess.run(
        cmd,
        env=clean_env(NSA_FAULT="explode", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = [ln for ln in p.stderr.splitlines() if "NSA_FAULT='explode'" in ln]
    assert p.returncode != 0 and len(said) == 1, p.stderr
    tag = "nsa-train: " if rank0_delay == 0 else "nsa-train (rank 1): "
    assert said[0].startswith(tag) and "Fix:" in said[0], p.stderr


def test_bad_malloc_variable_is_named(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CONFIG", raising=False)
    monkeypatch.setenv("NSA_MALLOC", "fast")
    rc, err = _main(capsys, "--config", str(TINY), "--run-dir", str(tmp_path / "r"))
    assert rc == 2 and "NSA_MALLOC='fast'" in err and "auto, tcmalloc, system" in err and "Fix:" in err
    assert not (tmp_path / "r").exists()


def test_console_script_exit_code_and_no_torch_on_bad_input(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom nsa.train.cli import main\n"
        f"rc = main(['--config', {str(TINY)!r}, '--run-dir', {str(tmp_path / 'r')!r}, '--set', 'train.stepz=1'])\n"
        "print('torch' in sys.modules)\nsys.exit(rc)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and p.stdout.strip() == "False"
    assert "did you mean 'train.steps'" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "nsa.train", "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "--config" in p.stderr
