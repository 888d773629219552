"""Registry round trip and location override; host-env spec hashing; what sync sends."""

from __future__ import annotations

from launcher.config.profiles import PROJECT_ROOT, HostEnv
from launcher.launch.hostenv import EnvPlan, requirements, spec_hash, venv_phases
from launcher.run import registry
from launcher.ssh.hosts import local_host, parse_target
from launcher.ssh.sync import _excluded, project_files


def test_registry_roundtrip_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("NSA_LAUNCH_HOME", str(tmp_path))
    assert registry.home() == tmp_path and registry.all_runs() == []
    for i, name in enumerate(["a", "b"]):
        node = registry.NodeRecord(
            parse_target("u@h:2") if i else local_host(), "/w", "/py", f"/w/runs/{name}"
        )
        registry.save(
            registry.RunRecord(run=name, profile="cpu", created=100.0 + i, nodes=[node], secrets=["HF_TOKEN"])
        )
    runs = registry.all_runs()
    assert [r.run for r in runs] == ["b", "a"] and runs[0].host == "u@h:2" and runs[1].is_local
    assert registry.load("b") == runs[0] and registry.load("zzz") is None
    assert "HF_TOKEN" in (tmp_path / "runs" / "a.json").read_text()  # the name, and only the name


def test_spec_hash_changes_with_the_dependency_spec(tmp_path):
    py = tmp_path / "pyproject.toml"
    py.write_text("[project]\ndependencies=['a']\n")
    h1 = spec_hash(HostEnv(), pyproject=py)
    assert spec_hash(HostEnv(), pyproject=py) == h1
    assert spec_hash(HostEnv(extras=["train", "dev"]), pyproject=py) != h1
    py.write_text(
        "[project]\ndependencies=['a','b']\n[project.optional-dependencies]\ntrain=['b','c>=1; x']\n"
    )
    assert spec_hash(HostEnv(), pyproject=py) != h1
    assert requirements(["train"], py) == ["a", "b", "c>=1; x"]
    phases = venv_phases("/w d", HostEnv(pip_args=["--index-url", "https://x/$(y)"]), EnvPlan("cuda"), h1)
    script = " && ".join(s for _, s in phases)
    assert f"touch '/w d/.venv/.nsa-spec-{h1}'" in script and "'https://x/$(y)'" in script


def test_sync_sends_the_project_not_artifacts():
    files = project_files(PROJECT_ROOT)
    assert "launcher/host/__main__.py" in files and "pyproject.toml" in files and "profiles/cpu.yaml" in files
    assert not any(f.startswith((".venv/", "runs/", ".git/")) or "/__pycache__/" in f for f in files)
    assert (
        _excluded("runs/x/train.log")
        and _excluded("a/checkpoints/step-1/x.pt")
        and not _excluded("nsa/model.py")
    )
