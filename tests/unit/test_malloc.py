"""NSA_MALLOC: what each setting decides on which host, that the decision reads the real library
and the real process maps, and that tcmalloc really stops the page faults glibc pays on reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsa import malloc

LIB = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


@pytest.mark.parametrize(
    ("value", "device", "gpu", "lib", "want_lib", "note"),
    [
        (None, "cpu", False, LIB, LIB, "auto: CPU run"),
        ("auto", "auto", False, LIB, LIB, "auto: CPU run"),
        ("AUTO", "auto", True, LIB, None, "auto: GPU run"),
        ("auto", "cuda", False, LIB, None, "auto: GPU run"),
        ("", "cpu", False, None, None, "apt-get install -y libtcmalloc-minimal4"),
        ("tcmalloc", "cuda", True, LIB, LIB, "NSA_MALLOC=tcmalloc"),
        ("system", "cpu", False, LIB, None, "NSA_MALLOC=system"),
    ],
)
def test_plan_per_setting_and_host(value, device, gpu, lib, want_lib, note):
    p = malloc.plan(value, device, gpu_present=gpu, lib=lib)
    assert p.lib == want_lib and note in p.note


@pytest.mark.parametrize(
    ("value", "lib", "needles"),
    [
        ("fast", LIB, ["NSA_MALLOC='fast'", "auto, tcmalloc, system", "Fix:"]),
        ("tcmalloc", None, ["NSA_MALLOC=tcmalloc", "apt-get install -y libtcmalloc-minimal4"]),
    ],
)
def test_bad_settings_name_the_variable_and_the_fix(value, lib, needles):
    with pytest.raises(ValueError) as e:
        malloc.plan(value, "cpu", gpu_present=False, lib=lib)
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_find_tcmalloc_looks_in_the_given_dirs(tmp_path: Path):
    assert malloc.find_tcmalloc([str(tmp_path)]) is None
    (tmp_path / "libtcmalloc_minimal.so.4").write_bytes(b"")
    assert malloc.find_tcmalloc([str(tmp_path / "nope"), str(tmp_path)]) == str(
        tmp_path / "libtcmalloc_minimal.so.4"
    )


def test_loaded_allocator_reads_the_maps(tmp_path: Path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert malloc.loaded_allocator(str(maps)) == "glibc"
    maps.write_text(maps.read_text() + "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libtcmalloc_minimal.so.4\n")
    assert malloc.loaded_allocator(str(maps)) == "tcmalloc"
    assert malloc.loaded_allocator(str(tmp_path / "missing")) == "glibc"


# Allocate, touch and free a 256 MB tensor three times; minor page faults of rounds 2-3.
_PROBE = textwrap.dedent(
    """
    import json, resource, torch
    from nsa.malloc import loaded_allocator
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 * 2**20); del x
    f0 = faults()
    for _ in range(2):
        x = torch.ones(64 * 2**20); del x
    print(json.dumps({"allocator": loaded_allocator(), "faults": faults() - f0}))
    """
)


def test_tcmalloc_reuses_large_blocks_where_glibc_faults_them_again():
    lib = malloc.find_tcmalloc()
    assert lib, "scripts/setup.sh installs libtcmalloc-minimal4; run it"
    rows = {}
    for name, extra in (("glibc", {}), ("tcmalloc", {"LD_PRELOAD": lib})):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | extra
        p = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        rows[name] = json.loads(p.stdout)
    assert rows["glibc"]["allocator"] == "glibc" and rows["tcmalloc"]["allocator"] == "tcmalloc"
    # 2 rounds x 256 MB = 131072 pages of 4 KB faulted again under glibc; (almost) none under tcmalloc.
    assert rows["glibc"]["faults"] > 100_000, rows
    assert rows["tcmalloc"]["faults"] < 5_000, rows
