"""The env registry: names, types, legacy messages, secrets and masking."""

from __future__ import annotations

import pytest

from launcher.config import envspec
from launcher.core.errors import LaunchError
from nsa.envvars import NSA_ENV


def test_registry_includes_nsa_vars_and_runtime_families():
    assert set(NSA_ENV) <= set(envspec.REGISTRY)
    for prefix in ("NCCL_", "TORCH_NCCL_", "TORCH_", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_", "OMP_", "HF_"):
        assert any(n.startswith(prefix) for n in envspec.REGISTRY), prefix
    assert {"HF_TOKEN", "WANDB_API_KEY"} <= envspec.SECRET_NAMES


@pytest.mark.parametrize(
    "name",
    [
        "NSA_PREFILL_BATCHED",
        "NSA_SEL_RANGES_V2",
        "NSA_DDP_COMPRESS",
        "NSA_DDP_BUCKET_MB",
        "NSA_DDP_DISABLE_GC",
        "NSA_USE_FA2",
    ],
)
def test_legacy_names_say_what_replaces_them(name):
    with pytest.raises(LaunchError) as e:
        envspec.parse_assignments([f"{name}=1"])
    assert "old trainer" in e.value.message and e.value.fix == envspec.LEGACY[name]


def test_legacy_replacements_name_real_config_keys():
    from nsa.train.config import TrainConfig

    sections = {k: m.annotation for k, m in TrainConfig.model_fields.items()}
    for why in envspec.LEGACY.values():
        for token in why.replace("`", " ").replace("(", " ").split():
            if token.count(".") == 1 and token.split(".")[0] in sections and "=" not in token:
                section, key = token.split(".")
                assert key in sections[section].model_fields, (
                    f"{token} named in a legacy message does not exist"
                )


def test_unknown_name_did_you_mean():
    with pytest.raises(LaunchError) as e:
        envspec.parse_assignments(["TORCH_DISTRIBUTED_DEBG=INFO"])
    assert "did you mean TORCH_DISTRIBUTED_DEBUG" in e.value.fix


def test_values_are_typed():
    assert envspec.parse_assignments(
        ["NCCL_DEBUG=INFO", "OMP_NUM_THREADS=4", "NCCL_SOCKET_IFNAME=a b;c"]
    ) == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "NCCL_SOCKET_IFNAME": "a b;c"}
    for bad in (
        "NCCL_P2P_DISABLE=yes",
        "OMP_NUM_THREADS=-1",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=4",
    ):
        with pytest.raises(LaunchError):
            envspec.parse_assignments([bad])
    assert envspec.parse_assignments(
        ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:128"]
    )


def test_secrets_by_name_and_masked():
    vals = envspec.resolve_secrets(["HF_TOKEN"], {"HF_TOKEN": "hf_secretvalue"})
    assert vals == {"HF_TOKEN": "hf_secretvalue"}
    assert envspec.mask({"HF_TOKEN": "hf_secretvalue", "NCCL_DEBUG": "INFO"}) == {
        "HF_TOKEN": "****",
        "NCCL_DEBUG": "INFO",
    }
    assert envspec.scrub("token=hf_secretvalue!", vals) == "token=****!"
    with pytest.raises(LaunchError) as e:
        envspec.check_value(envspec.REGISTRY["HF_TOKEN"], "x\0y", "--secret")
    assert "hf_" not in str(e.value) and "****" in str(e.value)


def test_docs_list_every_variable():
    from launcher.config.profiles import PROJECT_ROOT

    doc = (PROJECT_ROOT / "docs" / "env.md").read_text()
    missing = [n for n in [*envspec.REGISTRY, *envspec.LEGACY, *envspec.INTERNAL] if f"`{n}`" not in doc]
    assert not missing, f"docs/env.md lacks {missing}; regenerate its tables from launcher/config/envspec.py"


def test_user_variables_pass_with_safe_names_and_values():
    got = envspec.parse_assignments(["WANDB_PROJECT=nsa-demo", "MY_FLAG=a b c", "http_proxy=http://p:3128"])
    assert got == {"WANDB_PROJECT": "nsa-demo", "MY_FLAG": "a b c", "http_proxy": "http://p:3128"}
    assert envspec.mask(got) == got  # not secrets: shown as given


@pytest.mark.parametrize(
    "item, words",
    [
        ("NSA_SEQ_LEN=4096", ["old trainer", "train.seq_len"]),  # legacy: refused with its replacement
        ("NSA_SEQLEN=1", ["unknown environment variable"]),  # our family: a typo, not a user variable
        ("NCCL_DEBG=INFO", ["did you mean NCCL_DEBUG"]),
        ("PATH=/tmp", ["unknown environment variable"]),
        ("LD_LIBRARY_PATH=/x", ["unknown environment variable"]),
        ("PYTHONPATH=/x", ["PYTHONPATH"]),
        ("BASH_ENV=/x", ["unknown environment variable"]),
        ("MY_API_KEY=abc", ["looks like a secret", "--secret"]),
        ("MY_FLAG=a\nb", ["not safe", "control character"]),
        ("MY_FLAG=a\tb", ["not safe", "control character"]),  # any control character, tab included
        ("MY_FLAG=" + "x" * 5000, ["not safe", "5000 characters"]),
        ("1BAD=x", ["not a valid environment variable name"]),
    ],
)
def test_unsafe_or_reserved_user_variables_are_refused(item, words):
    with pytest.raises(LaunchError) as e:
        envspec.parse_assignments([item])
    text = e.value.message + " " + e.value.fix
    assert all(w in text for w in words), text
