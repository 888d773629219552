#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine for this project: the system tools the launcher and the
# end-to-end tests use (openssh-server, tmux, rsync, libtcmalloc-minimal4), a virtual environment in
# .venv, PyTorch, and the project itself with its `train` and `dev` extras. Safe to run again: it only
# does what is missing.
#
#   SETUP_TORCH   pip requirement for torch (default: the CPU wheel torch==2.13.0 this kind of machine
#                 carries on disk). On a GPU host use e.g. SETUP_TORCH='torch>=2.6' to get a CUDA build.
#   PYTHON        interpreter for the venv (default: python3, >= 3.10)
set -euo pipefail
cd "$(dirname "$0")/.."

SETUP_TORCH="${SETUP_TORCH:-torch==2.13.0}"
PYTHON="${PYTHON:-python3}"

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
# tcmalloc: nsa-train preloads it on CPU runs (NSA_MALLOC=auto, docs/training.md); optional elsewhere.
[ -n "$(find /usr/lib /usr/lib64 /usr/local/lib -maxdepth 2 -name libtcmalloc_minimal.so.4 -print -quit 2>/dev/null)" ] ||
    missing+=(libtcmalloc-minimal4)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]} (Debian packages)"
    if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo -n); fi
    if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"; } >/tmp/nsa-setup-apt.log 2>&1; then
        echo "setup: could not install ${missing[*]}; see /tmp/nsa-setup-apt.log." >&2
        echo "setup: fix: run 'sudo apt-get install -y ${missing[*]}' and start this script again." >&2
        exit 1
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv .venv
fi

# pip compiles every module it installs to bytecode, one file after the other, while the second core
# idles: torch's install took 37.9 CPU-s as usual and 10.5 with --no-compile, the project's 83.5 and
# 58.7 (2026-11-27, load ~8). So the installs below skip it and compileall does it once at the end on
# every core: the same 11,604 .pyc files as pip's own compile, ~15 s less of a fresh clone's set-up
# (bench/RESULTS.md "suitetime4"). Python reads them as it would have.
compile=0
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "setup: installing $SETUP_TORCH"
    .venv/bin/python -m pip install -q --no-compile "$SETUP_TORCH"
    compile=1
fi

# Reinstall the project only when its dependency spec changed since the last successful install.
stamp=".venv/.nsa-setup-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    echo "setup: installing the project (editable) with extras train,dev,wandb"
    .venv/bin/python -m pip install -q --no-compile -e '.[train,dev,wandb]'
    compile=1
fi
if [ "$compile" = 1 ]; then
    echo "setup: compiling the installed modules to bytecode (all cores)"
    # As pip would have: a module that does not compile (some packages ship files for other Pythons)
    # is skipped, not a failure; compileall says which and exits 1, so its status is not checked.
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
fi
if [ ! -e "$stamp" ]; then
    rm -f .venv/.nsa-setup-*
    touch "$stamp"
fi
echo "setup: ready ($(.venv/bin/python -c 'import torch, sys; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")'))"
