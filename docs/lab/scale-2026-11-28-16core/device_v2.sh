#!/usr/bin/env bash
# issue 33 scale-out, after the guided task sizes (scale16): the streamed party phase at 3M rows per party on 14 and
# 2 workers, an in-process anchor at 300k, then 1M on 14 and 2 as the time left allows: each run's timeline (layout,
# passes, the workers' task stream: idle at the start, between tasks, in the tail), the parallel efficiency, the
# per-row CPU against in-process, the messages' digest (summary.txt). The whole script stays within LIMIT s (265)
# of wall: every step's timeout is cut to what is left, and a step that would not fit is skipped (steps.txt).
# Sizes: N3, N1, N0 (rows per party) override 3M, 1M, 300k (a small local try: N3=60000 N1=30000 N0=20000 NOPIP=1).
# Wheels in .whl/ (Python 3.12, manylinux x86_64), beyond the device image: dask==2026.8.0 distributed==2026.8.0
# tblib==3.2.2 zict==3.0.0 locket==1.0.0 tornado==6.6.1 cattrs==26.2.1 cryptography==50.0.2, and a vertisynth wheel
# of this tree (`pip wheel --no-deps .`: its entry points register the plugins; the code itself comes from $PWD).
set -o pipefail
T0=$(date +%s); END=$((T0 + ${LIMIT:-265}))
N3=${N3:-3000000}; N1=${N1:-1000000}; N0=${N0:-300000}; OUT=${OUT:-/tmp/device_v2_out}; mkdir -p $OUT
if [ -z "$NOPIP" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ nproc; python3 -c "import numpy, pandas, dask, cryptography; print(numpy.__version__, pandas.__version__, dask.__version__, cryptography.__version__)"; cat /proc/loadavg; } 2>&1 | tee $OUT/env.txt
SP="python3 benchmarks/stream_party.py --chunk-rows 100000 --t 0"
# step NAME EXPECTED_S CAP_S 'COMMAND': run COMMAND if EXPECTED_S still fits, under timeout min(CAP_S, what is left)
step() {
  local name=$1 expect=$2 cap=$3 cmd=$4
  local left=$((END - $(date +%s)))
  if [ "$left" -lt "$expect" ]; then echo "[skip $name: ${left}s left, needs ~${expect}s]" | tee -a $OUT/steps.txt; return 1; fi
  local t=$(( cap < left ? cap : left )) s=$(date +%s)
  timeout -k 5 "$t" bash -c "$cmd"; local rc=$?
  echo "[$name rc $rc wall $(( $(date +%s) - s ))s (timeout ${t}s) at +$(( $(date +%s) - T0 ))s load $(cut -d' ' -f1 /proc/loadavg)]" | tee -a $OUT/steps.txt
  return $rc
}
# one run (--one N --mode W): its JSON line appended to runs.jsonl, its pass log (stderr) kept
one() { echo "$SP --one $1 --mode $2 --separate --tmp $3 2>>$OUT/run_$1_$2.err | tail -1 >> $OUT/runs.jsonl"; }
step setup_big 30 60 "$SP --setup $N3 --tmp /tmp/sp3" \
  && { step w14_big 25 60 "$(one $N3 14 /tmp/sp3)"; step w2_big 100 140 "$(one $N3 2 /tmp/sp3)"; }
timeout 30 python3 benchmarks/stream_party.py --summary $OUT/runs.jsonl > $OUT/summary.txt 2>&1
step setup_local 4 15 "$SP --setup $N0 --tmp /tmp/sp03" && step local 20 40 "$(one $N0 0 /tmp/sp03)"
step setup_1m 10 30 "$SP --setup $N1 --tmp /tmp/sp1" \
  && { step w14_1m 15 40 "$(one $N1 14 /tmp/sp1)"; step w2_1m 40 70 "$(one $N1 2 /tmp/sp1)"; }
timeout 30 python3 benchmarks/stream_party.py --summary $OUT/runs.jsonl 2>&1 | tee $OUT/summary.txt
echo "total $(( $(date +%s) - T0 ))s"
