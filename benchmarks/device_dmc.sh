#!/usr/bin/env bash
# dmc.py on a lent accelerator machine, within one device call's time.
#
#   bash benchmarks/device_dmc.sh SECONDS AGENT BUDGETS VARIANT SETS TASK...
#
# On the device machine (the device tool's `run`, with the wheel folder
# carried): installs the wheels of `python benchmarks/gpu.py --prepare-wheels
# .whl-tpu --image tpu-dmc` (folder $WHEELS, default .whl-tpu) under /tmp/site
# unless MuJoCo already imports, then trains each TASK in turn with
# benchmarks/dmc.py (3 seeds in one program; JAX on the accelerator, the
# physics on the host through the native backend) until SECONDS after the
# start, when dmc.py gets SIGINT: its child checkpoints after its current
# training call (leave it a minute or two of the device call's 10), and the
# next call on the still-warm machine resumes from .devruns/. SETS is
# 'field=value;field=value' (or '' for the defaults, VARIANT 'default').
# The rows, curves and log go to $OUT (the device tool brings them back) for
# appending to benchmarks/results/; the machine column says
# "<DEVICE> + <N>-core host" (DEVICE default 'TPU v5e'). $RUNS (default
# .devruns) holds the runs; $DMC_ARGS adds dmc.py flags (--eval-every N).
# Example (benchmarks/RESULTS.md, "SAC with BRO's critic and 4x the updates
# on one TPU v5e"):
#   bash benchmarks/device_dmc.sh 480 sac 100000,500000 bro1024-utd2 \
#     'critic_blocks=2;critic_width=1024;updates_per_iteration=16' CheetahRun
set -u
if [ $# -lt 6 ]; then
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
deadline=$(( $(date +%s) + $1 )); agent=$2; budgets=$3; variant=$4; sets=$5
shift 5
cd "$(dirname "$0")/.." || exit 1
runs=${RUNS:-.devruns}; out=${OUT:-$runs/out}; mkdir -p "$out" "$runs"
export PYTHONPATH=${PYTHONPATH:-}:/tmp/site PYTHONUNBUFFERED=1
if ! python3 -c 'import mujoco' 2>/dev/null; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index \
    --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHEELS:-.whl-tpu}"/*.whl || exit 1
fi
if ! python3 -c 'import roxie.agents' 2>/dev/null; then  # roxie not installed
  [ -e roxie/agents ] || ln -s ../agents roxie/agents
  export PYTHONPATH=$PWD:$PYTHONPATH
fi
setargs=(); vargs=(--variant "$variant")
IFS=';' read -ra kv <<< "$sets"
for x in "${kv[@]}"; do setargs+=(--set "$x"); done
[ -z "$sets" ] && [ "$variant" = default ] && vargs=()
status=0
for t in "$@"; do
  left=$(( deadline - $(date +%s) ))
  [ $left -lt 60 ] && { echo "## $t: skipped, $left s left"; status=1; continue; }
  echo "## $t ($left s left) $(date +%T)"
  timeout -s INT -k 120 $left python3 benchmarks/dmc.py --agents "$agent" \
    --tasks "$t" --seeds 0,1,2 --budgets "$budgets" "${vargs[@]}" \
    "${setargs[@]}" --machine "${DEVICE:-TPU v5e} + $(nproc --all)-core host" \
    --runs "$runs/dmc" --results "$runs/rows.csv" \
    --curves "$runs/curves.csv" ${DMC_ARGS:-} >> "$runs/dmc.log" 2>&1 \
    || status=$?
  grep -E "env steps, eval|stopped|error" "$runs/dmc.log" | tail -n 4
done
cp "$runs/rows.csv" "$runs/curves.csv" "$runs/dmc.log" "$out"/ 2>/dev/null
exit $status
