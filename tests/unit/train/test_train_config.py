"""The config schema: shipped configs load, errors name file/key/value/fix, overrides validate like
the file, the hash and YAML dump are faithful, and the schema stays importable without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nsa.train.config import ConfigError, TrainConfig, load_config, parse_override

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs"
# The world size each shipped config is written for (its global_batch check needs it).
WORLD = {
    "tiny.yaml": 2,
    "bench_20m_seq4096.yaml": 1,
    "m7c_125m.yaml": 1,
    "m7c_125m_2xa100_production.yaml": 2,
    "long_context.yaml": 1,
    "m7c_64k.yaml": 1,
}


@pytest.mark.parametrize("name", sorted(WORLD))
def test_shipped_configs_load_and_round_trip(name: str, tmp_path: Path) -> None:
    cfg = load_config(CONFIGS / name, world_size=WORLD[name])
    dumped = tmp_path / "resolved.yaml"
    dumped.write_text(cfg.to_yaml())
    again = load_config(dumped, world_size=WORLD[name])
    assert again == cfg
    assert again.config_hash() == cfg.config_hash()


def test_every_config_file_is_covered() -> None:
    assert {p.name for p in CONFIGS.glob("*.yaml")} == set(WORLD)


def test_m7c_configs_match_the_issue() -> None:
    one = load_config(CONFIGS / "m7c_125m.yaml")
    two = load_config(CONFIGS / "m7c_125m_2xa100_production.yaml", world_size=2)
    m = one.model
    assert (m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim) == (768, 12, 12, 2, 64)
    n = m.nsa
    assert (n.block_len, n.block_stride, n.sel_block, n.n_sel, n.window) == (32, 16, 64, 16, 512)
    assert (one.train.seq_len, one.train.steps, one.train.warmup_steps, one.train.lr) == (
        2048,
        50000,
        2000,
        2e-4,
    )
    assert one.data.source == "fineweb_edu" and one.data.tokenizer == "byte"
    assert one.train.dtype == "bf16"
    # >= 40 GB GPUs: no recomputation, per-block compile (issue 23); the old boolean still loads.
    assert (one.parallel.activation_checkpointing, one.parallel.compile) == ("none", True)
    assert two.parallel == one.parallel.model_copy(update={"timeout_s": two.parallel.timeout_s})
    old = load_config(CONFIGS / "m7c_125m.yaml", ["parallel.activation_checkpointing=true"])
    assert old.parallel.activation_checkpointing == "full"
    # Same model and same tokens per optimizer step on 1 and on 2 GPUs: curves compare step for step.
    assert two.model == one.model
    assert two.tokens_per_step(2) == one.tokens_per_step(1)
    assert load_config(CONFIGS / "long_context.yaml").train.seq_len == 32768


def test_hash_changes_with_any_value_and_yaml_is_resolved() -> None:
    base = load_config(CONFIGS / "tiny.yaml")
    other = load_config(CONFIGS / "tiny.yaml", ["train.lr=0.001"])
    assert base.config_hash() != other.config_hash()
    assert len(base.config_hash()) == 12
    dumped = yaml.safe_load(base.to_yaml())
    assert dumped["telemetry"]["stall_seconds"] == 60  # from the file
    assert dumped["train"]["beta2"] == 0.95  # a default, filled in


def _err(path: Path | None, overrides: list[str] = (), world: int | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load_config(path, overrides, world_size=world)
    return ei.value


def test_unknown_key_in_file_suggests_the_right_one(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("train: {steps: 3, seq_len: 64, batch_size: 2, warmpu_steps: 1}\n")
    e = _err(p)
    assert e.file == str(p) and e.key == "train.warmpu_steps" and e.value == 1
    assert "did you mean 'train.warmup_steps'" in str(e)
    assert str(p) in str(e) and "\n" not in str(e)


def test_a_misspelt_required_key_is_a_rename_not_an_addition(tmp_path: Path) -> None:
    """`stpes:` for the required `steps:` makes pydantic report steps missing first; the fix is to
    rename the key the user wrote, not to add another (the qa walk of 2026-11-27). An unknown key
    with nothing close keeps "remove it." and the known keys."""
    p = tmp_path / "c.yaml"
    p.write_text("train: {stpes: 3, seq_len: 64, batch_size: 2}\n")
    e = _err(p)
    assert e.key == "train.stpes" and e.value == 3
    assert "required key train.steps is missing" in e.problem and e.fix == "rename train.stpes to train.steps"
    assert "also wrong" not in e.problem
    p.write_text("train: {steps: 3, seq_len: 64, batch_size: 2, zzz: 1}\n")
    assert _err(p).fix.startswith("remove it. Known keys there: batch_size,")


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("model: {dimm: 3}\ntrain: {seq_len: 64, batch_size: 0}\n")
    e = _err(p)
    assert "also wrong:" in str(e) and "train.steps" in str(e) and "train.batch_size" in str(e)


def test_unknown_section_and_bad_type(tmp_path: Path) -> None:
    assert "did you mean 'telemetry'" in str(_err(CONFIGS / "tiny.yaml", ["telemetri.stall_seconds=3"]))
    e = _err(CONFIGS / "tiny.yaml", ["train.batch_size=four"])
    assert e.key == "train.batch_size" and e.value == "four" and "integer" in e.problem


def test_nsa_block_sizes_must_divide_as_the_paper_requires() -> None:
    e = _err(CONFIGS / "tiny.yaml", ["model.nsa.block_stride=3"])
    assert "must divide nsa.block_len=8" in str(e) and "try block_stride=" in str(e)
    e = _err(CONFIGS / "tiny.yaml", ["model.nsa.sel_block=12"])
    assert "nsa.block_len=8 must divide nsa.sel_block=12" in str(e)
    assert "n_heads" in str(_err(CONFIGS / "tiny.yaml", ["model.n_kv_heads=3"]))


def test_global_batch_cross_check_names_the_product_and_a_fix() -> None:
    e = _err(CONFIGS / "m7c_125m.yaml", world=2)
    assert e.key == "train.global_batch" and e.value == 64
    assert "8 x 2 x 8 = 128" in e.problem and "train.grad_accum=4" in e.fix
    load_config(CONFIGS / "m7c_125m.yaml", ["train.grad_accum=4"], world_size=2)  # the fix works


def test_vocab_size_auto_and_too_small() -> None:
    assert load_config(CONFIGS / "tiny.yaml").resolved_vocab_size() == 257
    e = _err(CONFIGS / "tiny.yaml", ["model.vocab_size=100"])
    assert e.key == "model.vocab_size" and ">= 257" in e.fix


def test_bad_overrides_and_files(tmp_path: Path) -> None:
    assert "section.key=value" in str(_err(CONFIGS / "tiny.yaml", ["train.steps"]))
    assert "is a value, not a section" in str(_err(CONFIGS / "tiny.yaml", ["train.steps.x=1"]))
    assert "file not found" in str(_err(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    assert "not valid YAML at line" in str(_err(bad))
    assert "required key is missing" in str(_err(None, ["model.dim=64"]))


def test_override_values_are_yaml_typed() -> None:
    assert parse_override("train.lr=1e-4") == (["train", "lr"], 1e-4)
    assert parse_override("parallel.compile=true") == (["parallel", "compile"], True)
    assert parse_override("data.paths=[a.txt, b.txt]") == (["data", "paths"], ["a.txt", "b.txt"])
    cfg = load_config(CONFIGS / "tiny.yaml", ["train.steps=7", "model.attention=dense"])
    assert (cfg.train.steps, cfg.model.attention) == (7, "dense")


def test_schema_fields_all_documented() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, f in model.model_fields.items():
            ann = f.annotation
            if (
                isinstance(ann, type)
                and issubclass(ann, TrainConfig.__mro__[1])
                and ann.__module__ == TrainConfig.__module__
            ):
                missing += walk(ann)
            elif (
                model.__module__ == TrainConfig.__module__ and model is not TrainConfig and not f.description
            ):
                missing.append(f"{model.__name__}.{name}")
        return missing

    assert walk(TrainConfig) == []


def test_config_module_does_not_import_torch() -> None:
    code = (
        "import sys\nfrom nsa.train.config import load_config\n"
        f"c = load_config({str(CONFIGS / 'tiny.yaml')!r}, ['train.steps=3'], world_size=2)\n"
        "import nsa.train, nsa.train.cli, nsa.train.lr, nsa.telemetry.manifest\n"
        "print('torch' in sys.modules, c.config_hash())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "False"
