#!/usr/bin/env bash
# One prepared GPU run (a lent machine, a few minutes): the stacked-members and paper-200m MFU
# benchmarks (bench_gpu.py), then the pipeline end to end at a larger preset: the paper dataset,
# paper-200m trained under uniform:1-16 with bf16 autocast and compiled blocks, a depth sweep,
# and serving on the trained model. It keeps six files in OUT (default runs/gpu): log.txt,
# stages.txt (seconds per stage), gpu.json, train_metrics.jsonl, eval.jsonl and serve.json.
#
#     bash benchmarks/gpu_run.sh                    # on a GPU machine, from the repository root
#     PRESET=tiny DATA=tiny STEPS=20 bash benchmarks/gpu_run.sh   # the same steps on a CPU
set -uo pipefail
OUT=${OUT:-runs/gpu}
PRESET=${PRESET:-paper-200m}
DATA=${DATA:-paper}
STEPS=${STEPS:-200}
W=${WORK:-$(mktemp -d)}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
db() { python3 -m depthbench "$@"; }
stage() {   # stage NAME CMD...: its output appended to OUT/log.txt, its time to OUT/stages.txt
    local name=$1 t0 rc
    shift
    t0=$(date +%s%N)
    echo "== $name: $*" >> "$OUT/log.txt"
    "$@" > "$W/$name.log" 2>&1
    rc=$?
    cat "$W/$name.log" >> "$OUT/log.txt"
    echo "$name rc=$rc ms=$(( ($(date +%s%N) - t0) / 1000000 ))" | tee -a "$OUT/stages.txt"
    tail -4 "$W/$name.log" | cut -c1-400
    return $rc
}
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
 python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
) | tee "$OUT/log.txt"
stage generate db generate --preset "$DATA" --out "$W/data" --json || exit 1
if [ "$PRESET" = tiny ]; then quick=--quick; else quick=; fi
stage bench python3 benchmarks/bench_gpu.py --data "$W/data" --budget-s ${BENCH_S:-200} \
    --json-out "$OUT/gpu.json" $quick
stage train db train --data "$W/data" --out "$W/run" --preset "$PRESET" --schedule uniform:1-16 \
    --steps "$STEPS" --set eval_every=100 --json || exit 1
cp "$W/run/metrics.jsonl" "$OUT/train_metrics.jsonl"
stage eval db eval "$W/run" --depths 1,2,4,8,16 --max-people 4096 --batch-size 512 \
    --out "$W/eval" --json
cp "$W/eval.jsonl" "$OUT/eval.jsonl"
stage serve db serve-bench "$W/run" --modes static,no_refill,cdb --exit argmax:2 --requests 512 \
    --width 64 --out "$W/serve" --json
cp "$W/serve.json" "$OUT/serve.json"
