"""Profiles: the shipped ones validate against their configs; the embedded default equals cpu.yaml."""

from __future__ import annotations

import pytest
import yaml

from launcher.config.profiles import EMBEDDED_CPU, PROFILES_DIR, available, load_profile
from launcher.core.errors import LaunchError
from nsa.train.config import load_config

SHIPPED = {"cpu", "1xa100", "2xa100", "1xh100", "2xh100", "8xh100", "2x8xh100"}


def test_shipped_profiles_load_and_fit_their_config():
    assert set(available()) >= SHIPPED
    for name in SHIPPED:
        p = load_profile(name)
        cfg = load_config(PROFILES_DIR.parent / p.config, p.overrides, world_size=p.world_size)
        assert cfg.train.device == p.device
    assert load_profile("2x8xh100").nodes == 2 and load_profile("2x8xh100").world_size == 16
    pcie = load_profile("2xa100").env
    assert pcie["NCCL_P2P_DISABLE"] == "1" and pcie["NCCL_IB_DISABLE"] == "1"


def test_h100_profiles_keep_nvlink_and_name_the_family():
    for name in ("1xh100", "2xh100", "8xh100"):
        p = load_profile(name)
        assert p.expect.gpu_name == "H100" and p.expected_gpus == p.nproc_per_node
        assert "NCCL_P2P_DISABLE" not in p.env and "NCCL_SHM_DISABLE" not in p.env  # NVLink stays on
        cfg = load_config(PROFILES_DIR.parent / p.config, p.overrides, world_size=p.world_size)
        assert cfg.global_batch(p.world_size) == 64 and cfg.parallel.compile
        assert cfg.parallel.activation_checkpointing == "none"


def test_production_config_on_one_gpu_says_what_to_set():
    from nsa.train.config import ConfigError

    prod = PROFILES_DIR.parent / "configs" / "m7c_125m_2xa100_production.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(prod, world_size=1)
    assert "set train.grad_accum=8" in str(e.value)
    assert load_config(prod, ["train.grad_accum=8"], world_size=1).global_batch(1) == 64


def test_preflight_names_the_gpus_it_found():
    from launcher.launch.preflight import gpu_found

    assert gpu_found(["NVIDIA H100 80GB HBM3"] * 2) == "2 x NVIDIA H100 80GB HBM3 (H100 SXM)"
    assert gpu_found(["NVIDIA H100 PCIe"]) == "1 x NVIDIA H100 PCIe (H100 PCIe)"
    assert gpu_found(["NVIDIA A100-SXM4-80GB"]) == "1 x NVIDIA A100-SXM4-80GB (A100 80GB SXM)"
    assert gpu_found(["Tesla T4"]) == "1 x Tesla T4" and gpu_found([]) == "no GPU"


def test_embedded_default_equals_cpu_yaml():
    assert yaml.safe_load((PROFILES_DIR / "cpu.yaml").read_text()) == EMBEDDED_CPU
    p = load_profile(None)
    assert p.name == "cpu" and p.device == "cpu" and p.nproc_per_node == 2 and p.expected_gpus == 0


def test_embedded_default_without_profiles_dir(monkeypatch, tmp_path):
    monkeypatch.setattr("launcher.config.profiles.PROFILES_DIR", tmp_path / "absent")
    assert available() == {"cpu": None}
    assert load_profile(None).source == "<embedded cpu profile>"


def test_env_values_coerced_to_strings_and_validated(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("device: cpu\nnproc_per_node: 1\nenv: {OMP_NUM_THREADS: 4, NCCL_P2P_DISABLE: 1}\n")
    p = load_profile(str(f))
    assert p.name == "p" and p.env == {"OMP_NUM_THREADS": "4", "NCCL_P2P_DISABLE": "1"}
    f.write_text("device: cpu\nnproc_per_node: 1\nenv: {NSA_USE_FA2: 1}\n")
    with pytest.raises(LaunchError, match="old trainer"):
        load_profile(str(f))
