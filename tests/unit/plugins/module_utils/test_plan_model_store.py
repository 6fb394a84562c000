# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan from the model store's manifest (issue 26): request.model_store checked, the store's
answer judged (MODEL_STORE_UNREACHABLE, MODEL_NOT_IN_STORE, MODEL_MANIFEST_INVALID), the manifest's
gate as the model, what the host fetches (the revision, or the store's FP16 / GPTQ copy) and
whether it fits on disk, and the plan's model_store record
(plugins/module_utils/decisions/_model_store.py, _plan.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import os
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _model_store as S
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_plan_fp16_fallback as F  # noqa: E402  (the reference host, its request and the NVFP4 / BF16 models)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
STORE = {"url": "http://models.lab:8080", "name": "quasar", "revision": "2026-11-30"}
MANIFEST_URL = "http://models.lab:8080/quasar/2026-11-30/labfleet-manifest.json"
GB = 10 ** 9


def manifest(gate, total=16 * GB, **changes):
    """A labfleet.model-manifest/1 document of STORE's revision (two files adding up to ``total``)."""
    doc = {"format": "labfleet.model-manifest/1", "name": STORE["name"], "revision": STORE["revision"],
           "created": "2026-11-30T12:00:00Z", "total_bytes": total,
           "files": [{"path": "config.json", "size": 1000, "sha256": "a" * 64},
                     {"path": "model.safetensors", "size": total - 1000, "sha256": "b" * 64}],
           "gate": gate, "quantization": None, "config": None, "source": None}
    doc.update(changes)
    return json.dumps(doc, sort_keys=True)


def answer(gate=None, status=200, content=None, free=500 * GB, complete=False):
    """The preflight's GET of the manifest, with the host's disk beside it."""
    text = manifest(F.LLAMA_8B_BF16 if gate is None else gate) if content is None else content
    return {"status": status, "content": text, "msg": "OK (%d bytes)" % len(text), "disk_free_bytes": free,
            "complete": complete}


def run(store_answer, model=None, copies=None, store=None):
    roomy = dict(F.ROOMY) if copies is None else copies
    return P.plan(gpus=F.GPUS, driver_version="550.54.14", image=F.IMAGE_0_8_5, model=model or {},
                  request=F.request(model_store=dict(STORE) if store is None else store), nvlink=False, today=F.TODAY,
                  fp16_copy=dict(roomy), gptq_copy=dict(roomy), model_store=store_answer)


codes = F.codes
message = F.message


# --- the request key ------------------------------------------------------------------------------


def test_no_store_is_today_s_plan():
    """url empty (the role's default) or no key: no store, model_store null, nothing else changes."""
    plain = P.plan(gpus=F.GPUS, driver_version="550.54.14", image=F.IMAGE_0_8_5, model=F.LLAMA_8B_BF16,
                   request=F.request(), nvlink=False, today=F.TODAY, fp16_copy=dict(F.ROOMY))
    empty = P.plan(gpus=F.GPUS, driver_version="550.54.14", image=F.IMAGE_0_8_5, model=F.LLAMA_8B_BF16,
                   request=F.request(model_store={"url": "", "name": "", "revision": ""}), nvlink=False,
                   today=F.TODAY, fp16_copy=dict(F.ROOMY), model_store={"status": -1})
    assert plain["model_store"] is None
    assert plain == empty
    assert S.store_request(None) is None and S.store_request({"url": "  "}) is None


def test_the_request_key_is_normalised():
    store = S.store_request({"url": " https://10.0.0.5:8443/models/ ", "name": "quasar", "revision": "r1+fp16"})
    assert store == {"url": "https://10.0.0.5:8443/models", "name": "quasar", "revision": "r1+fp16",
                     "manifest_url": "https://10.0.0.5:8443/models/quasar/r1+fp16/labfleet-manifest.json"}
    assert S.store_request(dict(STORE))["manifest_url"] == MANIFEST_URL
    assert S.store_request({"url": "http://[fd00::5]:80", "name": "m", "revision": "v"})["url"] == "http://[fd00::5]:80"


@pytest.mark.parametrize("store,fragment", [
    ({"url": "ftp://models.lab"}, "request.model_store.url: expected the store's address http(s)://host[:port]"),
    ({"url": "models.lab:8080"}, "request.model_store.url: expected"),
    ({"url": "http://user:secret@models.lab"}, "request.model_store.url: no credentials"),
    ({"url": "http://models.lab/?x=1"}, "request.model_store.url: expected"),
    ({"url": "http://models.lab:99999"}, "request.model_store.url: expected"),
    ({"url": "http://models.lab/a/../b"}, "request.model_store.url: expected"),
    ({"url": "http://models lab"}, "request.model_store.url: expected"),
    ({"url": 8080}, "request.model_store.url: expected a string"),
    ({"name": ""}, "request.model_store.name (the model's name in the store) must be 1 to 128 ASCII letters"),
    ({"name": "a/b"}, "request.model_store.name (the model's name in the store) must be"),
    ({"name": 7}, "request.model_store.name: expected a string"),
    ({"revision": "../etc"}, "request.model_store.revision (the model's revision in the store) must be"),
    ({"revision": ".hidden"}, "request.model_store.revision (the model's revision in the store) must be"),
    ({"revision": "r" * 129}, "request.model_store.revision (the model's revision in the store) must be"),
    ({"revison": "r1"}, "request.model_store: unknown key revison; the keys are url, name and revision"),
])
def test_a_bad_request_key_names_what_to_fix(store, fragment):
    with pytest.raises(GateInputError) as err:
        run(answer(), store=dict(STORE, **store))
    assert fragment in str(err.value)


def test_a_store_needs_the_model_path():
    with pytest.raises(GateInputError) as err:
        P.normalize_request({"model_store": dict(STORE)})
    assert "request.model_path: the model store's revisions are fetched to request.model_path" in str(err.value)
    with pytest.raises(GateInputError) as err:
        P.normalize_request({"model_path": "/srv/models/model", "model_store": "http://models.lab"})
    assert "request.model_store: expected a mapping (url, name, revision), got str" in str(err.value)


# --- the manifest is the model: the host is planned before it has the weights ----------------------


def test_a_native_revision_that_fits_is_fetched():
    store_answer = answer()
    verdict = run(store_answer)
    assert verdict["allowed"], verdict["reasons"]
    assert verdict["serving_path"] == "native"
    # The manifest's gate is the model the plan judged (BF16 8B: 16.1 GB of weights over 2 GPUs).
    assert verdict["plan"]["weights_bytes_total"] == F.LLAMA_8B_BF16["weight_bytes"]
    assert verdict["model_store"] == {
        "url": "http://models.lab:8080", "name": "quasar", "revision": "2026-11-30", "manifest_url": MANIFEST_URL,
        "manifest_sha256": hashlib.sha256(store_answer["content"].encode("utf-8")).hexdigest(),
        "total_bytes": 16 * GB,
        "fetch": {"revision": "2026-11-30", "dest": "/srv/models/model", "bytes": 16 * GB},
        "disk_free_bytes": 500 * GB, "disk_needed_bytes": 16 * GB}
    step = verdict["steps"]["model"]
    assert (step["action"], step["dest"], step["revision"], step["store"]) == (
        "fetch", "/srv/models/model", "2026-11-30", "http://models.lab:8080")
    assert "fetch quasar/2026-11-30 from the model store to /srv/models/model" in verdict["summary"]


def test_a_revision_already_on_the_host_needs_no_disk():
    verdict = run(answer(free=GB, complete=True))
    assert verdict["allowed"], verdict["reasons"]
    assert verdict["model_store"]["disk_needed_bytes"] == 0
    assert verdict["steps"]["model"]["action"] == "keep"
    assert "keep quasar/2026-11-30 from the model store at /srv/models/model" in verdict["summary"]


def test_a_revision_that_does_not_fit_on_disk_is_refused_before_any_transfer():
    verdict = run(answer(free=10 * GB))
    assert not verdict["allowed"]
    assert codes(verdict["reasons"]) == ["INSUFFICIENT_DISK"]
    text = message(verdict["reasons"], "INSUFFICIENT_DISK")
    assert "quasar/2026-11-30 from the model store needs 16.0 GB (16000000000 bytes" in text
    assert "the fetch keeps 64 MiB free) at /srv/models/model.revisions/2026-11-30" in text
    assert "has 10.0 GB (10000000000 bytes) free: free 6.1 GB there, or set request.model_path" in text
    assert verdict["steps"]["model"]["action"] == "refuse"
    assert verdict["steps"]["model"]["reasons"] == ["INSUFFICIENT_DISK"]
    assert verdict["model_store"]["disk_free_bytes"] == 10 * GB
    assert verdict["model_store"]["disk_needed_bytes"] == 16 * GB


def test_unknown_free_space_is_a_warning():
    verdict = run(answer(free=None))
    assert verdict["allowed"]
    assert "the fetch checks it before it writes anything" in message(verdict["warnings"], "MODEL_DISK_UNCHECKED")
    assert verdict["model_store"]["disk_free_bytes"] is None


def test_a_model_the_caller_read_is_judged_instead():
    """The recheck after the fetch passes model_facts of what arrived: that is judged; the record stays."""
    verdict = run(answer(), model=dict(F.LLAMA_8B_BF16, weight_bytes=20 * GB))
    assert verdict["plan"]["weights_bytes_total"] == 20 * GB
    assert verdict["model_store"]["fetch"]["revision"] == "2026-11-30"


# --- a converted copy from the store ----------------------------------------------------------------


def test_an_nvfp4_revision_on_v100s_fetches_the_store_s_fp16_copy():
    verdict = run(answer(F.LLAMA_8B_NVFP4, content=manifest(F.LLAMA_8B_NVFP4, total=6 * GB)))
    assert verdict["allowed"], verdict["reasons"]
    assert verdict["serving_path"] == "fp16_fallback"
    record = verdict["model_store"]
    assert record["total_bytes"] == 6 * GB
    assert record["fetch"] == {"revision": "2026-11-30+fp16", "dest": "/srv/models/model-fp16",
                               "bytes": F.LLAMA_8B_NVFP4["fp16_weight_bytes"]}
    # The copy's disk is the plan's copy check (fp16_copy), not the NVFP4 source's.
    assert record["disk_free_bytes"] == F.ROOMY["disk_free_bytes"]
    assert record["disk_needed_bytes"] == F.LLAMA_8B_NVFP4["fp16_weight_bytes"]
    step = verdict["steps"]["model"]
    assert (step["action"], step["revision"], step["dest"]) == ("fetch", "2026-11-30+fp16", "/srv/models/model-fp16")
    assert step["fp16_copy"]["action"] == "fetch"
    assert "converts nothing" in step["fp16_copy"]["why"]
    assert "fetch quasar/2026-11-30+fp16 from the model store" in verdict["summary"]
    assert "dequantize" not in verdict["summary"]


def test_the_store_s_copy_that_does_not_fit_is_refused_by_the_copy_check():
    small = {"complete": False, "disk_free_bytes": 8 * GB}
    verdict = run(answer(F.LLAMA_8B_NVFP4, content=manifest(F.LLAMA_8B_NVFP4, total=6 * GB)), copies=small)
    assert not verdict["allowed"]
    assert "INSUFFICIENT_DISK" in codes(verdict["reasons"])
    assert verdict["model_store"]["disk_free_bytes"] == 8 * GB


def test_the_store_s_copy_already_on_the_host_is_kept():
    done = {"complete": True, "disk_free_bytes": GB}
    verdict = run(answer(F.LLAMA_8B_NVFP4, content=manifest(F.LLAMA_8B_NVFP4, total=6 * GB)), copies=done)
    assert verdict["allowed"], verdict["reasons"]
    assert verdict["model_store"]["disk_needed_bytes"] == 0
    assert verdict["steps"]["model"]["action"] == "keep"
    assert verdict["steps"]["model"]["fp16_copy"]["action"] == "keep"


def test_a_70b_nvfp4_revision_fetches_the_store_s_gptq_copy():
    gate = copy.deepcopy(F.LLAMA_70B_NVFP4)
    verdict = run(answer(gate, content=manifest(gate, total=43 * GB)))
    assert verdict["allowed"], verdict["reasons"]
    assert verdict["serving_path"] == "gptq_repack"
    repack = verdict["serving"]["gptq_repack"]
    assert verdict["model_store"]["fetch"] == {"revision": "2026-11-30+gptq-g%d" % repack["group_size"],
                                               "dest": "/srv/models/model-gptq%d" % repack["group_size"],
                                               "bytes": repack["repacked_bytes"]}
    assert verdict["steps"]["model"]["gptq_copy"]["action"] == "fetch"


# --- the store's answer -----------------------------------------------------------------------------


def test_an_unreachable_store_refuses_the_host():
    msg = "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"
    verdict = run({"status": -1, "content": "", "msg": msg, "disk_free_bytes": 500 * GB})
    assert not verdict["allowed"]
    assert codes(verdict["reasons"])[0] == "MODEL_STORE_UNREACHABLE"
    text = message(verdict["reasons"], "MODEL_STORE_UNREACHABLE")
    assert MANIFEST_URL in text and "Connection refused" in text
    assert "check that the model store at http://models.lab:8080 is up and that this host reaches it" in text
    assert verdict["model_store"] == {
        "url": "http://models.lab:8080", "name": "quasar", "revision": "2026-11-30", "manifest_url": MANIFEST_URL,
        "manifest_sha256": None, "total_bytes": None, "fetch": None, "disk_free_bytes": None,
        "disk_needed_bytes": None}
    assert verdict["steps"]["model"]["action"] == "refuse"
    assert verdict["summary"].startswith("refused (MODEL_STORE_UNREACHABLE")


@pytest.mark.parametrize("store_answer,fragment", [
    ({"status": 500, "content": "oops", "msg": "Status code was 500 and not [200]: HTTP Error 500"}, "HTTP 500"),
    ({"status": 200, "content": None}, "HTTP 200 without content"),
    (None, "no answer recorded (the preflight did not ask the store)"),
])
def test_other_failures_are_unreachable_too(store_answer, fragment):
    verdict = run(store_answer)
    assert codes(verdict["reasons"])[0] == "MODEL_STORE_UNREACHABLE"
    assert fragment in message(verdict["reasons"], "MODEL_STORE_UNREACHABLE")


def test_a_revision_the_store_lacks_refuses_the_host():
    verdict = run({"status": 404, "content": "Not Found", "msg": "Status code was 404 and not [200]"})
    assert codes(verdict["reasons"])[0] == "MODEL_NOT_IN_STORE"
    text = message(verdict["reasons"], "MODEL_NOT_IN_STORE")
    assert "has no quasar/2026-11-30" in text and "Check request.model_store.name and revision" in text


def _doc(**changes):
    doc = json.loads(manifest(F.LLAMA_8B_BF16))
    doc.update(changes)
    return doc


@pytest.mark.parametrize("content,fragment", [
    ("{not json", "the manifest is not valid JSON"),
    ("[1, 2]", "a manifest is a JSON object, found list"),
    (json.dumps(_doc(format="labfleet.model-manifest/2")), "format must be 'labfleet.model-manifest/1'"),
    (json.dumps(_doc(name="other")), "the manifest's name is 'other', the request's quasar"),
    (json.dumps(_doc(revision="2026-12-01")), "the manifest's revision is '2026-12-01', the request's 2026-11-30"),
    (json.dumps(_doc(total_bytes=5)), "total_bytes 5 is not the sum of the files' sizes (16000000000)"),
    (json.dumps(_doc(total_bytes=-1)), "total_bytes -1 is not the sum"),
    (json.dumps(_doc(files={"a": 1})), "files must be a list"),
    (json.dumps(_doc(files=[{"path": "../x", "size": 1, "sha256": "a" * 64}], total_bytes=1)), "path '../x'"),
    (json.dumps(_doc(files=[{"path": "x", "size": True, "sha256": "a" * 64}], total_bytes=1)), "size must be"),
    (json.dumps(_doc(files=[{"path": "x", "size": 1, "sha256": "A" * 64}], total_bytes=1)), "sha256 must be 64"),
    (json.dumps(_doc(gate={})), "the manifest has no gate"),
    (json.dumps(_doc(gate=None)), "the manifest has no gate"),
    (json.dumps(_doc(source="hf")), "source must be null or an object"),
    (json.dumps(_doc(extra=1)), "has unknown keys extra"),
])
def test_a_malformed_manifest_refuses_the_host(content, fragment):
    verdict = run({"status": 200, "content": content, "msg": "OK"})
    assert codes(verdict["reasons"])[0] == "MODEL_MANIFEST_INVALID"
    text = message(verdict["reasons"], "MODEL_MANIFEST_INVALID")
    assert fragment in text, text
    assert text.startswith("the model store's manifest of quasar/2026-11-30 cannot be used: %s: " % MANIFEST_URL)
    assert "Publish the revision again" in text
    assert verdict["model_store"]["manifest_sha256"] == hashlib.sha256(content.encode("utf-8")).hexdigest()
    assert verdict["model_store"]["fetch"] is None


def test_the_manifest_s_gate_is_the_model_only_when_the_caller_has_none():
    request = F.request(model_store=dict(STORE))
    gate = S.store_model({}, request, answer())
    assert gate == json.loads(answer()["content"])["gate"]
    assert S.store_model({"weight_bytes": 1}, request, answer()) == {"weight_bytes": 1}
    assert S.store_model({}, request, {"status": 404}) == {}
    assert S.store_model({}, F.request(), answer()) == {}
    assert S.store_model({}, F.request(model_store={"url": "ftp://x"}), answer()) == {}


def test_copy_revisions_and_revision_dirs():
    assert S.copy_revision("r1", "fp16") == "r1+fp16"
    assert S.copy_revision("r1", "gptq", 64) == "r1+gptq-g64"
    assert S.revision_dir("/srv/models/model/", "r1") == "/srv/models/model.revisions/r1"


# --- the codes are the plan's, documented, and block the model step ---------------------------------


def test_the_store_s_codes_are_documented_and_block_the_model_step():
    with open(os.path.join(REPO, "docs", "deploy_gate.md")) as handle:
        md = handle.read()
    with open(os.path.join(REPO, "plugins", "modules", "deploy_gate.py")) as handle:
        module_doc = handle.read()
    for code in list(S.STORE_REASON_CODES) + list(S.STORE_WARNING_CODES) + ["INSUFFICIENT_DISK"]:
        assert code in P.PLAN_REASON_CODES or code in P.PLAN_WARNING_CODES, code
        assert "| `%s` |" % code in md, code
        assert "V(%s)" % code in module_doc, code
    for code in S.STORE_REASON_CODES:
        assert P.STEP_OF_CODE[code] == "model"
