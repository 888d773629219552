"""`up` refuses model.nsa.backend=triton on a CPU profile before any host is touched (nsa-train
would refuse it at boot, after the run dir and tmux session exist)."""

from __future__ import annotations

import pytest

from launcher.core.errors import LaunchError
from launcher.launch.plan import UpOptions, plan_run


def test_triton_backend_on_the_cpu_profile_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    with pytest.raises(LaunchError) as e:
        plan_run(UpOptions(sets=["model.nsa.backend=triton"], name="t1"))
    assert e.value.exit_code == 2 and "model.nsa.backend" in e.value.message
    assert "backend=auto" in e.value.fix
    # auto, a dense model, and the interpreter asked for explicitly are fine
    assert plan_run(UpOptions(sets=["model.nsa.backend=auto"], name="t2")).run == "t2"
    assert plan_run(UpOptions(sets=["model.nsa.backend=triton", "model.attention=dense"], name="t3"))
    assert plan_run(UpOptions(sets=["model.nsa.backend=triton"], env=["TRITON_INTERPRET=1"], name="t4"))


def test_a_config_error_names_the_profiles_overrides_apart_from_set(tmp_path, monkeypatch):
    """The `cpu` profile's own `overrides:` (train.device=cpu) are not shown as if the user had typed
    them after --set."""
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    with pytest.raises(LaunchError) as e:
        plan_run(UpOptions(profile="cpu", sets=["train.stepz=3"], name="t5"))
    assert e.value.exit_code == 2
    assert "(with profile cpu's overrides train.device=cpu; --set train.stepz=3)" in e.value.message, e.value
    assert "train.steps" in e.value.fix
