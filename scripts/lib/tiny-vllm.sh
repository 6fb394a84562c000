# shellcheck shell=bash
# Sourced by scripts/gpu-check-repack.sh and scripts/check-gpu.sh (not run on its own): the tiny NVFP4
# checkpoint both serve, and vLLM's OpenAI server started in a process group of its own, waited for, asked
# one completion and stopped. Functions only; nothing runs when it is sourced.
#
#   tiny_nvfp4 PYTHON ROOT DIR        DIR/tokenizer (tests/real_vllm/make_tokenizer.py) and DIR/nvfp4 (tests/
#                                     fake_model/make_model.py --preset tiny-llama --nvfp4 modelopt, the
#                                     tokenizer's vocabulary, the tokenizer files copied in); prints the
#                                     vocabulary size. PYTHON needs numpy and tokenizers (vLLM brings both).
#   vllm_start LOG PYTHON ARG...      runs ARG... (the server's command line) in a new process group, output
#                                     to LOG; sets vllm_server_pid (= its process group).
#   vllm_wait PYTHON URL LIMIT_S      0 when URL/health answers 200; 1 when the server exited first; 2 when it
#                                     did not answer within LIMIT_S seconds.
#   vllm_completion PYTHON URL MODEL  one greedy completion of "The quick brown fox" (12 tokens); prints it;
#                                     0 when tokens came back.
#   vllm_stop [GRACE_S]               SIGTERM to the server's process group, SIGKILL after GRACE_S (30); 0 when
#                                     no process of the group is left.

vllm_server_pid=""

tiny_nvfp4() {
    local python=$1 root=$2 dir=$3 info vocab
    info=$("$python" "$root/tests/real_vllm/make_tokenizer.py" "$dir/tokenizer") || return 1
    vocab=$("$python" -c 'import json, sys; print(json.loads(sys.argv[1])["vocab_size"])' "$info") || return 1
    "$python" "$root/tests/fake_model/make_model.py" "$dir/nvfp4" --preset tiny-llama --nvfp4 modelopt \
        --vocab "$vocab" >/dev/null || return 1
    cp "$dir"/tokenizer/* "$dir/nvfp4/" || return 1
    echo "$vocab"
}

vllm_start() {
    local log=$1 python=$2
    shift 2
    # setpgid, then exec: $! is the server and its process group, with or without job control, so that
    # vllm_stop reaches the API server and every process it starts (engine, workers).
    "$python" -c 'import os, sys; os.setpgid(0, 0); os.execvp(sys.argv[1], sys.argv[1:])' "$@" \
        >"$log" 2>&1 </dev/null &
    vllm_server_pid=$!
}

vllm_wait() {
    local python=$1 url=$2 limit=$3 started
    started=$(date +%s)
    until "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
            "$url/health" 2>/dev/null; do
        kill -0 "$vllm_server_pid" 2>/dev/null || return 1
        (($(date +%s) - started < limit)) || return 2
        sleep 2
    done
    return 0
}

vllm_completion() {
    "$1" - "$2/v1/completions" "$3" <<'EOF'
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": "The quick brown fox", "max_tokens": 12,
                   "temperature": 0}).encode()
request = urllib.request.Request(sys.argv[1], data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=120) as response:
    answer = json.load(response)
choice = answer["choices"][0]
print("completion: text %r, finish_reason %s, usage %s" % (choice["text"], choice["finish_reason"],
                                                          json.dumps(answer.get("usage"), sort_keys=True)))
sys.exit(0 if (answer.get("usage") or {}).get("completion_tokens", 0) > 0 else 1)
EOF
}

# A process of the server's group that is still running (a zombie is not).
_vllm_group_alive() {
    [[ -n $vllm_server_pid ]] || return 1
    ps -e -o pgid=,stat= | awk -v group="$vllm_server_pid" '$1 == group && $2 !~ /^Z/ {found = 1} END {exit !found}'
}

vllm_stop() {
    local grace=${1:-30} waited=0
    [[ -n $vllm_server_pid ]] || return 0
    if _vllm_group_alive; then
        kill -TERM -- "-$vllm_server_pid" 2>/dev/null || true
        while _vllm_group_alive && ((waited < grace)); do sleep 1; waited=$((waited + 1)); done
        if _vllm_group_alive; then
            kill -KILL -- "-$vllm_server_pid" 2>/dev/null || true
            sleep 1
        fi
    fi
    wait "$vllm_server_pid" 2>/dev/null || true
    if _vllm_group_alive; then
        return 1
    fi
    vllm_server_pid=""
    return 0
}
