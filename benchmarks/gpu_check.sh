#!/usr/bin/env bash
# The GPU check, in one go on a machine with torch, transformers and triton (no
# network needed): the fast-path tests (Triton attention against the reference,
# CUDA-graph decode against the CPU runner, the pool after cancels and pauses),
# attention alone (the decode kernel's tilings, padded prefill), then the engine
# benchmark, then the serving path with a stand-in model (what the HTTP side
# delivers on this machine's CPUs when the engine is never the limit). Everything
# lands in $OUT; markdown tables are printed last.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh            # on the GPU
#   DEVICE=cpu TEST_TIMEOUT_S=480 bash benchmarks/gpu_check.sh   # dry run on a CPU
#
# pytest comes from the interpreter, or else from the wheels in $GPU_WHEELS
# (default out/gpu-wheels; fill it with `bash benchmarks/gpu_wheels.sh fill`),
# installed into a scratch folder, never into the system.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-check}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
GPU_WHEELS=${GPU_WHEELS:-out/gpu-wheels}
# The caps add up to 8.75 min (9.25 with pytest's grace after SIGINT): a 15-minute
# device session then holds the machine's start, this run and time to rerun a part.
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-150}
PER_TEST_TIMEOUT_S=${PER_TEST_TIMEOUT_S:-90}
ATTENTION_TIMEOUT_S=${ATTENTION_TIMEOUT_S:-120}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-180}
BENCH_DEADLINE_S=${BENCH_DEADLINE_S:-120}
SERVING_TIMEOUT_S=${SERVING_TIMEOUT_S:-75}
GPU_TOKENIZER=${GPU_TOKENIZER:-out/gpu-tokenizer}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  "$PYTHON" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, torch.cuda.is_available(), "transformers", transformers.__version__)'
  "$PYTHON" -c 'import triton; print("triton", triton.__version__)' || echo "triton: not importable"
  echo "C compiler for Triton's launcher: $(command -v cc || command -v gcc || echo none)"
} 2>&1 | tee "$OUT/env.log"

if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
  deps=$(mktemp -d)
  PYTHON="$PYTHON" bash benchmarks/gpu_wheels.sh install "$deps" "$GPU_WHEELS" 2>&1 | tee -a "$OUT/env.log"
  export PYTHONPATH="$PYTHONPATH:$deps"
fi

bench_args=(--device "$DEVICE" --out "$OUT" --deadline-s "$BENCH_DEADLINE_S")
attention_args=(--device "$DEVICE" --out "$OUT")
if [ "$DEVICE" = cpu ]; then
  bench_args+=(--tiny)
  attention_args+=(--tiny)
  export TRITON_INTERPRET=1  # before triton is first imported: kernels then run on CPU tensors
fi

# SIGINT, not timeout's SIGTERM: pytest then reports the failures so far and writes
# the XML; a test that hangs is failed alone by pytest-timeout, where installed.
per_test=()
"$PYTHON" -c 'import pytest_timeout' 2>/dev/null && per_test=(--timeout "$PER_TEST_TIMEOUT_S")
timeout --signal=INT --kill-after=20 "$TEST_TIMEOUT_S" "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" \
  "${per_test[@]}" -rfE --tb=short --junitxml="$OUT/tests.xml" tests/runner/test_gpu_fastpath.py tests/runner/test_triton_attention.py tests/runner/test_triton_compile.py \
  tests/runner/test_prefill_attention.py tests/runner/test_gpu_memory.py > "$OUT/tests.log" 2>&1
tests_rc=$?
tail -n 30 "$OUT/tests.log"

timeout "$ATTENTION_TIMEOUT_S" "$PYTHON" benchmarks/bench_attention.py "${attention_args[@]}" \
  > "$OUT/attention.log" 2>&1
attention_rc=$?

timeout "$BENCH_TIMEOUT_S" "$PYTHON" benchmarks/bench_gpu.py "${bench_args[@]}" > "$OUT/bench.log" 2>&1
bench_rc=$?
grep -E "^[0-9-]+ [0-9:,]+ \{" "$OUT/bench.log" | cut -c 1-200 | tail -n 40

serving_args=(--rows own-h1-256 --engine thread process --ttft-requests 20)
[ -d "$GPU_TOKENIZER" ] && serving_args+=(--tokenizer "$PWD/$GPU_TOKENIZER")
(cd benchmarks && timeout "$SERVING_TIMEOUT_S" "$PYTHON" bench_serving_path.py "${serving_args[@]}") \
  > "$OUT/serving.log" 2>&1
serving_rc=$?

echo
echo "tests: exit $tests_rc, $(tail -n 1 "$OUT/tests.log")"
echo "attention: exit $attention_rc"
grep "^|" "$OUT/attention.log"
echo "bench: exit $bench_rc$([ "$bench_rc" = 124 ] && echo ", stopped at ${BENCH_TIMEOUT_S}s with its figures so far")"
echo
"$PYTHON" benchmarks/bench_gpu.py --out "$OUT" --table 2>&1
echo
echo "serving path: exit $serving_rc"
grep -E "^\||^TTFT" "$OUT/serving.log"
