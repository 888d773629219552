#!/usr/bin/env bash
# Set up what is missing (scripts/setup.sh), then start the embedded default run and wait for it:
# the `cpu` profile (2 CPU workers, gloo) with configs/tiny.yaml on this machine, through the same
# launcher path a GPU pod uses. Extra arguments go to `nsa-launch up`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/nsa-launch up --wait "$@"
