#!/usr/bin/env bash
# issue 33 scale-out, the same streamed party phase at 3M rows per party: 2 and 14 workers (no in-process anchor)
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
cat /proc/loadavg
( time python3 benchmarks/stream_party.py --setup 3000000 --chunk-rows 100000 --tmp /tmp/sp3 ) 2>&1 | tee $OUT/setup3m.txt
for w in 2 14; do
  timeout 200 python3 benchmarks/stream_party.py --one 3000000 --mode $w --separate --chunk-rows 100000 --t 0 --tmp /tmp/sp3 2>>$OUT/run3m.err | tail -1 | tee -a $OUT/run3m.jsonl
  cat /proc/loadavg
done
