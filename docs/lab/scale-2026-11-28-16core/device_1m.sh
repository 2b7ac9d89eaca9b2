#!/usr/bin/env bash
# issue 33 scale-out on the lent 16-core machine: the machine's own contention ceiling, then the streamed party phase
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ nproc; lscpu; python3 -c "import numpy, pandas, dask, cryptography; print(numpy.__version__, pandas.__version__, dask.__version__, cryptography.__version__)"; cat /proc/loadavg; } 2>&1 | tee $OUT/env.txt
timeout 100 python3 benchmarks/cpu_contention.py --procs 2,14 --work 3 --workloads kernel 2>&1 | tee $OUT/contention2.txt
cat /proc/loadavg
timeout 420 python3 benchmarks/stream_party.py --rows 1000000 --workers 2,14 --separate --tmp /tmp/sp 2>$OUT/stream_1m.err | tee $OUT/stream_1m.txt
cat /proc/loadavg
