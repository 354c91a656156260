#!/usr/bin/env bash
# The checks a session runs when it has a real GPU, in the order that keeps timings clean:
#   1. the PyTorch baseline (scripts/torch_baseline.py) alone on the GPU;
#   2. `npm run scale` on Deno's wgpu with that baseline beside it (timings, alone on the GPU);
#   3. every kernel, autograd and model test on Deno's wgpu and on Dawn, side by side (correctness
#      only, so they may share the GPU).
# Usage: [TORCH_JSON=earlier.json] [SCALE_BACKENDS="wgpu dawn"] bash scripts/gpu_suite.sh OUTDIR [--device PROFILE]
# Writes OUTDIR/{torch.json,torch.log,scale-BACKEND.json,scale-BACKEND.log,tests-wgpu.log,tests-dawn.log,
# summary.txt}. TORCH_JSON reuses a baseline measured earlier on the same GPU instead of step 1.
# Each step has its own time limit and a failed step does not stop the next; summary.txt gives
# every step's exit status (124 = its time limit). docs/gpu-results.md records what it measured.
set -u
out=${1:?usage: gpu_suite.sh OUTDIR [--device PROFILE]}
shift
device=()
[[ ${1:-} == --device ]] && device=(--device "$2")
mkdir -p "$out"
cd "$(dirname "$0")/.."
export NO_COLOR=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
summary="$out/summary.txt"
: >"$summary"
step() { # step NAME LIMIT_S LOG CMD...
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s" | tee -a "$summary"
}
tests=(tests/kernels tests/autograd tests/models tests/gpu)

if [[ -n ${TORCH_JSON:-} ]]; then
  cp "$TORCH_JSON" "$out/torch.json" # a baseline measured earlier on the same GPU
else
  step torch-baseline "${TORCH_LIMIT:-150}" "$out/torch.log" python3 scripts/torch_baseline.py --json "$out/torch.json"
fi
base=()
[[ -s $out/torch.json ]] && base=(--baseline "$out/torch.json")
for backend in ${SCALE_BACKENDS:-wgpu}; do
  step "scale-$backend" "${SCALE_LIMIT:-120}" "$out/scale-$backend.log" \
    deno run -A src/cli/scale.ts --gpu="$backend" --json "$out/scale-$backend.json" "${base[@]}" "${device[@]}"
done
export DENO_JOBS=${DENO_JOBS:-6}
step tests-wgpu "${TEST_LIMIT:-150}" "$out/tests-wgpu.log" \
  env GPU=wgpu deno test -A --no-check --parallel "${tests[@]}" &
step tests-dawn "${TEST_LIMIT:-150}" "$out/tests-dawn.log" \
  env GPU=dawn deno test -A --no-check --parallel "${tests[@]}" &
wait
cat "$summary"
