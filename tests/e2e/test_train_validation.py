"""The validation gaps of issue 13 (nsa-train side): each is exit 2, one paragraph naming the value
and the fix, and no run dir created. Runs nsa-train in-process (nothing here imports torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from nsa.train.cli import main
from nsa.train.config import ConfigError, load_config
from tests.assets.trainrun import REPO, TINY

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT", "NSA_LOG_LEVEL", "NSA_TERM_SAVE_S"):
        monkeypatch.delenv(k, raising=False)


def _fails(capsys, tmp_path: Path, *sets: str, config: Path = TINY) -> str:
    run = tmp_path / "run"
    argv = ["--config", str(config), "--run-dir", str(run)]
    for s in sets:
        argv += ["--set", s]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert not run.exists()
    assert "Fix" in err or "fix" in err
    return err


@pytest.mark.parametrize(
    ("sets", "needles"),
    [
        (["train.lr=1e400"], ["train.lr", "finite"]),
        (["train.lr=.inf"], ["train.lr", "finite"]),
        (["train.lr=.nan"], ["train.lr"]),
        (["train.steps=1e23"], ["train.steps"]),
        (["train.steps=2000000000"], ["train.steps", "1000000000"]),
        (["telemetry.stall_seconds=1e400"], ["telemetry.stall_seconds"]),
        (["data.val_fraction=0", "train.eval_every=10"], ["data.val_fraction", "train.eval_every=0"]),
    ],
)
def test_absurd_or_non_finite_numbers_are_exit_2(tmp_path, capsys, sets, needles) -> None:
    err = _fails(capsys, tmp_path, *sets)
    for n in needles:
        assert n in err, err


def test_val_fraction_zero_is_allowed_without_eval() -> None:
    cfg = load_config(TINY, ["data.val_fraction=0", "train.eval_every=0"])
    assert cfg.data.val_fraction == 0


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys) -> None:
    text = TINY.read_text()
    assert "\ntrain:\n" in text
    bad = tmp_path / "dup.yaml"
    bad.write_text(text.replace("\ntrain:\n", "\ntrain:\n  steps: 40\n  steps: 50000\n", 1))
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert e.value.key == "steps" and "twice" in e.value.problem
    err = _fails(capsys, tmp_path, config=bad)
    assert "steps" in err and "twice" in err and str(bad) in err
    # a repeated section is refused the same way
    bad.write_text(text + "\ntrain:\n  steps: 3\n")
    assert "twice" in _fails(capsys, tmp_path, config=bad)


def test_bogus_log_level_is_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("NSA_LOG_LEVEL", "bogus")
    err = _fails(capsys, tmp_path)
    assert "NSA_LOG_LEVEL='bogus'" in err and "info" in err


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="the check is for hosts without a GPU")
def test_cuda_device_without_a_gpu_is_exit_2_and_no_run_dir(tmp_path, capsys) -> None:
    err = _fails(capsys, tmp_path, "train.device=cuda")
    assert "train.device is 'cuda'" in err and "no NVIDIA GPU" in err


def test_tiktoken_is_in_the_train_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.split(">")[0].split("=")[0].strip() == "tiktoken" for r in extras["train"])
