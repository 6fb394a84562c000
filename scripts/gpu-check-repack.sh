#!/usr/bin/env bash
# GPU check of the NVFP4 -> GPTQ int4 repacker (issue 15). NOT part of `make test`: it needs a machine
# with an NVIDIA GPU and vLLM 0.8.5 installed (`pip install vllm==0.8.5`, which brings torch, numpy and
# tokenizers). It
#   1. writes a small real ModelOpt NVFP4 checkpoint (tests/fake_model/make_model.py --preset tiny-llama
#      --nvfp4 modelopt) with an offline tokenizer (tests/real_vllm/make_tokenizer.py),
#   2. repacks it with scripts/nvfp4_repack.py (GPTQ int4, group size GROUP_SIZE),
#   3. serves the copy with `vllm serve DIR --quantization gptq --dtype float16` on 127.0.0.1 and asks
#      it one completion, and prints what came back (the weights are random: expect arbitrary tokens;
#      the check is that vLLM's gptq loader takes the layout and the kernels run).
#
#   scripts/gpu-check-repack.sh [GROUP_SIZE]        GROUP_SIZE: 32 (default), 64 or 128
#
# Environment: PYTHON (the interpreter with vLLM, default python3), VLLM (the vllm command, default the
# one next to PYTHON, else on PATH), TIMEOUT_S (server start, default 600), KEEP=1 (keep the work
# directory). Exit status 0 when a completion came back, 1 otherwise (the server log is printed).
set -euo pipefail

group=${1:-32}
case "$group" in 32 | 64 | 128) ;; *) echo "usage: $0 [32|64|128]" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/tiny-vllm.sh
. "$top/scripts/lib/tiny-vllm.sh"
PYTHON=${PYTHON:-python3}
TIMEOUT_S=${TIMEOUT_S:-600}
pybin=$(dirname "$(command -v "$PYTHON")")
VLLM=${VLLM:-$( [[ -x "$pybin/vllm" ]] && echo "$pybin/vllm" || command -v vllm || true)}

say() { printf 'gpu-check-repack: %s\n' "$*"; }
fail() { say "FAILED: $*"; exit 1; }

command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this check needs an NVIDIA GPU and its driver"
say "GPU: $(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader | head -n 1)"
version=$("$PYTHON" -c 'import vllm; print(vllm.__version__)' 2>/dev/null) \
    || fail "$PYTHON cannot import vllm; install it (pip install vllm==0.8.5) or set PYTHON"
[[ -n "$VLLM" ]] || fail "no vllm command next to $PYTHON or on PATH; set VLLM"
say "vLLM $version ($VLLM)"
[[ "$version" == 0.8.5 ]] || say "WARNING: this check is written for vLLM 0.8.5 (the fleet's image); found $version"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-repack.XXXXXX")
cleanup() {
    vllm_stop 30 || say "WARNING: processes of the server's group $vllm_server_pid are left behind"
    if [[ "${KEEP:-0}" == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# 1. the NVFP4 checkpoint, with a tokenizer of the same vocabulary ------------------------------------
vocab=$(tiny_nvfp4 "$PYTHON" "$top" "$work") || fail "the tiny NVFP4 checkpoint could not be made"
say "NVFP4 checkpoint: $(du -sk "$work/nvfp4" | cut -f1) KiB (tiny-llama: hidden 256, 2 layers, vocabulary $vocab)"

# 2. the GPTQ copy ---------------------------------------------------------------------------------------
"$PYTHON" "$top/scripts/nvfp4_repack.py" "$work/nvfp4" "$work/gptq" --group-size "$group" >"$work/repack.json" \
    || fail "nvfp4_repack.py failed"
"$PYTHON" - "$work/repack.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("gpu-check-repack: repacked %d layers at group size %d, %.3f bits/weight, relative RMS error %.4f; "
      "quantization_config %s" % (r["tensors_repacked"], r["group_size"], r["bits_per_weight"], r["error"]["rel_rms"],
                                  json.dumps(r["quantization_config"], sort_keys=True)))
EOF

# 3. vLLM serves it with --quantization gptq ------------------------------------------------------------
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$work/server.log
say "starting: vllm serve $work/gptq --quantization gptq --dtype float16 on 127.0.0.1:$port"
vllm_start "$log" "$PYTHON" "$VLLM" serve "$work/gptq" --quantization gptq --dtype float16 --host 127.0.0.1 \
    --port "$port" --served-model-name repack-check --max-model-len 512 --enforce-eager \
    --gpu-memory-utilization 0.30

started=$(date +%s)
waited=0
vllm_wait "$PYTHON" "http://127.0.0.1:$port" "$TIMEOUT_S" || waited=$?
case $waited in
    1) tail -n 60 "$log"; fail "vLLM exited while starting (log above)" ;;
    2) tail -n 60 "$log"; fail "vLLM did not answer /health within $TIMEOUT_S s (log above)" ;;
esac
say "vLLM ready in $(($(date +%s) - started)) s; what its log says about the quantization:"
grep -iE "quantiz|gptq|exllama|marlin" "$log" | head -n 10 || true

if vllm_completion "$PYTHON" "http://127.0.0.1:$port" repack-check | sed 's/^/gpu-check-repack: /'; then
    say "OK: vLLM $version served the repacked GPTQ copy with --quantization gptq"
else
    tail -n 60 "$log"
    fail "no completion came back (server log above)"
fi
