# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make check-gpu's logits check (tests/gpu/logits_check.py) without a GPU: the float64 reference forward pass
on the tiny NVFP4 checkpoint's FP16 copy and GPTQ repack (made here by the collection's converters), vLLM's
answers in the shapes its 0.8.5 server and offline API give them, and the comparison with its tolerance."""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

np = pytest.importorskip("numpy")

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))

import logits_check as lc  # noqa: E402  pylint: disable=wrong-import-position

IDS = [1, 45, 300, 77, 12, 499, 3, 260, 128, 64, 9, 400]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny NVFP4 checkpoint (vocabulary 512, as make check-gpu's tokenizer gives), its FP16 copy and its
    GPTQ repack at group size 32."""
    base = tmp_path_factory.mktemp("tiny")
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "fake_model", "make_model.py"), str(base / "nvfp4"),
                    "--preset", "tiny-llama", "--nvfp4", "modelopt", "--vocab", "512"], check=True,
                   stdout=subprocess.DEVNULL)
    _nvfp4.convert_checkpoint(str(base / "nvfp4"), str(base / "fp16"))
    _gptq.repack_checkpoint(str(base / "nvfp4"), str(base / "gptq"), group_size=32)
    return {"fp16": str(base / "fp16"), "gptq": str(base / "gptq")}


@pytest.fixture(scope="module")
def reference(models):
    return lc.reference_logprobs(models["fp16"], IDS)


# ---------------------------------------------------------------------------------------------------------
# The reference forward pass
# ---------------------------------------------------------------------------------------------------------

def test_reference_is_a_distribution_per_position(reference):
    assert reference.shape == (len(IDS), 512)
    assert np.allclose(np.exp(reference).sum(axis=-1), 1.0, atol=1e-12)


def test_reference_is_causal(models, reference):
    assert np.allclose(lc.reference_logprobs(models["fp16"], IDS[:5]), reference[:5], atol=1e-12)
    changed = IDS[:5] + [2, 2, 2]
    assert np.allclose(lc.reference_logprobs(models["fp16"], changed)[:5], reference[:5], atol=1e-12)


def test_grouped_query_attention_equals_repeated_key_value_heads(models):
    config, weights = lc.load_model(models["fp16"])
    assert config["num_key_value_heads"] == 2 and config["num_attention_heads"] == 4
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    wide = dict(weights)
    for layer in range(config["num_hidden_layers"]):
        for proj in ("k_proj", "v_proj"):
            name = "model.layers.%d.self_attn.%s.weight" % (layer, proj)
            heads = weights[name].reshape(2, head_dim, -1)
            wide[name] = np.repeat(heads, 2, axis=0).reshape(4 * head_dim, -1)
    wide_config = dict(config, num_key_value_heads=4)
    assert np.allclose(lc.forward(wide_config, wide, IDS), lc.forward(config, weights, IDS), atol=1e-10)


def test_a_repeated_token_attends_to_copies_of_itself(models):
    """Every value vector of a prompt of one repeated token is the same, so every position's attention output
    is that vector whatever the scores are: each row equals the one-token forward pass. (RoPE's convention is
    checked against transformers: test_reference_agrees_with_transformers, and make check-gpu next to vLLM.)"""
    config, weights = lc.load_model(models["fp16"])
    one = lc.forward(config, weights, [7])
    many = lc.forward(config, weights, [7, 7, 7, 7])
    assert np.allclose(many, np.repeat(one, 4, axis=0), atol=1e-10)
    assert not np.allclose(lc.forward(config, weights, [7, 9])[1], lc.forward(config, weights, [9])[0], atol=1e-6)


def test_float16_rounding_stays_far_below_the_tolerance(models, reference):
    """The estimate the tolerance rests on (docs/gpu-check.md): rounding every activation to float16 moves the
    log-probabilities of this model by a few thousandths, a tenth of DEFAULT_ATOL or less."""
    sim = lc.reference_logprobs(models["fp16"], IDS, fp16_sim=True)
    assert 0 < np.max(np.abs(sim - reference)) < lc.DEFAULT_ATOL / 5


def test_gptq_copy_is_read_with_the_collections_decoder(models, reference):
    config, weights = lc.load_model(models["gptq"])
    assert config["quantization_config"]["quant_method"] == "gptq"
    raw = {}
    for path in lc.model_files(models["gptq"]):
        raw.update(lc.read_safetensors(path))
    prefix = "model.layers.1.mlp.down_proj"
    expected = _gptq.dequantize_gptq(raw[prefix + ".qweight"], raw[prefix + ".qzeros"], raw[prefix + ".scales"],
                                     raw[prefix + ".g_idx"])
    assert np.array_equal(weights[prefix + ".weight"], expected.astype(np.float64))
    _fp16_config, fp16 = lc.load_model(models["fp16"])
    error = np.linalg.norm(weights[prefix + ".weight"] - fp16[prefix + ".weight"]) / np.linalg.norm(fp16[prefix + ".weight"])
    assert 0.02 < error < 0.15  # the repack's own error (docs/nvfp4.md: about 7.6 % at group 32)
    distance = np.max(np.abs(lc.reference_logprobs(models["gptq"], IDS) - reference))
    assert distance > 5 * lc.DEFAULT_ATOL  # the check tells the two copies apart


def test_a_wrong_zero_point_convention_is_far_outside_the_tolerance(models):
    """A GPTQ copy read one quantization step off (v2 zeros taken as v1, the mistake vLLM 0.8.5 would make with
    a gptq_v2 checkpoint) moves the log-probabilities by far more than the tolerance."""
    config, weights = lc.load_model(models["gptq"])
    raw = {}
    for path in lc.model_files(models["gptq"]):
        raw.update(lc.read_safetensors(path))
    shifted = dict(weights)
    for name in raw:
        if name.endswith(".qweight"):
            prefix = name[:-len(".qweight")]
            shifted[prefix + ".weight"] = _gptq.dequantize_gptq(
                raw[name], raw[prefix + ".qzeros"], raw[prefix + ".scales"], raw[prefix + ".g_idx"],
                checkpoint_format="gptq_v2").astype(np.float64)
    right = lc.log_softmax(lc.forward(config, weights, IDS))
    wrong = lc.log_softmax(lc.forward(config, shifted, IDS))
    assert np.max(np.abs(right - wrong)) > 10 * lc.DEFAULT_ATOL


def test_unsupported_configs_are_refused(models, tmp_path):
    config, weights = lc.load_model(models["fp16"])
    with pytest.raises(lc.CheckError, match="rope_scaling"):
        lc.forward(dict(config, rope_scaling={"rope_type": "llama3"}), weights, IDS)
    with pytest.raises(lc.CheckError, match="model_type"):
        lc.forward(dict(config, model_type="mistral3"), weights, IDS)
    with pytest.raises(lc.CheckError, match="no safetensors"):
        lc.model_files(str(tmp_path))


def test_reference_agrees_with_transformers(models):
    """Runs where torch and transformers import (make check-gpu runs it next to vLLM); skipped in .venv."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    diff, _version = lc.crosscheck_transformers(models["fp16"], IDS)
    assert diff < lc.CROSSCHECK_ATOL


# ---------------------------------------------------------------------------------------------------------
# vLLM's answers
# ---------------------------------------------------------------------------------------------------------

def completion_answer(reference, generated, keys=str, top=5):
    """A /v1/completions answer shaped as vLLM 0.8.5's (protocol.py CompletionResponseChoice): prompt_logprobs
    keyed by token id with Logprob objects, logprobs with "token_id:N" tokens and top_logprobs."""
    prompt = [None]
    for position in range(1, len(IDS)):
        row = reference[position - 1]
        best = [int(t) for t in np.argsort(-row)[:top]]
        entries = dict((keys(t), {"logprob": float(row[t]), "rank": rank + 1, "decoded_token": "x"})
                       for rank, t in enumerate(best))
        entries[keys(IDS[position])] = {"logprob": float(row[IDS[position]]), "rank": 9, "decoded_token": "y"}
        prompt.append(entries)
    tops = []
    for step, token in enumerate(generated):
        row = reference[len(IDS) - 1 + step]
        tops.append(dict(("token_id:%d" % t, float(row[t])) for t in [token] + [int(t) for t in np.argsort(-row)[:top]]))
    return {"id": "cmpl-1", "object": "text_completion", "model": "fp16",
            "choices": [{"index": 0, "text": " abc", "finish_reason": "length", "stop_reason": None,
                         "prompt_logprobs": prompt,
                         "logprobs": {"tokens": ["token_id:%d" % t for t in generated],
                                      "token_logprobs": [0.0] * len(generated), "text_offset": [0] * len(generated),
                                      "top_logprobs": tops}}],
            "usage": {"prompt_tokens": len(IDS), "completion_tokens": len(generated), "total_tokens": 0}}


def greedy(models, steps=3):
    ids = list(IDS)
    for _step in range(steps):
        ids.append(int(np.argmax(lc.reference_logprobs(models["fp16"], ids)[-1])))
    return ids[len(IDS):]


def test_parse_completion_maps_rows_to_positions(models):
    generated = greedy(models)
    reference = lc.reference_logprobs(models["fp16"], IDS + generated)
    doc = lc.parse_completion(completion_answer(reference, generated), IDS)
    assert doc["generated_ids"] == generated and doc["prompt_ids"] == IDS
    assert sorted(int(r) for r in doc["rows"]) == list(range(len(IDS) - 1 + len(generated)))
    assert doc["rows"][str(0)][IDS[1]] == pytest.approx(reference[0, IDS[1]])
    assert doc["usage"]["completion_tokens"] == 3
    result = lc.compare_rows(reference, doc, lc.DEFAULT_ATOL)
    assert result["ok"] and result["max_abs"] < 1e-12, result["problems"]


def test_parse_completion_refuses_what_it_cannot_map(reference):
    answer = completion_answer(reference, [])
    del answer["choices"][0]["prompt_logprobs"]
    with pytest.raises(lc.CheckError, match="prompt_logprobs"):
        lc.parse_completion(answer, IDS)
    with pytest.raises(lc.CheckError, match="not a token id"):
        lc.parse_completion(completion_answer(reference, [], keys=lambda token: "tok%d" % token), IDS)
    with pytest.raises(lc.CheckError, match="entries for"):
        lc.parse_completion(completion_answer(reference, []), IDS[:-1])
    with pytest.raises(lc.CheckError, match="no choices"):
        lc.parse_completion({"error": "boom"}, IDS)


def test_rows_from_offline_objects(reference):
    """The offline API hands Logprob objects (attribute .logprob) keyed by int."""
    class Logprob(object):
        def __init__(self, value):
            self.logprob = value
    prompt = [None] + [{IDS[p]: Logprob(float(reference[p - 1, IDS[p]]))} for p in range(1, len(IDS))]
    doc = lc.rows_from_logprobs(IDS, prompt, [5], [{5: Logprob(float(reference[len(IDS) - 1, 5]))}])
    assert doc["rows"][str(len(IDS) - 1)] == {5: pytest.approx(reference[len(IDS) - 1, 5])}


def test_compare_rows_tolerance_and_failures(models):
    generated = greedy(models, 2)
    reference = lc.reference_logprobs(models["fp16"], IDS + generated)
    doc = lc.parse_completion(completion_answer(reference, generated), IDS)
    rng = np.random.RandomState(0)
    noisy = json.loads(json.dumps(doc))
    noisy["rows"] = dict((r, dict((int(t), v + rng.uniform(-0.01, 0.01)) for t, v in row.items()))
                         for r, row in noisy["rows"].items())
    assert lc.compare_rows(reference, noisy, lc.DEFAULT_ATOL)["ok"]
    off = json.loads(json.dumps(doc))
    off["rows"] = dict((r, dict((int(t), v) for t, v in row.items())) for r, row in off["rows"].items())
    off["rows"]["3"][IDS[4]] += 0.2
    result = lc.compare_rows(reference, off, lc.DEFAULT_ATOL)
    assert not result["ok"] and result["worst"]["row"] == 3 and "exceeds" in result["problems"][0]
    nan = json.loads(json.dumps(off))
    nan["rows"] = dict((r, dict((int(t), v) for t, v in row.items())) for r, row in nan["rows"].items())
    nan["rows"]["2"][IDS[3]] = float("nan")
    assert not lc.compare_rows(reference, nan, lc.DEFAULT_ATOL)["ok"]
    wrong_token = dict(doc, generated_ids=[int(np.argsort(-reference[len(IDS) - 1])[-1])] + generated[1:])
    result = lc.compare_rows(reference, wrong_token, lc.DEFAULT_ATOL)
    assert result["greedy_mismatches"] and not result["ok"]
    assert not lc.compare_rows(reference, {"prompt_ids": IDS, "rows": {}}, lc.DEFAULT_ATOL)["ok"]
    outside = {"prompt_ids": IDS, "rows": {"99": {1: -1.0}, "0": {10 ** 6: -1.0}}}
    assert len(lc.compare_rows(reference, outside, lc.DEFAULT_ATOL)["problems"]) >= 2


def test_main_compare_and_reference_commands(models, tmp_path, capsys):
    generated = greedy(models, 2)
    reference = lc.reference_logprobs(models["fp16"], IDS + generated)
    doc = lc.parse_completion(completion_answer(reference, generated), IDS)
    got = tmp_path / "got.json"
    got.write_text(json.dumps(doc))
    out = tmp_path / "compare.json"
    assert lc.main(["compare", models["fp16"], str(got), "--label", "fp16", "--other", models["gptq"],
                    "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("fp16: ") and "for scale" in printed
    assert json.loads(out.read_text())["other_distance"] > 5 * lc.DEFAULT_ATOL
    assert lc.main(["compare", models["gptq"], str(got), "--label", "gptq"]) == 1
    assert lc.main(["reference", models["fp16"], "--ids", "1,2,3", "--out", str(tmp_path / "ref.json")]) == 0
    assert len(json.loads((tmp_path / "ref.json").read_text())["logprobs"]) == 3
    assert lc.main(["compare", str(tmp_path), str(got)]) == 2  # no config.json there: a message, no traceback


class _Handler(BaseHTTPRequestHandler):
    answer = None
    seen = []

    def do_POST(self):  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        data = json.dumps(type(self).answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_run_server_asks_token_ids_and_log_probabilities(models):
    generated = greedy(models, 2)
    reference = lc.reference_logprobs(models["fp16"], IDS + generated)
    _Handler.answer = completion_answer(reference, generated)
    _Handler.seen = []
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        doc = lc.run_server("http://127.0.0.1:%d" % server.server_port, "fp16", IDS, 2, 512)
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
    path, body = _Handler.seen[0]
    assert path == "/v1/completions"
    assert body == {"model": "fp16", "prompt": IDS, "max_tokens": 2, "temperature": 0, "logprobs": 512,
                    "prompt_logprobs": 512, "return_tokens_as_token_ids": True}
    assert doc["generated_ids"] == generated and lc.compare_rows(reference, doc, lc.DEFAULT_ATOL)["ok"]
