#!/usr/bin/env bash
# What the GPU check carries to a machine with no network (docs/gpus.md), into an ignored folder:
#   benchmarks/gpu_wheels.sh [CARRY_DIR]        (default gpu_carry)
# wheels/: benchmarks/gpu_wheels.txt for the image's Python (cp312, manylinux x86_64), no
# dependencies. data/default/: the default corpus prepared here by `bytecanary prepare`
# (synthetic where apt cannot fetch it), without its raw text, which training never reads.
# Prints the sizes of the tree, the wheels and the data, and fails past the 64 MiB that travel.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry=${1:-$root/gpu_carry}
venv=${VENV:-$root/.venv}
limit_mib=64

rm -rf "$carry/wheels"
mkdir -p "$carry/wheels"
platforms=(manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
"$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]/#/--platform=}" -d "$carry/wheels" -r "$root/benchmarks/gpu_wheels.txt"

prepared=""
for config in default synthetic; do
    if "$venv/bin/bytecanary" prepare --config "$root/configs/data/$config.yaml" --out "$root/data/$config"; then
        prepared=$config
        break
    fi
    echo "gpu_wheels: configs/data/$config.yaml could not be prepared here"
done
[[ -n $prepared ]] || { echo "gpu_wheels: no corpus could be prepared"; exit 1; }
rm -rf "$carry/data"
mkdir -p "$carry/data/$prepared"
for part in tokenizer shards snapshot evalsets; do
    cp -r "$root/data/$prepared/$part" "$carry/data/$prepared/"
done

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
bytes() { du -sb "$1" | cut -f1; }
tree=$(cd "$root" && { git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null || true; } | tail -n 1 | cut -f1)
wheels=$(bytes "$carry/wheels")
data=$(bytes "$carry/data")
total=$((tree + wheels + data))
share=$((100 * total / (limit_mib * 1048576)))
echo "gpu_wheels: tree $(mib "$tree") MiB + wheels $(mib "$wheels") MiB + data $(mib "$data") MiB = $(mib "$total") MiB of ${limit_mib} MiB (${share}%)"
((total <= limit_mib * 1048576)) || { echo "gpu_wheels: over the ${limit_mib} MiB that travel"; exit 1; }
