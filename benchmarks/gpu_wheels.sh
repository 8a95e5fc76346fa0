#!/usr/bin/env bash
# Wheels for a GPU machine that has torch, transformers and triton but no network.
#
#   bash benchmarks/gpu_wheels.sh fill [--python-version 3.12] [--skip NAME,...] [--dir DIR]
#       here, with network: download every package the GPU check and the twin run
#       import beyond torch, transformers and triton, with their dependencies, as
#       linux x86_64 wheels for that Python (default 3.12), into DIR (default
#       out/gpu-wheels); copy the embedded model's tokenizer into out/gpu-tokenizer;
#       print what travels. --skip leaves distributions out, ones the GPU machine
#       already has or that are too large to carry (default: scipy, 35 MB; all of
#       them come to 77 MiB. With numpy and pillow skipped instead, scipy fits).
#   bash benchmarks/gpu_wheels.sh install TARGET [DIR]
#       there: install into the scratch folder TARGET (put it on PYTHONPATH after)
#       each wheel of DIR whose distribution $PYTHON (default python3) lacks; never
#       touches the interpreter's own packages.
#
# Check the GPU machine's Python first (`python3 -V` there): wheels of compiled
# packages (numpy, scipy, matplotlib, kiwisolver, contourpy, pillow) only install
# on the version they were built for. Everything that travels (tracked tree, this
# folder, the tokenizer) must stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
NEEDED=(starlette uvicorn httptools zttp httpx simpy prometheus-client numpy scipy matplotlib tqdm pytest h2 psutil)

fill() {
  local version=3.12 skip=scipy dir=out/gpu-wheels
  while [ $# -gt 0 ]; do
    case $1 in
      --python-version) version=$2; shift 2 ;;
      --skip) skip=$2; shift 2 ;;
      --dir) dir=$2; shift 2 ;;
      *) echo "gpu_wheels.sh fill: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  local wanted=() name
  for name in "${NEEDED[@]}"; do
    [[ ",$skip," == *",$name,"* ]] || wanted+=("$name")
  done
  rm -rf "$dir" && mkdir -p "$dir"
  # Versions as the project resolved them here, so both machines run the same code.
  local pins=()
  for name in "${wanted[@]}"; do
    pins+=("$name==$(.venv/bin/python -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")")
  done
  .venv/bin/pip download -q --only-binary=:all: --python-version "$version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$dir" "${pins[@]}" 2> >(grep -v "is neither a file nor a directory" >&2)
  for name in ${skip//,/ }; do  # a skipped one may still come in as another's dependency
    rm -f "$dir"/"$(echo "$name" | tr - _)"-*.whl "$dir"/"$name"-*.whl
  done
  tokenizer
  ls "$dir"
  echo "wheels: $(du -sh "$dir" | cut -f1) in $dir (Python $version)"
  echo "tokenizer: $(du -sh out/gpu-tokenizer | cut -f1) in out/gpu-tokenizer"
  local total
  total=$(( $( (git ls-files -z; printf '%s\0' "$dir" out/gpu-tokenizer) | du -cb --files0-from=- | tail -n 1 | cut -f1) >> 20 ))
  echo "travels: ${total} MiB with the tracked tree (the limit is 64 MiB)"
  [ "$total" -lt 56 ] || echo "too close to the limit: skip more (--skip)" >&2
}

tokenizer() {
  # The tokenizer of the embedded SmolLM2, as converted into the cache (converting
  # it once if needed): a random model of SmolLM2's shape is served with it there.
  local src
  src=$(.venv/bin/python -c 'from live.runner.models import embedded_gguf, gguf_cache; print(gguf_cache(embedded_gguf()))')
  rm -rf out/gpu-tokenizer && mkdir -p out/gpu-tokenizer
  cp "$src"/tokenizer.json "$src"/tokenizer_config.json out/gpu-tokenizer/
  [ -f "$src"/chat_template.jinja ] && cp "$src"/chat_template.jinja out/gpu-tokenizer/
  return 0
}

install() {
  local target=${1:?gpu_wheels.sh install: give the scratch folder to install into}
  local dir=${2:-out/gpu-wheels}
  [ -d "$dir" ] || { echo "gpu_wheels.sh install: no wheel folder $dir" >&2; exit 2; }
  local missing
  missing=$("$PYTHON" - "$dir" <<'EOF'
import importlib.metadata as metadata
import pathlib
import sys

for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    try:
        metadata.version(wheel.name.split("-")[0])
    except metadata.PackageNotFoundError:
        print(wheel)
EOF
)
  if [ -z "$missing" ]; then
    echo "wheels: $PYTHON already has every distribution in $dir"
    return 0
  fi
  echo "wheels: installing into $target: $(echo "$missing" | xargs -n 1 basename | cut -d- -f1 | xargs)"
  # shellcheck disable=SC2086  # one wheel path per word
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$target" $missing
}

case ${1:-} in
  fill) shift; fill "$@" ;;
  install) shift; install "$@" ;;
  *) echo "usage: gpu_wheels.sh fill [--python-version V] [--skip NAME,...] [--dir DIR] | install TARGET [DIR]" >&2
     exit 2 ;;
esac
