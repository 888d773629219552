"""Config and command-line checks a new user's first runs hit, all before torch starts (in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsa.train.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "configs" / "tiny.yaml"


def test_long_context_eval_without_held_out_text_is_refused_at_load() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(TINY, ["train.eval_every=0", "data.val_fraction=0", "eval.long_context_every=10"])
    assert e.value.key == "data.val_fraction" and "eval.long_context_every=10" in str(e.value)
    assert "Fix: set eval.long_context_every=0" in str(e.value)
    load_config(TINY, ["train.eval_every=0", "data.val_fraction=0"])  # nothing reads held-out text


# --- nsa-train's own checks before torch: in-process main(), nothing made on disk ----------------
@pytest.fixture
def cli(monkeypatch, capsys):
    from nsa.train.cli import main

    for k in ("CONFIG", "WORLD_SIZE", "RANK", "NSA_FAULT", "NSA_MALLOC", "OMP_NUM_THREADS", "WANDB_PROJECT"):
        monkeypatch.delenv(k, raising=False)

    def run(*argv: str) -> tuple[int, str]:
        rc = main(["--config", str(TINY), *argv])
        return rc, capsys.readouterr().err

    return run


def _files(paths: str) -> list[str]:
    return ["--set", "data.source=files", "--set", f"data.paths={paths}"]


def test_data_paths_that_do_not_resolve_are_exit_2_before_the_run_dir_exists(
    cli, tmp_path, monkeypatch
) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "notes.md").write_text("text")
    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    cases = {
        "[missing.txt]": (
            "'missing.txt' does not exist",
            "relative paths are read from the working directory",
        ),
        "[corpus/*.jsonl]": ("matched no files", str(tmp_path)),
        f"[{tmp_path / 'dir'}]": ("holds no .jsonl", "data.paths = "),
        f"[{tmp_path / 'notes.md'}]": ("unsupported extension", "notes.md"),
        f"[{tmp_path / 'empty.txt'}]": ("every file is empty", "empty.txt"),
    }
    for paths, (problem, detail) in cases.items():
        rc, err = cli("--run-dir", str(run), *_files(paths))
        assert rc == 2 and problem in err and detail in err, (paths, err)
        assert f"data error in {TINY}: data.paths = " in err, err
        assert not run.exists(), paths  # nothing made: the loader found these after torch had started
    (tmp_path / "ok.txt").write_text("some text")
    rc, err = cli("--run-dir", str(run), "--check", *_files("[ok.txt, empty.txt]"))
    assert rc == 0, err  # one file with text is enough (and --check never reads the data)


def test_hf_path_written_as_a_missing_directory_is_exit_2_before_the_run_dir_exists(cli, tmp_path) -> None:
    run = tmp_path / "run"
    for path, detail in ((str(tmp_path / "fineweb"), "data.hf_path = "), ("./fineweb", "working directory")):
        rc, err = cli(
            "--run-dir", str(run), "--set", "data.source=fineweb_edu", "--set", f"data.hf_path={path}"
        )
        assert rc == 2 and f"local directory {path!r} does not exist" in err and detail in err, err
        assert "org/name" in err and not run.exists(), err


def test_resume_of_a_dir_that_is_not_a_run_dir_is_exit_2(cli, tmp_path) -> None:
    typo = tmp_path / "runs" / "tyni"
    rc, err = cli("--run-dir", str(typo), "--resume")
    assert rc == 2 and "does not exist, so there is nothing to resume" in err and "drop --resume" in err, err
    assert not typo.exists()
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("not a run")
    rc, err = cli("--run-dir", str(other), "--resume")
    assert rc == 2 and "is not a run dir" in err, err
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]


@pytest.mark.parametrize("bad", ["abc", "0", "-2", "4,0", "1.5", "4;2"])
def test_omp_num_threads_that_libgomp_ignores_is_exit_2(cli, tmp_path, monkeypatch, bad) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    rc, err = cli("--run-dir", str(tmp_path / "run"))
    assert rc == 2 and f"OMP_NUM_THREADS={bad!r}" in err and "Fix: set e.g. OMP_NUM_THREADS=4" in err, err
    assert not (tmp_path / "run").exists()


def test_omp_num_threads_accepts_what_libgomp_accepts() -> None:
    from nsa.train.cli import check_omp_threads

    for ok in (None, "", "1", "4", "16", "4,2", " 8 "):
        assert check_omp_threads(ok) is None, ok
