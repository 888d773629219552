"""`source: fineweb_edu` on a local copy laid out like the hub repo, as a user downloads one subset
of it (product QA of the data pipeline, 2026-11-27): the config's default `hf_name` (sample-10BT)
left as it is, a split the copy lacks, an empty directory. Each was found by `datasets` on the
loader's thread, after torch and the process group had started (28 s on the loaded dev machine, a
run dir left); nsa-train now refuses them before torch, torch-free and without `datasets`."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsa.data import DataConfig, DataError
from nsa.data.sources import preflight
from nsa.train.cli import main
from tests.assets.trainrun import TINY

README = """---
license: odc-by
configs:
- config_name: CC-MAIN-2024-10
  data_files:
  - split: train
    path: data/CC-MAIN-2024-10/*
---
# one subset of HuggingFaceFW/fineweb-edu, downloaded
"""


def local_copy(root: Path, readme: bool = True) -> Path:
    (root / "data" / "CC-MAIN-2024-10").mkdir(parents=True)
    pq.write_table(
        pa.table({"text": ["some text " * 20] * 4}), root / "data" / "CC-MAIN-2024-10" / "000_00000.parquet"
    )
    if readme:
        (root / "README.md").write_text(README)
    return root


def hub(root: Path, **kw: object) -> DataConfig:
    return DataConfig(source="fineweb_edu", hf_path=str(root), **kw)


def test_a_local_copy_as_configured_passes(tmp_path: Path) -> None:
    preflight(hub(local_copy(tmp_path / "a"), hf_name="CC-MAIN-2024-10"))
    preflight(hub(local_copy(tmp_path / "b", readme=False), hf_name=None))
    preflight(hub(tmp_path / "a", hf_name=None))  # datasets picks the copy's own default


@pytest.mark.parametrize(
    ("layout", "kw", "said"),
    [
        ("readme", {}, r"data\.hf_name = 'sample-10BT' is not a config of .*\['CC-MAIN-2024-10'\]"),
        (
            "readme",
            {"hf_name": "CC-MAIN-2024-10", "hf_split": "validation"},
            r"data\.hf_split = 'validation'.*\['train'\]",
        ),
        ("bare", {}, r"data\.hf_name = 'sample-10BT'.*no `configs:`.*data\.hf_name: null"),
        ("empty", {}, r"holds no data files"),
    ],
)
def test_a_local_copy_that_cannot_give_the_configured_subset_is_exit_2_before_torch(
    tmp_path: Path, capsys, layout: str, kw: dict, said: str
) -> None:
    root = tmp_path / "copy"
    if layout == "empty":
        root.mkdir()
        (root / ".cache").mkdir()
        (root / ".cache" / "x.parquet").write_bytes(b"")  # the hub client's cache is not data
    else:
        local_copy(root, readme=layout == "readme")
    with pytest.raises(DataError, match=said):
        preflight(hub(root, **kw))
    run = tmp_path / "run"
    argv = ["--config", str(TINY), "--run-dir", str(run), "--set", "data.source=fineweb_edu"]
    argv += ["--set", f"data.hf_path={root}"] + [a for k, v in kw.items() for a in ("--set", f"data.{k}={v}")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"data.hf_path = '{root}'" in err, err
    assert not run.exists()
