#!/usr/bin/env bash
# The GPU check on a machine with its own Python image and no network (docs/gpus.md):
#   benchmarks/gpu_run.sh OUT_DIR [--smoke]
# Installs the carried wheels the image lacks into a temporary folder, puts the checkout on
# the path as `bytecanary` (no build step), checks the versions in one line, runs the tests of
# the private-API shims, and runs benchmarks/gpu_check.py on the carried data with a time
# budget per part. OUT_DIR gets gpu_check.json and gpu_run.log. --smoke: the same on a CPU
# with a tiny model (the rehearsal `make test-slow` runs). PYTHON picks the interpreter
# (default python3) and GPU_CARRY the folder benchmarks/gpu_wheels.sh filled (gpu_carry).
set -euo pipefail
out=${1:?usage: benchmarks/gpu_run.sh OUT_DIR [--smoke]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
carry=${GPU_CARRY:-$root/gpu_carry}
py=${PYTHON:-python3}
mkdir -p "$out"
exec > >(tee "$out/gpu_run.log") 2>&1
for need in "$carry/wheels" "$carry/data"; do
    [[ -d $need ]] || { echo "gpu_run: $need is missing: run benchmarks/gpu_wheels.sh here first and carry it"; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

lacking=$("$py" "$root/benchmarks/gpu_env.py" missing "$carry"/wheels/*.whl)
wheels=()
[[ -z $lacking ]] || mapfile -t wheels <<<"$lacking"
if ((${#wheels[@]})); then
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$tmp/site" "${wheels[@]}"
fi
echo "gpu_run: installed ${#wheels[@]} carried wheel(s): ${wheels[*]##*/}"

# the checkout as the installed packages lay it out (pyproject.toml's package-dir), with the
# metadata whose entry points register the built-in probes
mkdir -p "$tmp/src/bytecanary"
ln -s "$root"/bytecanary/* "$tmp/src/bytecanary/"
ln -s "$root/probes" "$tmp/src/bytecanary/probes"
ln -s "$root/train" "$tmp/src/bytecanary/train"
"$py" "$root/benchmarks/gpu_env.py" metadata "$tmp/src"
export PYTHONPATH="$tmp/src:$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

"$py" "$root/benchmarks/gpu_env.py" versions
# the private-API shims (bytecanary/versions.py) against this image's versions; the tests that
# need `bytecanary prepare` stay home, as its packages do
shims=0
(cd "$root" && PYTHONSAFEPATH=1 "$py" -m pytest -q -p no:cacheprovider -o addopts= --import-mode=append \
    tests/test_versions.py tests/probes/test_engine.py -k "not installed_versions_pass and not train_command") || shims=$?
if ! "$py" -c "import wandb" 2>/dev/null; then
    echo "gpu_run: W&B off: wandb is not in the image and does not travel (a 20 MB binary wheel); the check reads metrics.jsonl and probes.jsonl"
fi
export WANDB_MODE=disabled
data=$(find "$carry/data" -mindepth 1 -maxdepth 1 -type d | sort | head -n 1)
[[ -n $data ]] || { echo "gpu_run: $carry/data holds no prepared data folder: run benchmarks/gpu_wheels.sh here"; exit 2; }
"$py" "$root/benchmarks/gpu_check.py" --out "$out/gpu_check.json" --data "$data" --work "$tmp" "$@"
((shims == 0)) || { echo "gpu_run: the shim tests failed (above)"; exit 1; }
