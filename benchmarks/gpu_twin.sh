#!/usr/bin/env bash
# The twin run on a GPU machine with torch, transformers and triton and no network:
# calibrate on a live server and compare it with the simulator over HTTP, on a
# randomly initialised model of SmolLM2-135M's shape (its weights are too large to
# carry, and only its speed matters) served with the embedded model's tokenizer.
# The fidelity table is printed last; the report, figures, profile, plots and a
# tarball of the raw records land in $OUT.
#
#   OUT=/some/dir bash benchmarks/gpu_twin.sh                     # on the GPU
#   DEVICE=cpu SHAPE=tiny DTYPE=float32 MAX_BATCH=8 NUM_BLOCKS=1024 \
#     TRACE_ARGS="--rate 4 --count 20 --prompt-len uniform:16:64 --output-len fixed:32" \
#     PYTHON=.venv/bin/python bash benchmarks/gpu_twin.sh         # dry run on a CPU
#
# Needs out/gpu-wheels and out/gpu-tokenizer (`bash benchmarks/gpu_wheels.sh fill`).
# Calibration spaces its batch ladder by a CPU's pace (1 s + 0.25 s per request of
# each rung: 176 s at batch 128, 304 s at 256); CAL_TIME_SCALE (0.25 by default)
# packs it closer for a GPU, about 45 s at 128 and 76 s at 256.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-twin}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
SHAPE=${SHAPE:-smollm2-135m}
DTYPE=${DTYPE:-bfloat16}
MAX_BATCH=${MAX_BATCH:-128}
# 32768 blocks of 16 tokens: every rung of the calibration ladder (prompts up to
# 24 + 8 * MAX_BATCH tokens) and 256 open streams of the trace fit at once; 12 GB
# of bf16 KV cache for SmolLM2's shape.
NUM_BLOCKS=${NUM_BLOCKS:-32768}
MAX_WAITING=${MAX_WAITING:-1024}
# 800 requests over about 20 s, in bursts (gamma gaps, CV 2): prompts of 100 to 300
# tokens, 256 tokens out each, so a request holds its stream for 256 steps. At 10 to
# 20 ms a step the arrivals keep 100 to 200 streams decoding, bursts push past the
# batch into the waiting queue, lulls drain it to a few dozen. 5% slow readers and
# 10% leavers that reset after 32 tokens, as clients do.
TRACE_ARGS=${TRACE_ARGS:-"--rate 40 --count 800 --arrivals gamma --cv 2 --prompt-len uniform:100:300 --output-len fixed:256 --slow 0.05 --slow-pause-s 0.05 --leave 0.1 --leave-after-tokens 32 --leave-how rst"}
TWIN_TIMEOUT_S=${TWIN_TIMEOUT_S:-540}
CAL_TIME_SCALE=${CAL_TIME_SCALE:-0.25}
GPU_WHEELS=${GPU_WHEELS:-out/gpu-wheels}
GPU_TOKENIZER=${GPU_TOKENIZER:-out/gpu-tokenizer}
mkdir -p "$OUT"
work=$(mktemp -d)
copier=
trap '[ -n "$copier" ] && kill "$copier" 2>/dev/null; rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TWINSTEP_CACHE="$work/cache"  # profiles of this run only
log="$OUT/twin.log"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  "$PYTHON" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, torch.cuda.is_available(), "transformers", transformers.__version__)'
  PYTHON="$PYTHON" bash benchmarks/gpu_wheels.sh install "$work/site" "$GPU_WHEELS"
} 2>&1 | tee "$log"
export PYTHONPATH="$PYTHONPATH:$work/site"
if ! "$PYTHON" -c 'import starlette, uvicorn, httptools, zttp, httpx, simpy, prometheus_client, numpy, scipy.optimize, matplotlib, tqdm' >> "$log" 2>&1; then
  tail -n 3 "$log"
  echo "gpu_twin.sh: a package the twin run imports is missing (above); add its wheel to $GPU_WHEELS" >&2
  exit 2
fi

model="$work/models/$SHAPE-random"
"$PYTHON" benchmarks/random_model.py --shape "$SHAPE" --tokenizer "$GPU_TOKENIZER" --out "$model" \
  --dtype "$DTYPE" 2>&1 | grep -v "Writing model shards" | tee -a "$log" || exit 2
# shellcheck disable=SC2086  # TRACE_ARGS is a list of flags
"$PYTHON" -m traces generate $TRACE_ARGS --seed 1 -o "$work/trace.jsonl" 2>&1 | tee -a "$log" || exit 2
"$PYTHON" -m traces stats "$work/trace.jsonl" 2>&1 | tee -a "$log"

twin=(--model "$model" --device "$DEVICE" --dtype "$DTYPE" --max-batch "$MAX_BATCH"
      --num-blocks "$NUM_BLOCKS" --max-waiting "$MAX_WAITING" --trace "$work/trace.jsonl"
      --calibration-time-scale "$CAL_TIME_SCALE" --out "$work/twin")
# $OUT brings back 8 files at most: the summaries one by one; the trace, the raw
# records and the servers' logs in one tarball.
keep() {
  for f in report.md figures.json profile.json ttft_cdf.png tokens_per_s.png queues.png; do
    [ -f "$work/twin/$f" ] && cp "$work/twin/$f" "$OUT/"
  done
}
echo "python -m analysis twin ${twin[*]}" | tee -a "$log"
# Copied as they appear, so a run cut short outside this script (the device
# session's end) still brings back the profile and whatever else was written.
( while sleep 15; do keep; done ) &
copier=$!
start=$(date +%s)
PYTHONUNBUFFERED=1 timeout "$TWIN_TIMEOUT_S" "$PYTHON" -m analysis twin "${twin[@]}" >> "$log" 2>&1
twin_rc=$?
kill "$copier"
copier=
echo "twin: exit $twin_rc after $(( $(date +%s) - start )) s" | tee -a "$log"

keep
[ -d "$work/twin" ] && tar -C "$work" -czf "$OUT/twin-raw.tar.gz" trace.jsonl twin
grep -E "^(calibrating|fitted|note|live|sim)[ :]" "$log"
if [ "$twin_rc" != 0 ]; then
  tail -n 30 "$log"
  for server_log in "$work"/twin/*server.log; do
    [ -f "$server_log" ] && { echo "--- $server_log"; tail -n 20 "$server_log"; }
  done
  exit "$twin_rc"
fi
echo
awk '/^!\[/ {exit} {print}' "$OUT/report.md"  # the report up to its plots
