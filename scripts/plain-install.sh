#!/usr/bin/env bash
# The package as a user installs it, without extras: a fresh venv in a temp dir under the cache dir,
# `pip install .`, then `orchestrator compare` on a copy of a committed record (docs/probe-results/). Catches a
# module imported at top level but declared only in an extra (numpy was, issue 45). About a minute, from the
# local wheels or the pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
work=$(mktemp -d "$cache_dir/plain-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
# from a copy of the tracked files: setuptools builds in the source folder, and leaves build/ there
mkdir "$work/src"
git ls-files -z | xargs -0 cp --parents -t "$work/src"
if ! "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$work/src" >"$work/pip.out" 2>&1; then
    echo "[plain-install] \`pip install .\` failed:" >&2
    grep -v '^WARNING: Location' "$work/pip.out" | tail -5 >&2
    exit 1
fi
cp -r docs/probe-results/h100-locate/attribution "$work/record"
cd "$work"  # not the source tree: the installed package is what runs
if ! "$work/venv/bin/orchestrator" compare "$work/record" >"$work/compare.out" 2>&1; then
    echo "[plain-install] \`orchestrator compare\` failed after \`pip install .\` without extras:" >&2
    tail -5 "$work/compare.out" >&2
    exit 1
fi
echo "[plain-install] pip install . (no extras), then orchestrator compare on a committed record: exit 0"
