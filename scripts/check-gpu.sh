#!/usr/bin/env bash
# make check-gpu (docs/gpu-check.md): every check of the collection that needs an NVIDIA GPU, in one call of
# at most 8 minutes, with a summary table at the end. Not part of make test. In this order:
#   gpu_facts  labfleet.vllm.gpu_facts through NVML and through nvidia-smi, field by field against the GPU's
#              own answers (nvidia-smi --query-gpu, nvidia-smi -q -x, topo -m, libnvidia-ml through ctypes):
#              tests/gpu/gpu_facts_check.py
#   doctor     playbooks/doctor.yml on this machine (no Docker needed; the checks that need it say so):
#              tests/gpu/doctor_check.py
#   vllm       vLLM 0.8.5 from its PyPI wheel (own venv, .cache/gpu-venv; pip starts first, in the background)
#              serves the tiny NVFP4 checkpoint's GPTQ repack and its FP16 copy (a completion and the prompt's
#              log-probabilities from each), and its offline API gives the FP16 copy's log-probabilities: all
#              against a float64 reference forward pass of the same weights (tests/gpu/logits_check.py)
#   daemon_reload  F10 of docs/testing.md: a --gpus all container started through Docker must still list its
#              GPUs (nvidia-smi -L in it) after `systemctl daemon-reload` (runc rewrites the device cgroup:
#              "Failed to initialize NVML: Unknown Error"; docs/container_runtime.md, the mitigation). Needs
#              root, systemd, Docker with the NVIDIA runtime and a local image (GPU_CHECK_F10_IMAGE, else the
#              first of labfleet/molecule-debian:bookworm, debian:bookworm-slim found here; never pulled)
# Each step is bounded by timeout and by what is left of the budget; each reports PASS, FAIL or SKIP with
# the reason and its seconds. Exit 0 when nothing FAILED. On a machine without an NVIDIA GPU (no nvidia-smi,
# or nvidia-smi fails or lists none) it prints "SKIPPED: no NVIDIA GPU: <reason>" and exits 0 at once.
#
# Environment: PYTHON (an interpreter that has vLLM already: no venv, no install), GPU_WHEELHOUSE (a folder of
# wheels: pip install --no-index --find-links it, for a machine without a package index), GPU_CHECK_STAGES
# ("gpu_facts vllm doctor daemon_reload"), GPU_CHECK_BUDGET_S (450), GPU_CHECK_GPU_MEMORY_UTILIZATION (0.10),
# GPU_CHECK_LOGITS_ATOL (0.05), GPU_CHECK_GROUP_SIZE (32), GPU_CHECK_ATTENTION_BACKEND (XFORMERS; empty:
# vLLM's own choice), GPU_CHECK_NVIDIA_SMI (nvidia-smi), GPU_CHECK_BASE_PYTHON (python3, for the venvs).
# Results: .cache/gpu-check/ (GPU_CHECK_WORK; check-gpu.log, check-gpu.json and each stage's files), copied to
# $OUT when set.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
# shellcheck source=scripts/lib/tiny-vllm.sh
. "$ROOT/scripts/lib/tiny-vllm.sh"

BUDGET_S=${GPU_CHECK_BUDGET_S:-450}
STAGES=" ${GPU_CHECK_STAGES:-gpu_facts vllm doctor daemon_reload} "
WORK=${GPU_CHECK_WORK:-$ROOT/.cache/gpu-check}
VENV=.cache/gpu-venv
TOOLS=.cache/gpu-tools-venv
BASE_PYTHON=${GPU_CHECK_BASE_PYTHON:-python3}
VLLM_PYTHON=${PYTHON:-}
WHEELHOUSE=${GPU_WHEELHOUSE:-}
NVIDIA_SMI=${GPU_CHECK_NVIDIA_SMI:-nvidia-smi}
GROUP_SIZE=${GPU_CHECK_GROUP_SIZE:-32}
MEM_UTIL=${GPU_CHECK_GPU_MEMORY_UTILIZATION:-0.10}
ATOL=${GPU_CHECK_LOGITS_ATOL:-0.05}
ATTENTION=${GPU_CHECK_ATTENTION_BACKEND-XFORMERS}
VLLM_PIN=vllm==0.8.5
CONSTRAINTS=tests/gpu/constraints.txt
# The same pins as the project's venv (requirements-dev.txt).
NVML_PIN=$(grep -E '^nvidia-ml-py==' requirements-dev.txt)
ANSIBLE_PIN=$(grep -E '^ansible-core==' requirements-dev.txt)
MAX_MODEL_LEN=512
MIN_FREE_GIB=12           # the vLLM venv takes about 9 GiB (torch and its CUDA libraries), pip's cache more
VLLM_STEPS_S=150          # kept for the vLLM steps after the install (three engine starts, the comparisons)
PROMPT="The quick brown fox jumps over the lazy dog near the river bank."

t0=$(date +%s)
names=()
statuses=()
seconds=()
reasons=()
gpu_line=""
run_tmp=""
TOOL_PY=""
ANSIBLE_PLAYBOOK=""
TOOLS_WHY=""
tools_checked=0
have_docker=no
f10_container=""

say() { echo "check-gpu: $*"; }
elapsed() { echo $(($(date +%s) - t0)); }
# limit CAP [RESERVE]: seconds a step may take: CAP, or what the budget leaves after RESERVE seconds (at
# least 1: timeout takes 0 for no limit at all).
limit() {
    local rest=$((BUDGET_S - $(elapsed) - ${2:-0}))
    if ((rest < 1)); then rest=1; fi
    if ((rest < $1)); then echo "$rest"; else echo "$1"; fi
}
wants() { [[ $STAGES == *" $1 "* ]]; }
json_str() {
    local s=${1//\\/\\\\}
    s=${s//\"/\\\"}
    printf '"%s"' "$(printf '%s' "$s" | tr '\000-\037' ' ')"
}
# record NAME STATUS START REASON
record() {
    local took=$(($(date +%s) - $3))
    names+=("$1")
    statuses+=("$2")
    seconds+=("$took")
    reasons+=("$4")
    printf 'check-gpu: %-4s %s (%d s): %s\n' "$2" "$1" "$took" "$4"
}
indent() { sed 's/^/  /'; }
tail_of() { tail -n "${2:-25}" "$1" 2>/dev/null | sed 's/^/    | /'; }
last_error() { grep -E '^(ERROR|error|Error)' "$1" 2>/dev/null | tail -n 1 | cut -c1-200; }

write_summary() {   # write_summary RESULT [SKIP REASON]
    local i comma=""
    {
        printf '{"result": %s, "budget_s": %d, "elapsed_s": %d, "gpu": %s, "skip_reason": %s, "stages": [' \
            "$(json_str "$1")" "$BUDGET_S" "$(elapsed)" "$(json_str "$gpu_line")" "$(json_str "${2:-}")"
        for i in "${!names[@]}"; do
            printf '%s{"stage": %s, "result": %s, "seconds": %d, "reason": %s}' "$comma" "$(json_str "${names[$i]}")" \
                "$(json_str "${statuses[$i]}")" "${seconds[$i]}" "$(json_str "${reasons[$i]}")"
            comma=", "
        done
        printf ']}\n'
    } >"$WORK/check-gpu.json"
}

skipped() {
    echo "SKIPPED: no NVIDIA GPU: $*"
    write_summary skipped "no NVIDIA GPU: $*"
    exit 0
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    local rc=$?
    # Nothing interrupts the cleanup. It speaks to main's own output (fd 3): a signal may have come while a
    # step's output went to a file.
    trap '' INT TERM HUP PIPE
    if [[ -n $install_pid ]] && kill -0 "$install_pid" 2>/dev/null; then
        kill -TERM "$install_pid" 2>/dev/null   # timeout passes the signal on to pip
        say "stopped the background pip install (process $install_pid)" >&3 2>/dev/null
    fi
    if [[ -n $vllm_server_pid ]]; then
        if vllm_stop 20; then
            say "stopped the vLLM server" >&3 2>/dev/null
        else
            say "WARNING: processes of the vLLM server's group $vllm_server_pid are left behind" >&3 2>/dev/null
        fi
    fi
    if [[ -n $f10_container ]]; then
        timeout -k 5 30 docker rm -f "$f10_container" >/dev/null 2>&1
    fi
    if [[ -n $run_tmp ]]; then rm -rf "$run_tmp"; fi
    exit "$rc"
}

# ---------------------------------------------------------------------------------------------------------
# Is there a GPU?
# ---------------------------------------------------------------------------------------------------------
detect() {
    local out rc=0
    SMI=$(command -v "$NVIDIA_SMI" 2>/dev/null) || skipped "$NVIDIA_SMI not found (no NVIDIA driver utilities on PATH)"
    command -v timeout >/dev/null || skipped "coreutils timeout is missing, so $SMI cannot be asked safely"
    out=$(timeout -k 5 30 "$SMI" -L 2>&1) || rc=$?
    ((rc == 0)) || skipped "$SMI -L failed (exit $rc): $(head -n 1 <<<"$out" | cut -c1-200)"
    grep -q '^GPU [0-9]' <<<"$out" || skipped "$SMI -L lists no GPU: $(head -n 1 <<<"$out" | cut -c1-200)"
    gpu_line=$(timeout -k 5 30 "$SMI" --query-gpu=index,name,compute_cap,memory.total,driver_version \
        --format=csv,noheader 2>&1 | tr '\n' ';' | sed 's/;$//')
    say "GPU(s): $gpu_line"
    if command -v docker >/dev/null && timeout -k 5 20 docker info >/dev/null 2>&1; then have_docker=yes; fi
}

# ---------------------------------------------------------------------------------------------------------
# ansible-core and nvidia-ml-py for the collection's modules: the project venv, else a small venv of their own
# ---------------------------------------------------------------------------------------------------------
pip_src=()
if [[ -n $WHEELHOUSE ]]; then pip_src=(--no-index --find-links "$WHEELHOUSE"); fi

ensure_tools() {
    ((tools_checked)) && return 0
    tools_checked=1
    local stamp="$ANSIBLE_PIN $NVML_PIN" lim log=$WORK/pip-tools.log
    if [[ -x .venv/bin/ansible-playbook ]] && .venv/bin/python -c 'import pynvml' 2>/dev/null; then
        TOOL_PY=$ROOT/.venv/bin/python ANSIBLE_PLAYBOOK=$ROOT/.venv/bin/ansible-playbook TOOLS_WHY="the project venv .venv"
        return 0
    fi
    if [[ -x $TOOLS/bin/ansible-playbook && $(cat "$TOOLS/.installed" 2>/dev/null) == "$stamp" ]]; then
        TOOL_PY=$ROOT/$TOOLS/bin/python ANSIBLE_PLAYBOOK=$ROOT/$TOOLS/bin/ansible-playbook TOOLS_WHY="$TOOLS"
        return 0
    fi
    if [[ ! -x $TOOLS/bin/python ]] && ! "$BASE_PYTHON" -m venv "$TOOLS" >"$log" 2>&1; then
        TOOLS_WHY="$BASE_PYTHON -m venv $TOOLS failed ($(tail -n 1 "$log"))"
        return 1
    fi
    lim=$(limit 120)
    say "installing $ANSIBLE_PIN and $NVML_PIN into $TOOLS (at most $lim s${WHEELHOUSE:+, from $WHEELHOUSE})"
    if timeout -k 5 "$lim" "$TOOLS/bin/python" -m pip install -q --progress-bar off "${pip_src[@]}" \
            "$ANSIBLE_PIN" "$NVML_PIN" >>"$log" 2>&1; then
        echo "$stamp" >"$TOOLS/.installed"
        TOOL_PY=$ROOT/$TOOLS/bin/python ANSIBLE_PLAYBOOK=$ROOT/$TOOLS/bin/ansible-playbook TOOLS_WHY="$TOOLS"
        return 0
    fi
    TOOLS_WHY="pip could not install $ANSIBLE_PIN and $NVML_PIN within $lim s ($(last_error "$log"); $log)"
    # nvidia-ml-py alone still lets the module's NVML code run without Ansible
    if timeout -k 5 30 "$TOOLS/bin/python" -m pip install -q --progress-bar off "${pip_src[@]}" "$NVML_PIN" \
            >>"$log" 2>&1; then
        TOOL_PY=$ROOT/$TOOLS/bin/python
    fi
    return 1
}

ansible_env() {
    env ANSIBLE_CONFIG="$ROOT/ansible.cfg" ANSIBLE_HOME="$WORK/ansible-home" \
        ANSIBLE_LOCAL_TEMP="$WORK/ansible-tmp" ANSIBLE_REMOTE_TEMP="$WORK/ansible-tmp" \
        ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 "$@"
}

# ---------------------------------------------------------------------------------------------------------
# Stage gpu_facts
# ---------------------------------------------------------------------------------------------------------
stage_gpu_facts() {
    local dir=$WORK/gpu_facts start how path rc nvml_error
    mkdir -p "$dir"
    start=$(date +%s)
    say "--- gpu_facts: the module through NVML and through nvidia-smi against the GPU's own answers"
    if ! timeout -k 5 "$(limit 90)" "$BASE_PYTHON" tests/gpu/gpu_facts_check.py collect --nvidia-smi "$SMI" \
            --out "$dir/raw.json"; then
        record gpu_facts/nvml FAIL "$start" "the GPU's own answers could not be collected (tests/gpu/gpu_facts_check.py collect)"
        record gpu_facts/nvidia_smi FAIL "$start" "the GPU's own answers could not be collected"
        return
    fi
    ensure_tools
    if [[ -n $ANSIBLE_PLAYBOOK ]]; then
        how="the module through ansible-playbook (tests/gpu/gpu_facts.yml, $TOOLS_WHY)"
        ansible_env timeout -k 5 "$(limit 120)" "$ANSIBLE_PLAYBOOK" -i localhost, tests/gpu/gpu_facts.yml \
            -e "ansible_python_interpreter=$TOOL_PY" -e '{"gpu_check_backends": ["nvml", "nvidia_smi"]}' \
            -e "gpu_check_nvidia_smi=$SMI" -e "gpu_check_out_dir=$dir" >"$dir/playbook.log" 2>&1 \
            || { tail_of "$dir/playbook.log"; say "ansible-playbook failed; each backend's file says what it got"; }
    else
        how="plugins/module_utils/probes/_gpu.py probe() without Ansible (no ansible-playbook: $TOOLS_WHY)"
        for path in nvml nvidia_smi; do
            timeout -k 5 "$(limit 60)" "${TOOL_PY:-$BASE_PYTHON}" tests/gpu/gpu_facts_check.py probe --backend "$path" \
                --nvidia-smi "$SMI" --out "$dir/facts-$path.json" || true
        done
    fi
    say "module run: $how"
    nvml_error=$("$BASE_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["nvml"].get("error", ""))' \
        "$dir/raw.json" 2>/dev/null)
    for path in nvml nvidia_smi; do
        if [[ ! -s $dir/facts-$path.json ]]; then
            record "gpu_facts/$path" FAIL "$start" "the module wrote no facts for backend=$path (see $dir)"
            continue
        fi
        if [[ $path == nvml && -n $nvml_error ]]; then
            record gpu_facts/nvml SKIP "$start" "libnvidia-ml does not answer through ctypes here: $nvml_error"
            continue
        fi
        if [[ $path == nvml ]] && ! "${TOOL_PY:-$BASE_PYTHON}" -c 'import pynvml' 2>/dev/null; then
            record gpu_facts/nvml SKIP "$start" "nvidia-ml-py (pynvml), which the NVML backend needs, is not installed: $TOOLS_WHY"
            continue
        fi
        rc=0
        "$BASE_PYTHON" tests/gpu/gpu_facts_check.py compare "$dir/raw.json" --facts "$path=$dir/facts-$path.json" \
            --json "$dir/compare-$path.json" | indent || rc=$?
        if ((rc == 0)); then
            record "gpu_facts/$path" PASS "$start" "every field matches the GPU's own answers ($how)"
        else
            record "gpu_facts/$path" FAIL "$start" "a field differs from the GPU's own answers (table above, $dir/compare-$path.json)"
        fi
    done
}

# ---------------------------------------------------------------------------------------------------------
# Stage vllm
# ---------------------------------------------------------------------------------------------------------
py=""
vocab=""
ids=""
model_dir=""
install_start=""
install_pid=""
install_skip=""
install_how=""
install_limit=0
install_stamp="$VLLM_PIN $NVML_PIN $(sha256sum "$CONSTRAINTS" | cut -c1-16)"

# The install starts at once, in the background, so that pip downloads while the gpu_facts and doctor stages
# run; it may take until VLLM_STEPS_S seconds before the end of the budget.
begin_vllm_install() {
    local free_kib log=$WORK/pip-vllm.log
    install_start=$(date +%s)
    [[ -z $VLLM_PYTHON ]] || return 0
    py=$ROOT/$VENV/bin/python
    if [[ -x $py && $(cat "$VENV/.installed" 2>/dev/null) == "$install_stamp" ]]; then
        install_how="$VENV, installed before"
        return 0
    fi
    if ! "$BASE_PYTHON" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 12))'; then
        install_skip="vLLM 0.8.5's wheels (xformers 0.0.29.post2) need Python 3.9 to 3.12; $BASE_PYTHON is $("$BASE_PYTHON" -V 2>&1)"
        return 0
    fi
    if [[ $(uname -m) != x86_64 ]]; then
        install_skip="this check installs vLLM's x86_64 wheels; this machine is $(uname -m)"
        return 0
    fi
    mkdir -p .cache
    free_kib=$(df -Pk .cache | awk 'NR == 2 {print $4}')
    if ((free_kib < MIN_FREE_GIB * 1024 * 1024)); then
        install_skip="$((free_kib / 1024 / 1024)) GiB free under .cache, $MIN_FREE_GIB GiB needed"
        return 0
    fi
    if [[ ! -x $py ]] && ! "$BASE_PYTHON" -m venv "$VENV" >"$log" 2>&1; then
        install_skip="$BASE_PYTHON -m venv $VENV failed: $(tail -n 1 "$log")"
        return 0
    fi
    install_limit=$(limit 330 "$VLLM_STEPS_S")
    if ((install_limit < 60)); then
        install_skip="only $install_limit s of the budget left for the install"
        return 0
    fi
    say "installing $VLLM_PIN (torch 2.6.0 with CUDA 12.4 libraries, about 3 GB) into $VENV in the background, at most $install_limit s${WHEELHOUSE:+, from $WHEELHOUSE} (log: $log)"
    timeout -k 10 "$install_limit" "$py" -m pip install --progress-bar off "${pip_src[@]}" -c "$CONSTRAINTS" \
        "$VLLM_PIN" "$NVML_PIN" >>"$log" 2>&1 &
    install_pid=$!
}

# Records vllm/install; 0 when vLLM imports and torch sees the GPU.
finish_vllm_install() {
    local start version log=$WORK/pip-vllm.log rc=0 cuda note=""
    start=$(date +%s)
    if [[ -n $install_pid || -n $install_skip ]]; then start=$install_start; fi
    if [[ -n $VLLM_PYTHON ]]; then
        py=$(command -v "$VLLM_PYTHON") || { record vllm/install SKIP "$start" "PYTHON=$VLLM_PYTHON is not an interpreter"; return 1; }
        install_how="PYTHON=$VLLM_PYTHON, pre-provisioned"
    elif [[ -n $install_skip ]]; then
        record vllm/install SKIP "$start" "$install_skip"
        return 1
    elif [[ -n $install_pid ]]; then
        say "waiting for pip (running for $(($(date +%s) - start)) s, at most $install_limit s)"
        wait "$install_pid" || rc=$?
        install_pid=""
        if ((rc == 124 || rc == 137)); then
            record vllm/install SKIP "$start" "pip did not finish $VLLM_PIN within its $install_limit s (a 3 GB download; a rerun on this machine resumes from pip's cache; or set PYTHON / GPU_WHEELHOUSE)"
            return 1
        elif ((rc != 0)); then
            record vllm/install SKIP "$start" "pip could not install $VLLM_PIN (no package index? set GPU_WHEELHOUSE or PYTHON): $(last_error "$log")"
            return 1
        fi
        echo "$install_stamp" >"$VENV/.installed"
        install_how="$VENV, installed now"
    fi
    # (vLLM logs to stdout when it is imported: the version is the last line)
    version=$("$py" -c 'import vllm; print(vllm.__version__)' 2>>"$log" | tail -n 1) \
        || { record vllm/install FAIL "$start" "$py cannot import vllm: $(tail -n 1 "$log")"; return 1; }
    cuda=$("$py" - 2>&1 <<'EOF'
import torch
if not torch.cuda.is_available():
    raise SystemExit("torch %s (CUDA %s) does not see a GPU" % (torch.__version__, torch.version.cuda))
major, minor = torch.cuda.get_device_capability(0)
print("torch %s (CUDA %s) sees %s, compute capability %d.%d" % (torch.__version__, torch.version.cuda,
      torch.cuda.get_device_name(0), major, minor))
EOF
    ) || { record vllm/install FAIL "$start" "vLLM $version imports, but $(tail -n 1 <<<"$cuda")"; return 1; }
    [[ $version == 0.8.5 ]] || note="; NOTE: written for vLLM 0.8.5 (the fleet's image), this is $version"
    record vllm/install PASS "$start" "vLLM $version ($install_how); $cuda$note"
}

make_checkpoints() {
    local start dir=$WORK/vllm
    start=$(date +%s)
    mkdir -p "$dir"
    model_dir=$dir/model
    rm -rf "$model_dir"
    mkdir -p "$model_dir"
    if ! vocab=$(timeout -k 5 "$(limit 60)" bash -c '. scripts/lib/tiny-vllm.sh && tiny_nvfp4 "$@"' _ "$py" "$ROOT" "$model_dir" \
            2>"$dir/checkpoints.log"); then
        record vllm/checkpoints FAIL "$start" "the tiny NVFP4 checkpoint could not be made: $(tail -n 1 "$dir/checkpoints.log")"
        return 1
    fi
    if ! timeout -k 5 "$(limit 60)" "$py" scripts/nvfp4_dequantize.py "$model_dir/nvfp4" "$model_dir/fp16" >"$dir/dequantize.json" 2>>"$dir/checkpoints.log" \
        || ! timeout -k 5 "$(limit 60)" "$py" tests/fake_model/check_fp16_copy.py "$model_dir/nvfp4" "$model_dir/fp16" >"$dir/check_fp16.log" 2>&1 \
        || ! timeout -k 5 "$(limit 60)" "$py" scripts/nvfp4_repack.py "$model_dir/nvfp4" "$model_dir/gptq" --group-size "$GROUP_SIZE" \
            >"$dir/repack.json" 2>>"$dir/checkpoints.log"; then
        tail_of "$dir/checkpoints.log"
        record vllm/checkpoints FAIL "$start" "the FP16 copy or the GPTQ repack could not be made (log above)"
        return 1
    fi
    ids=$("$py" - "$model_dir/nvfp4/tokenizer.json" "$PROMPT" <<'EOF'
import sys
from tokenizers import Tokenizer
print(",".join(str(i) for i in Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids))
EOF
    ) || { record vllm/checkpoints FAIL "$start" "the prompt could not be tokenized"; return 1; }
    record vllm/checkpoints PASS "$start" "tiny-llama NVFP4 (vocabulary $vocab), its FP16 copy (bit for bit: $(tail -n 1 "$dir/check_fp16.log")) and GPTQ repack (group $GROUP_SIZE); prompt: $(tr ',' '\n' <<<"$ids" | wc -l) tokens"
}

free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# serve_check NAME MODEL OTHER [server arguments...]: vllm serve MODEL, one completion, the prompt's
# log-probabilities against MODEL's reference (OTHER's reference distance printed for scale).
serve_check() {
    local name=$1 model=$2 other=$3 start lim port url log dir=$WORK/vllm waited=0 ready text rc=0 result
    shift 3
    start=$(date +%s)
    lim=$(limit 150)
    if ((lim < 45)); then
        record "vllm/serve-$name" SKIP "$start" "only $lim s of the budget left (45 needed)"
        return
    fi
    port=$(free_port)
    url=http://127.0.0.1:$port
    log=$dir/server-$name.log
    say "--- vllm serve $name: python -m vllm.entrypoints.openai.api_server --model ${model#"$ROOT"/} $* (at most $lim s)"
    vllm_start "$log" "$py" "$py" -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name "$name" \
        --host 127.0.0.1 --port "$port" --dtype float16 --enforce-eager --max-model-len "$MAX_MODEL_LEN" \
        --max-num-seqs 8 --gpu-memory-utilization "$MEM_UTIL" --max-logprobs "$vocab" --disable-log-requests "$@"
    vllm_wait "$py" "$url" "$lim" || waited=$?
    if ((waited != 0)); then
        tail_of "$log" 40
        vllm_stop 20
        if ((waited == 1)); then
            record "vllm/serve-$name" FAIL "$start" "the server exited while starting (log above, $log)"
        else
            record "vllm/serve-$name" FAIL "$start" "the server did not answer /health within $lim s (log above, $log)"
        fi
        return
    fi
    ready=$(($(date +%s) - start))
    say "ready in $ready s; its log on the engine, attention and quantization:"
    grep -iE "V0|V1|engine|backend|quantiz|gptq|exllama|marlin" "$log" | grep -viE "warn.*deprecat" | head -n 8 | cut -c1-220 | sed 's/^/    | /'
    text=$(timeout -k 5 "$(limit 60)" bash -c '. scripts/lib/tiny-vllm.sh && vllm_completion "$@"' _ "$py" "$url" "$name" 2>&1) || rc=$?
    say "$text"
    if ((rc == 0)); then
        timeout -k 5 "$(limit 60)" "$py" tests/gpu/logits_check.py server "$url" "$name" --ids "$ids" \
            --logprobs "$vocab" --out "$dir/$name.json" >"$dir/$name.client.log" 2>&1 || rc=$?
    fi
    vllm_stop 20 || say "WARNING: processes of the $name server are left behind"
    if ((rc != 0)); then
        tail_of "$dir/$name.client.log" 10
        record "vllm/serve-$name" FAIL "$start" "ready in $ready s, but no completion or log-probabilities came back: $(tail -n 1 <<<"$text")"
        return
    fi
    rc=0
    result=$("$py" tests/gpu/logits_check.py compare "$model" "$dir/$name.json" --atol "$ATOL" --label "$name" \
        --other "$other" --out "$dir/$name.compare.json" 2>&1) || rc=$?
    indent <<<"$result"
    if ((rc == 0)); then
        record "vllm/serve-$name" PASS "$start" "ready in $ready s; $(head -n 1 <<<"$result" | sed "s/^$name: //")"
    else
        record "vllm/serve-$name" FAIL "$start" "ready in $ready s; $(head -n 1 <<<"$result" | sed "s/^$name: //")"
    fi
}

offline_check() {
    local start lim dir=$WORK/vllm rc=0 result fp16=$model_dir/fp16
    start=$(date +%s)
    lim=$(limit 150)
    if ((lim < 45)); then
        record vllm/offline-fp16 SKIP "$start" "only $lim s of the budget left (45 needed)"
        return
    fi
    say "--- vllm offline: LLM(model=fp16 copy, dtype=float16, enforce_eager=True, gpu_memory_utilization=$MEM_UTIL).generate() (at most $lim s)"
    timeout -k 10 "$lim" "$py" tests/gpu/logits_check.py offline "$fp16" --ids "$ids" --logprobs "$vocab" \
        --gpu-memory-utilization "$MEM_UTIL" --max-model-len "$MAX_MODEL_LEN" --out "$dir/offline.json" \
        >"$dir/offline.log" 2>&1 || rc=$?
    if ((rc != 0)); then
        tail_of "$dir/offline.log" 30
        record vllm/offline-fp16 FAIL "$start" "LLM.generate failed (exit $rc; log above, $dir/offline.log)"
        return
    fi
    result=$("$py" tests/gpu/logits_check.py compare "$fp16" "$dir/offline.json" --atol "$ATOL" --label offline \
        --out "$dir/offline.compare.json" 2>&1) || rc=$?
    indent <<<"$result"
    if ((rc == 0)); then
        record vllm/offline-fp16 PASS "$start" "$(head -n 1 <<<"$result" | sed 's/^offline: //')"
    else
        record vllm/offline-fp16 FAIL "$start" "$(head -n 1 <<<"$result" | sed 's/^offline: //')"
    fi
}

reference_check() {
    local start lim rc=0 result
    start=$(date +%s)
    lim=$(limit 90)
    if ((lim < 20)); then
        record vllm/reference SKIP "$start" "only $lim s of the budget left"
        return
    fi
    if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
        record vllm/reference SKIP "$start" "transformers or torch does not import next to vLLM, so the numpy reference is not cross-checked"
        return
    fi
    result=$(timeout -k 5 "$lim" "$py" tests/gpu/logits_check.py transformers "$model_dir/fp16" --ids "$ids" 2>&1) || rc=$?
    result=$(grep -E "^reference vs" <<<"$result" || tail -n 1 <<<"$result")
    if ((rc == 0)); then
        record vllm/reference PASS "$start" "$result"
    else
        record vllm/reference FAIL "$start" "$result"
    fi
}

stage_vllm() {
    say "--- vllm: $VLLM_PIN serves the tiny NVFP4 checkpoint's GPTQ repack and FP16 copy"
    finish_vllm_install || return
    # V0: the engine the fleet's V100s run (vLLM 0.8.5 refuses V1 below compute capability 8.0 and falls
    # back), which an H100/H200 would not pick by itself (V1 is 0.8.5's default there). XFORMERS: the attention
    # backend V0 takes on Volta. Both can be changed for a run: GPU_CHECK_ATTENTION_BACKEND= (empty) lets vLLM
    # choose.
    export VLLM_USE_V1=0
    if [[ -n $ATTENTION ]]; then export VLLM_ATTENTION_BACKEND=$ATTENTION; else unset VLLM_ATTENTION_BACKEND; fi
    say "engine: VLLM_USE_V1=0 (V0, as on the V100s), attention backend ${ATTENTION:-chosen by vLLM}"
    make_checkpoints || return
    serve_check gptq "$model_dir/gptq" "$model_dir/fp16" --quantization gptq
    serve_check fp16 "$model_dir/fp16" "$model_dir/gptq"
    offline_check
    reference_check
}

# ---------------------------------------------------------------------------------------------------------
# Stage doctor
# ---------------------------------------------------------------------------------------------------------
stage_doctor() {
    local start dir=$WORK/doctor lim rc=0 model result note
    start=$(date +%s)
    mkdir -p "$dir"
    say "--- doctor: playbooks/doctor.yml on this machine (Docker: $have_docker)"
    ensure_tools
    if [[ -z $ANSIBLE_PLAYBOOK ]]; then
        record doctor SKIP "$start" "ansible-playbook is not available: $TOOLS_WHY"
        return
    fi
    lim=$(limit 120)
    if ((lim < 30)); then
        record doctor SKIP "$start" "only $lim s of the budget left (30 needed)"
        return
    fi
    # The model the plan serves: the tiny NVFP4 checkpoint (standard library only; the gate plans how this GPU
    # serves it: natively, or from its FP16 copy). Without a model the memory plan would be incomplete.
    model=$dir/nvfp4
    "$BASE_PYTHON" tests/fake_model/make_model.py "$model" --preset tiny-llama --nvfp4 modelopt --vocab 512 \
        >/dev/null 2>&1 || model=$dir/no-model
    cat >"$dir/hosts.yml" <<EOF
---
# Written by scripts/check-gpu.sh: this machine as the only vLLM host, read-only.
all:
  children:
    vllm_hosts:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: $TOOL_PY
          ansible_become: false
          fleet_report_dir: $dir/reports
          preflight_nvidia_smi: $SMI
          # What this check chooses; the rest from the preflight role's preflight_deployment_defaults.
          preflight_deployment:
            model_path: $model
            served_model_name: gpu-check
            vllm_args: {tensor_parallel_size: 1, gpu_memory_utilization: 0.9, max_model_len: $MAX_MODEL_LEN, max_num_seqs: 8}
            driver: {manage: false}
EOF
    ansible_env timeout -k 10 "$lim" "$ANSIBLE_PLAYBOOK" -i "$dir/hosts.yml" playbooks/doctor.yml >"$dir/playbook.log" 2>&1 || rc=$?
    "$SMI" --query-gpu=name,compute_cap --format=csv,noheader >"$dir/smi.csv" 2>&1
    if ((rc != 0)) || grep -q "Traceback (most recent call last)" "$dir/playbook.log"; then
        tail_of "$dir/playbook.log" 30
        record doctor FAIL "$start" "ansible-playbook playbooks/doctor.yml exited $rc or printed a traceback (log above, $dir/playbook.log)"
        return
    fi
    rc=0
    result=$("$BASE_PYTHON" tests/gpu/doctor_check.py "$dir/reports/fleet-report.json" "$dir/smi.csv" --docker "$have_docker" 2>&1) || rc=$?
    indent <<<"$result"
    if ((rc == 0)); then
        if [[ $have_docker == yes ]]; then note="Docker answers here, so its checks were judged too"; else note="no Docker here: the checks that need it are not judged"; fi
        record doctor PASS "$start" "ran without a traceback and identified the GPU(s) ($(grep -m1 '^doctor:' <<<"$result"); model ${model#"$ROOT"/}); $note"
    else
        record doctor FAIL "$start" "$(grep -m1 'NOT IDENTIFIED' <<<"$result" || tail -n 1 <<<"$result")"
    fi
}

# ---------------------------------------------------------------------------------------------------------
# Stage daemon_reload (F10)
# ---------------------------------------------------------------------------------------------------------
gpu_lines() { grep -E '^GPU [0-9]+:' <<<"$1" | sed 's/ *$//'; }

stage_daemon_reload() {
    local start image="" candidate before after rc=0 wait_s=${GPU_CHECK_F10_WAIT_S:-3}
    start=$(date +%s)
    say "--- daemon_reload: systemctl daemon-reload while a GPU container runs (F10)"
    if [[ $have_docker != yes ]]; then
        record daemon_reload SKIP "$start" "Docker does not answer here (docker info failed)"; return
    fi
    if [[ $(id -u) != 0 ]]; then
        record daemon_reload SKIP "$start" "systemctl daemon-reload needs root; run make check-gpu as root"; return
    fi
    if ! command -v systemctl >/dev/null; then
        record daemon_reload SKIP "$start" "no systemctl here, so there is no daemon-reload to survive"; return
    fi
    for candidate in ${GPU_CHECK_F10_IMAGE:-labfleet/molecule-debian:bookworm debian:bookworm-slim}; do
        if timeout -k 5 30 docker image inspect "$candidate" >/dev/null 2>&1; then image=$candidate; break; fi
    done
    if [[ -z $image ]]; then
        record daemon_reload SKIP "$start" "no image to run on this machine (${GPU_CHECK_F10_IMAGE:-labfleet/molecule-debian:bookworm, debian:bookworm-slim}); load one or set GPU_CHECK_F10_IMAGE"
        return
    fi
    f10_container=labfleet-gpu-check-f10-$$
    if ! timeout -k 5 60 docker run -d --rm --name "$f10_container" --network none --gpus all --entrypoint sleep \
            "$image" 600 >"$WORK/daemon-reload.log" 2>&1; then
        record daemon_reload SKIP "$start" "a --gpus all container of $image does not start ($(tail -n 1 "$WORK/daemon-reload.log" | cut -c1-160)): the doctor stage says why"
        f10_container=""
        return
    fi
    before=$(timeout -k 5 30 docker exec "$f10_container" nvidia-smi -L 2>&1) || rc=$?
    if ((rc != 0)) || [[ -z $(gpu_lines "$before") ]]; then
        record daemon_reload SKIP "$start" "the container sees no GPU before the reload (nvidia-smi -L exit $rc: $(head -n 1 <<<"$before" | cut -c1-160)): the doctor stage says why"
    else
        rc=0
        if ! timeout -k 5 60 systemctl daemon-reload >>"$WORK/daemon-reload.log" 2>&1; then
            # e.g. "System has not been booted with systemd": nothing rewrites the device cgroup here.
            record daemon_reload SKIP "$start" "systemctl daemon-reload failed ($(tail -n 1 "$WORK/daemon-reload.log" | cut -c1-160))"
        else
            sleep "$wait_s"
            after=$(timeout -k 5 30 docker exec "$f10_container" nvidia-smi -L 2>&1) || rc=$?
            printf 'before:\n%s\nafter daemon-reload:\n%s\n' "$before" "$after" >>"$WORK/daemon-reload.log"
            if ((rc == 0)) && [[ $(gpu_lines "$after") == "$(gpu_lines "$before")" ]]; then
                record daemon_reload PASS "$start" "the container kept its $(gpu_lines "$before" | wc -l) GPU(s) through systemctl daemon-reload ($image)"
            else
                record daemon_reload FAIL "$start" "after systemctl daemon-reload the container lost its GPUs (nvidia-smi -L exit $rc: $(head -n 1 <<<"$after" | cut -c1-160)); apply the container_runtime role's mitigation (docs/container_runtime.md, 'The daemon-reload NVML loss')"
            fi
        fi
    fi
    timeout -k 5 30 docker rm -f "$f10_container" >/dev/null 2>&1
    f10_container=""
}

# ---------------------------------------------------------------------------------------------------------
summary() {
    local i failed=0 passed=0 skippedn=0 result
    echo
    say "summary (GPU: ${gpu_line:-?}; budget $BUDGET_S s, took $(elapsed) s)"
    printf '  %-22s %-6s %7s  %s\n' stage result seconds reason
    for i in "${!names[@]}"; do
        printf '  %-22s %-6s %7d  %s\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}" "${reasons[$i]}"
        case ${statuses[$i]} in FAIL) failed=$((failed + 1)) ;; PASS) passed=$((passed + 1)) ;; *) skippedn=$((skippedn + 1)) ;; esac
    done
    if ((failed)); then result=failed; else result=passed; fi
    write_summary "$result"
    say "${result^^}: $passed passed, $failed failed, $skippedn skipped in $(elapsed) s ($WORK/check-gpu.log, $WORK/check-gpu.json)"
    ((failed == 0))
}

main() {
    exec 3>&1
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    detect
    run_tmp=$(mktemp -d -t labfleet-gpu-check.XXXXXX)
    chmod 700 "$run_tmp"
    # Every cache and temporary file of pip, torch and vLLM stays under .cache or the private folder (removed
    # at the end); nothing is asked of a model hub.
    export TMPDIR=$run_tmp HF_HOME=$run_tmp/hf HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
        DO_NOT_TRACK=1 VLLM_CACHE_ROOT=$ROOT/.cache/gpu-vllm-cache PIP_CACHE_DIR=$ROOT/.cache/pip \
        PIP_DISABLE_PIP_VERSION_CHECK=1
    say "stages:$STAGES budget $BUDGET_S s"
    # The vLLM install downloads while gpu_facts and the doctor run; its steps come last.
    if wants vllm; then begin_vllm_install; fi
    if wants gpu_facts; then stage_gpu_facts; fi
    if wants doctor; then stage_doctor; fi
    if wants vllm; then stage_vllm; fi
    if wants daemon_reload; then stage_daemon_reload; fi
    summary
}

case $WORK in / | "$ROOT" | "$ROOT"/ | "$HOME" | "$HOME"/) echo "check-gpu: GPU_CHECK_WORK=$WORK would be emptied; name a folder of its own" >&2; exit 2 ;; esac
rm -rf "$WORK"
mkdir -p "$WORK"
# A signal stops main (its trap cleans up); this shell waits for it, then still copies the results to $OUT.
# tee ignores those signals, so that the log keeps what the cleanup says.
trap ':' INT TERM HUP
main "$@" 2>&1 | (trap '' INT TERM HUP && exec tee "$WORK/check-gpu.log")
rc=${PIPESTATUS[0]}
if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT/check-gpu" && cp -r "$WORK"/. "$OUT/check-gpu/" 2>/dev/null
    cp "$WORK/check-gpu.log" "$WORK/check-gpu.json" "$OUT/" 2>/dev/null
    find "$OUT/check-gpu" -name '*.safetensors' -delete 2>/dev/null
fi
exit "$rc"
