"""DataConfig validation, vocabulary sizes, and the torch-free import boundary of `nsa.data`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from nsa.data import DataConfig, eod_token_for, vocab_size_for


def test_default_is_bundled_sample_with_byte_tokenizer():
    cfg = DataConfig()
    assert (cfg.source, cfg.tokenizer) == ("sample", "byte")
    assert vocab_size_for(cfg) == 257
    assert eod_token_for(cfg) == 256


def test_gpt2_vocab_needs_no_io():
    cfg = DataConfig(tokenizer="gpt2", tokenizer_path="/does/not/exist")
    assert vocab_size_for(cfg) == 50257
    assert eod_token_for(cfg) == 50256


def test_unknown_key_is_rejected_and_the_training_config_suggests_the_right_one(tmp_path):
    with pytest.raises(ValidationError) as e:
        DataConfig.model_validate({"source": "files", "path": ["x.jsonl"]})
    assert e.value.errors()[0]["type"] == "extra_forbidden" and e.value.errors()[0]["loc"] == ("path",)
    # The YAML path users take: the trainer's config loader owns the did-you-mean wording.
    from nsa.train.config import ConfigError, load_config

    cfg = tmp_path / "train.yaml"
    cfg.write_text("data:\n  source: files\n  path: [x.jsonl]\n")
    with pytest.raises(ConfigError) as ce:
        load_config(cfg)
    msg = str(ce.value)
    assert str(cfg) in msg and "data.path" in msg and "did you mean 'data.paths'" in msg


def test_files_source_without_paths_names_the_fix():
    with pytest.raises(ValidationError, match=r"data\.paths is empty"):
        DataConfig(source="files")


@pytest.mark.parametrize(
    "bad", [{"source": "fineweb"}, {"val_fraction": -0.1}, {"val_fraction": 0.7}, {"prefetch": 0}]
)
def test_bad_values_are_rejected(bad):
    with pytest.raises(ValidationError):
        DataConfig.model_validate(bad)


def test_import_is_torch_free_and_lazy():
    code = (
        "import sys\n"
        "from nsa.data import DataConfig, vocab_size_for, build_loader\n"
        "vocab_size_for(DataConfig())\n"
        "heavy = [m for m in ('torch', 'datasets', 'pyarrow', 'numpy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
