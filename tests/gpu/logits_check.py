# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Logits of a tiny Llama checkpoint: vLLM's against a float64 reference forward pass (make check-gpu).

The reference is a minimal Llama forward pass in numpy, float64, from the checkpoint's own weights and
config.json: the FP16 copy as stored, the GPTQ copy dequantized by the collection's decoder
(plugins/module_utils/converters/_gptq.py dequantize_gptq: scale x (code - (stored zero + 1)), as vLLM 0.8.5's exllama
kernels read it). vLLM's log-probabilities of the same token ids must lie within a tolerance of the
reference's (docs/gpu-check.md says why the default is what it is).

    python logits_check.py reference MODEL --ids 1,2,3 [--fp16-sim] [--out F]   numpy only
    python logits_check.py offline MODEL --ids 1,2,3 --out F [--generate N] ...   needs vllm (the GPU venv)
    python logits_check.py server URL NAME --ids 1,2,3 --out F [--generate N]     stdlib (a running vllm serve)
    python logits_check.py compare MODEL GOT.json [--atol A] [--other MODEL2]     numpy only
    python logits_check.py transformers MODEL --ids 1,2,3                         needs torch + transformers

``offline`` and ``server`` write the same document: prompt_ids, generated_ids and ``rows``, where row r holds
{token id: log-probability} of the distribution over the token that follows position r of prompt +
generated (prompt_logprobs[t] is row t - 1; the j-th generated token's is row len(prompt) - 1 + j).
Greedy decoding (temperature 0): vLLM 0.8.5's V0 sampler then divides by 1.0 and returns
log_softmax of the raw logits (sampling_metadata.py, sampler.py), which is what the reference computes.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import math
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # the server and parse helpers need no numpy
    np = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "collections")

# max |vLLM log-probability - reference| over every compared token (nats); docs/gpu-check.md, "Tolerance".
DEFAULT_ATOL = 0.05
# The numpy reference against transformers' LlamaForCausalLM in float32 (float32 rounding only).
CROSSCHECK_ATOL = 1e-3

_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1", "I8": "i1",
           "U16": "<u2", "I16": "<i2", "BF16": "<u2"}


class CheckError(Exception):
    """Input this check cannot use (a message for a person, no traceback)."""


# ------------------------------------------------------------------------------------------------
# The checkpoint
# ------------------------------------------------------------------------------------------------

def _need_numpy():
    if np is None:
        raise CheckError("numpy is needed for the reference forward pass")


def read_safetensors(path):
    """{name: numpy array} of one safetensors file (BF16 widened to float32)."""
    _need_numpy()
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length).decode("utf-8"))
        data = handle.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise CheckError("%s: tensor %s has dtype %s, which the reference does not read" % (path, name, info["dtype"]))
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"])
        if info["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array
    return tensors


def model_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
    else:
        shards = sorted(name for name in os.listdir(model_dir) if name.endswith(".safetensors"))
    if not shards:
        raise CheckError("%s holds no safetensors file" % model_dir)
    return [os.path.join(model_dir, shard) for shard in shards]


def _gptq_module():
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq  # pylint: disable=import-outside-toplevel
    return _gptq


def load_model(model_dir):
    """(config dict, {name: float64 weight}) of a Llama checkpoint: plain float tensors, or GPTQ int4 layers
    (qweight, qzeros, scales, g_idx) dequantized to the float16 weight vLLM's kernels reconstruct."""
    with open(os.path.join(model_dir, "config.json")) as handle:
        config = json.load(handle)
    raw = {}
    for path in model_files(model_dir):
        raw.update(read_safetensors(path))
    quant = config.get("quantization_config") or {}
    weights = {}
    for name, array in raw.items():
        if name.endswith(".qweight"):
            prefix = name[:-len(".qweight")]
            if quant.get("quant_method") != "gptq" or int(quant.get("bits", 0)) != 4:
                raise CheckError("%s: %s is packed, but config.json does not describe 4-bit GPTQ" % (model_dir, name))
            weight = _gptq_module().dequantize_gptq(array, raw[prefix + ".qzeros"], raw[prefix + ".scales"],
                                                    raw.get(prefix + ".g_idx"),
                                                    checkpoint_format=quant.get("checkpoint_format", "gptq"))
            weights[prefix + ".weight"] = weight.astype(np.float64)
        elif name.endswith((".qzeros", ".scales", ".g_idx")):
            continue
        elif array.dtype.kind == "f":
            weights[name] = array.astype(np.float64)
    return config, weights


# ------------------------------------------------------------------------------------------------
# The reference forward pass
# ------------------------------------------------------------------------------------------------

def _dims(config):
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    if config.get("rope_scaling"):
        raise CheckError("config.json has rope_scaling %r; the reference implements plain RoPE only"
                         % (config["rope_scaling"],))
    if config.get("model_type", "llama") != "llama":
        raise CheckError("model_type %r: the reference is a Llama forward pass" % config.get("model_type"))
    return hidden, heads, kv_heads, head_dim


def forward(config, weights, ids, fp16_sim=False):
    """Logits [len(ids), vocab] (float64) of a Llama decoder: RMSNorm, RoPE (rotate-half, as Llama checkpoints
    and vLLM's neox-style rotary embedding), grouped-query causal attention, SiLU-gated MLP, final norm, LM head.

    ``fp16_sim``: round every activation to float16 after each operation (float32 arithmetic), an estimate of
    what a float16 engine loses to rounding; not a model of any engine's kernels."""
    _need_numpy()
    _hidden, heads, kv_heads, head_dim = _dims(config)
    eps = float(config.get("rms_norm_eps", 1e-6))
    theta = float(config.get("rope_theta", 10000.0))
    layers = int(config["num_hidden_layers"])
    work = np.float32 if fp16_sim else np.float64

    def rnd(x):
        return x.astype(np.float16).astype(np.float32) if fp16_sim else x

    def weight(name):
        return weights[name].astype(work)

    def rms_norm(x, w):
        variance = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        return rnd((x / np.sqrt(variance + eps)).astype(work) * w)

    ids = np.asarray(ids, dtype=np.int64)
    seq = len(ids)
    x = rnd(weight("model.embed_tokens.weight")[ids])
    positions = np.arange(seq, dtype=np.float64)
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(positions, inv_freq)
    cos = rnd(np.concatenate([np.cos(angles), np.cos(angles)], axis=-1).astype(work))[:, None, :]
    sin = rnd(np.concatenate([np.sin(angles), np.sin(angles)], axis=-1).astype(work))[:, None, :]

    def rope(t):
        half = head_dim // 2
        rotated = np.concatenate([-t[..., half:], t[..., :half]], axis=-1)
        return rnd(t * cos + rotated * sin)

    mask = np.triu(np.full((seq, seq), -np.inf), k=1)
    group = heads // kv_heads
    for layer in range(layers):
        pre = "model.layers.%d." % layer
        h = rms_norm(x, weight(pre + "input_layernorm.weight"))
        q = rope(rnd(h @ weight(pre + "self_attn.q_proj.weight").T).reshape(seq, heads, head_dim))
        k = rope(rnd(h @ weight(pre + "self_attn.k_proj.weight").T).reshape(seq, kv_heads, head_dim))
        v = rnd(h @ weight(pre + "self_attn.v_proj.weight").T).reshape(seq, kv_heads, head_dim)
        out = np.empty((seq, heads, head_dim), dtype=work)
        for head in range(heads):
            kv = head // group
            scores = (q[:, head, :] @ k[:, kv, :].T) / math.sqrt(head_dim) + mask
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            out[:, head, :] = rnd(probs @ v[:, kv, :])
        x = rnd(x + rnd(out.reshape(seq, heads * head_dim) @ weight(pre + "self_attn.o_proj.weight").T))
        h = rms_norm(x, weight(pre + "post_attention_layernorm.weight"))
        gate = rnd(h @ weight(pre + "mlp.gate_proj.weight").T)
        up = rnd(h @ weight(pre + "mlp.up_proj.weight").T)
        act = rnd(rnd(gate / (1.0 + np.exp(-gate))) * up)
        x = rnd(x + rnd(act @ weight(pre + "mlp.down_proj.weight").T))
    x = rms_norm(x, weight("model.norm.weight"))
    head_name = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    return rnd(x @ weight(head_name).T).astype(np.float64)


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def reference_logprobs(model_dir, ids, fp16_sim=False):
    config, weights = load_model(model_dir)
    return log_softmax(forward(config, weights, ids, fp16_sim=fp16_sim))


# ------------------------------------------------------------------------------------------------
# vLLM's answers, in one shape
# ------------------------------------------------------------------------------------------------

def _row_dict(entries, what):
    """{token id: float} from a {id: Logprob | {"logprob": x} | x} mapping (ids as ints or strings,
    or "token_id:N" as vLLM's return_tokens_as_token_ids writes them)."""
    row = {}
    for key, value in (entries or {}).items():
        text = str(key)
        if text.startswith("token_id:"):
            text = text[len("token_id:"):]
        try:
            token = int(text)
        except ValueError:
            raise CheckError("%s: key %r is not a token id (ask with return_tokens_as_token_ids)" % (what, key))
        if isinstance(value, dict):
            value = value.get("logprob")
        elif hasattr(value, "logprob"):
            value = value.logprob
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise CheckError("%s: token %d has no numeric log-probability: %r" % (what, token, value))
        row[token] = float(value)
    return row


def rows_from_logprobs(prompt_ids, prompt_logprobs, generated_ids, generated_logprobs):
    """The ``rows`` document from vLLM's prompt_logprobs (None first) and per-token top logprobs."""
    if prompt_logprobs is not None and len(prompt_logprobs) != len(prompt_ids):
        raise CheckError("prompt_logprobs has %d entries for %d prompt tokens"
                         % (len(prompt_logprobs), len(prompt_ids)))
    rows = {}
    for position, entry in enumerate(prompt_logprobs or []):
        if position == 0 or entry is None:
            continue
        rows[str(position - 1)] = _row_dict(entry, "prompt_logprobs[%d]" % position)
    for step, entry in enumerate(generated_logprobs or []):
        if entry is None:
            continue
        rows[str(len(prompt_ids) - 1 + step)] = _row_dict(entry, "logprobs of generated token %d" % step)
    return {"prompt_ids": list(prompt_ids), "generated_ids": list(generated_ids), "rows": rows}


def parse_completion(answer, prompt_ids):
    """The ``rows`` document of a /v1/completions answer asked with prompt_logprobs, logprobs and
    return_tokens_as_token_ids (vLLM 0.8.5 protocol.py CompletionResponseChoice), plus the text and usage."""
    try:
        choice = answer["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise CheckError("the completion answer has no choices: %s" % json.dumps(answer)[:300])
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") or []
    generated = []
    for token in tokens:
        text = str(token)
        if not text.startswith("token_id:"):
            raise CheckError("generated token %r is not a token id (return_tokens_as_token_ids)" % token)
        generated.append(int(text[len("token_id:"):]))
    if "prompt_logprobs" not in choice:
        raise CheckError("the answer carries no prompt_logprobs (a server without vLLM's extension?)")
    doc = rows_from_logprobs(prompt_ids, choice.get("prompt_logprobs"), generated, logprobs.get("top_logprobs"))
    doc.update({"text": choice.get("text"), "finish_reason": choice.get("finish_reason"),
                "usage": answer.get("usage")})
    return doc


# ------------------------------------------------------------------------------------------------
# The comparison
# ------------------------------------------------------------------------------------------------

def compare_rows(reference, doc, atol):
    """Compare a ``rows`` document with reference log-probabilities [rows, vocab] over prompt + generated.

    Returns a dict: ok, compared (token count), rows, max_abs, mean_abs, worst (row, token, got, reference),
    argmax_mismatches (rows where vLLM's most likely token is not the reference's and the reference's margin
    between the two exceeds 2 atol: a near tie may go either way in float16), greedy_mismatches (generated
    tokens that are not the reference's argmax by more than 2 atol), problems (sentences)."""
    problems = []
    diffs = []
    worst = None
    argmax_mismatches = []
    vocab = reference.shape[1]
    for key, row in sorted(doc["rows"].items(), key=lambda item: int(item[0])):
        r = int(key)
        if not 0 <= r < reference.shape[0]:
            problems.append("row %d lies outside the %d reference rows" % (r, reference.shape[0]))
            continue
        row = dict((int(token), value) for token, value in row.items())  # JSON object keys are strings
        for token, value in row.items():
            if not 0 <= token < vocab:
                problems.append("row %d: token %d is outside the vocabulary of %d" % (r, token, vocab))
                continue
            if not math.isfinite(value):
                problems.append("row %d: token %d has the log-probability %r" % (r, token, value))
                continue
            diff = abs(value - reference[r, token])
            diffs.append(diff)
            if worst is None or diff > worst[0]:
                worst = (diff, r, token, value, float(reference[r, token]))
        if len(row) >= 2:
            got_best = max(row, key=row.get)
            ref_best = int(np.argmax(reference[r]))
            if got_best != ref_best and reference[r, ref_best] - reference[r, got_best] > 2 * atol:
                argmax_mismatches.append({"row": r, "got": got_best, "reference": ref_best})
    prompt_len = len(doc["prompt_ids"])
    greedy_mismatches = []
    for step, token in enumerate(doc.get("generated_ids") or []):
        r = prompt_len - 1 + step
        if r >= reference.shape[0] or not 0 <= token < vocab:
            continue
        best = int(np.argmax(reference[r]))
        if token != best and reference[r, best] - reference[r, token] > 2 * atol:
            greedy_mismatches.append({"step": step, "got": token, "reference": best})
    if not diffs:
        problems.append("no log-probability to compare")
    max_abs = max(diffs) if diffs else None
    if worst is not None and worst[0] > atol:
        problems.append("max |log-probability - reference| %.4g exceeds %.4g (row %d, token %d: %.6f vs %.6f)"
                        % (worst[0], atol, worst[1], worst[2], worst[3], worst[4]))
    if argmax_mismatches:
        problems.append("the most likely token differs from the reference's at %d row(s), beyond a near tie: %s"
                        % (len(argmax_mismatches), argmax_mismatches[:3]))
    if greedy_mismatches:
        problems.append("greedy decoding chose %d token(s) the reference ranks lower by more than %.3g: %s"
                        % (len(greedy_mismatches), 2 * atol, greedy_mismatches[:3]))
    return {"ok": not problems, "compared": len(diffs), "rows": len(doc["rows"]),
            "max_abs": max_abs, "mean_abs": (sum(diffs) / len(diffs)) if diffs else None,
            "worst": None if worst is None else dict(zip(("row", "token", "got", "reference"), worst[1:])),
            "argmax_mismatches": argmax_mismatches, "greedy_mismatches": greedy_mismatches,
            "atol": atol, "problems": problems}


def sequence_of(doc):
    return list(doc["prompt_ids"]) + list(doc.get("generated_ids") or [])


# ------------------------------------------------------------------------------------------------
# The engines
# ------------------------------------------------------------------------------------------------

def run_offline(model_dir, ids, generate, logprobs, gpu_memory_utilization, max_model_len, quantization=None):
    """vLLM's offline API: LLM(...).generate() with prompt_logprobs and logprobs (imports vllm here)."""
    import vllm  # pylint: disable=import-outside-toplevel,import-error
    from vllm import LLM, SamplingParams  # pylint: disable=import-outside-toplevel,import-error
    llm = LLM(model=model_dir, tokenizer=model_dir, dtype="float16", quantization=quantization, enforce_eager=True,
              gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, max_num_seqs=8,
              max_logprobs=logprobs, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=generate, logprobs=logprobs, prompt_logprobs=logprobs)
    output = llm.generate([{"prompt_token_ids": list(ids)}], params, use_tqdm=False)[0]
    completion = output.outputs[0]
    doc = rows_from_logprobs(ids, output.prompt_logprobs, list(completion.token_ids), completion.logprobs)
    doc.update({"engine": "vllm %s offline (LLM.generate)" % vllm.__version__, "text": completion.text,
                "finish_reason": completion.finish_reason})
    return doc


def run_server(url, model, ids, generate, logprobs, timeout=120, api_key=None):
    """POST /v1/completions with token ids, greedy, prompt_logprobs and logprobs as token ids (stdlib)."""
    import urllib.request  # pylint: disable=import-outside-toplevel
    body = json.dumps({"model": model, "prompt": list(ids), "max_tokens": generate, "temperature": 0,
                       "logprobs": logprobs, "prompt_logprobs": logprobs,
                       "return_tokens_as_token_ids": True}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.load(response)
    doc = parse_completion(answer, ids)
    doc["engine"] = "vllm serve (%s)" % url
    return doc


def crosscheck_transformers(model_dir, ids):
    """max |log-probability| difference between the numpy reference and transformers' LlamaForCausalLM in
    float32 on the CPU (imports torch and transformers here)."""
    import torch  # pylint: disable=import-outside-toplevel,import-error
    import transformers  # pylint: disable=import-outside-toplevel,import-error
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([list(ids)])).logits[0].double().numpy()
    theirs = log_softmax(logits)
    ours = reference_logprobs(model_dir, ids)
    return float(np.max(np.abs(theirs - ours))), transformers.__version__


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def _ids(text):
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("token ids as 1,2,3")
    if not ids:
        raise argparse.ArgumentTypeError("at least one token id")
    return ids


def _write(path, doc):
    text = json.dumps(doc, indent=1, sort_keys=True)
    if path in (None, "-"):
        print(text)
    else:
        with open(path, "w") as handle:
            handle.write(text + "\n")


def _summary_line(label, result):
    if result["max_abs"] is None:
        return "%s: nothing compared" % label
    return ("%s: %d log-probabilities in %d rows, max |diff| %.2e (mean %.2e), tolerance %.2e%s"
            % (label, result["compared"], result["rows"], result["max_abs"], result["mean_abs"], result["atol"],
               "" if result["ok"] else ": " + "; ".join(result["problems"])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    ref = sub.add_parser("reference", help="reference log-probabilities (numpy, float64)")
    ref.add_argument("model")
    ref.add_argument("--ids", type=_ids, required=True)
    ref.add_argument("--fp16-sim", action="store_true")
    ref.add_argument("--out")
    off = sub.add_parser("offline", help="vLLM's offline API (LLM.generate)")
    off.add_argument("model")
    off.add_argument("--ids", type=_ids, required=True)
    off.add_argument("--out", required=True)
    off.add_argument("--generate", type=int, default=4)
    off.add_argument("--logprobs", type=int, default=20)
    off.add_argument("--gpu-memory-utilization", type=float, default=0.1)
    off.add_argument("--max-model-len", type=int, default=512)
    off.add_argument("--quantization")
    srv = sub.add_parser("server", help="a running vLLM OpenAI server (/v1/completions)")
    srv.add_argument("url")
    srv.add_argument("name")
    srv.add_argument("--ids", type=_ids, required=True)
    srv.add_argument("--out", required=True)
    srv.add_argument("--generate", type=int, default=4)
    srv.add_argument("--logprobs", type=int, default=20)
    cmp_ = sub.add_parser("compare", help="a rows document against the reference of MODEL")
    cmp_.add_argument("model")
    cmp_.add_argument("got")
    cmp_.add_argument("--atol", type=float, default=DEFAULT_ATOL)
    cmp_.add_argument("--label", default="logits")
    cmp_.add_argument("--other", help="a second checkpoint whose reference distance is printed for scale")
    cmp_.add_argument("--out", help="write the comparison as JSON")
    hf = sub.add_parser("transformers", help="the numpy reference against transformers (float32, CPU)")
    hf.add_argument("model")
    hf.add_argument("--ids", type=_ids, required=True)
    hf.add_argument("--atol", type=float, default=CROSSCHECK_ATOL)
    args = parser.parse_args(argv)
    try:
        if args.command == "reference":
            lp = reference_logprobs(args.model, args.ids, fp16_sim=args.fp16_sim)
            _write(args.out, {"ids": args.ids, "logprobs": lp.tolist()})
        elif args.command == "offline":
            _write(args.out, run_offline(args.model, args.ids, args.generate, args.logprobs,
                                         args.gpu_memory_utilization, args.max_model_len, args.quantization))
        elif args.command == "server":
            _write(args.out, run_server(args.url, args.name, args.ids, args.generate, args.logprobs))
        elif args.command == "compare":
            with open(args.got) as handle:
                doc = json.load(handle)
            reference = reference_logprobs(args.model, sequence_of(doc))
            result = compare_rows(reference, doc, args.atol)
            print(_summary_line(args.label, result))
            if args.other:
                other = reference_logprobs(args.other, sequence_of(doc))
                distance = float(np.max(np.abs(other - reference)))
                result["other_distance"] = distance
                print("%s: for scale, the reference of %s lies %.2e from this one (max |diff|)"
                      % (args.label, os.path.basename(os.path.normpath(args.other)), distance))
            if args.out:
                _write(args.out, result)
            return 0 if result["ok"] else 1
        elif args.command == "transformers":
            diff, version = crosscheck_transformers(args.model, args.ids)
            ok = diff <= args.atol
            print("reference vs transformers %s LlamaForCausalLM (float32, CPU): max |diff| %.2e, tolerance %.0e: %s"
                  % (version, diff, args.atol, "agree" if ok else "DISAGREE"))
            return 0 if ok else 1
        else:
            parser.print_help()
            return 2
    except (CheckError, IOError, OSError, ValueError, KeyError) as exc:  # unusable input: a message, no traceback
        print("logits_check: %s: %s" % (exc.__class__.__name__, exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
