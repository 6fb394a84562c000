# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each fact lives once: plugins/module_utils/knowledge/ is the knowledge base (_policy.py the
compatibility policy and tool versions, _gpu_models.py the GPU model table), every other module
derives from it.

Two kinds of checks:

1. A scan of the source (AST) of plugins/module_utils/**/*.py and plugins/modules/*.py:
   - literal constants that look like facts (CUDA and driver versions, arch lists, vLLM versions,
     NVIDIA_REQUIRE_CUDA strings, driver-branch lists, quantization-method lists, compute
     capability -> architecture maps, NVML's integer decoding) may be written only in _policy.py,
     and inside _policy.py a value of one kind of fact may sit in one table only;
   - tables: a dict/list/tuple/set literal of GPU models (names, with bandwidths, SM counts or
     anything else), a per-compute-capability table of numbers or a name -> compute capability
     table may stand only in _gpu_models.py; a tool version (a TOOL_VERSIONS string, or a
     (major, minor, patch) tuple compared with) only in knowledge/.
   ALLOWED lists the few legitimate exceptions, each with the reason.
2. Agreement: where two modules answer the same question (image profiles vs the release table,
   gpu_facts' architecture names vs the policy, NVML decoding, arch coverage, quantization names,
   NVFP4 detection, the container_runtime role's tool versions), they give the same answer on a
   grid of inputs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import collections
import glob
import json
import os
import re

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate as G
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate_facts as GF
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate_inputs as GI
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate_rules_driver as GD
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4 as N
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _image as I
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _model as M
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _gpu_models
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
KNOWLEDGE_BASE = "_policy.py"
GPU_TABLE = "_gpu_models.py"


def _sources(repo):
    """(file name, in knowledge/, AST) of every module_utils file and module."""
    paths = sorted(glob.glob(os.path.join(repo, "plugins", "module_utils", "**", "*.py"), recursive=True)
                   + glob.glob(os.path.join(repo, "plugins", "modules", "*.py")))
    assert paths, "no plugin sources found under %s" % repo
    knowledge = os.path.join(repo, "plugins", "module_utils", "knowledge") + os.sep
    for path in paths:
        with open(path) as handle:
            yield os.path.basename(path), path.startswith(knowledge), ast.parse(handle.read(), path)


# --------------------------------------------------------------------------------------------
# 1. Source scan
# --------------------------------------------------------------------------------------------

# Whole string constants that are facts.
FACT_STRINGS = {
    "cuda_version": re.compile(r"^1[0-3]\.\d\.\d$"),                      # "12.4.0"
    "driver_version": re.compile(r"^[3-9]\d\d\.\d{1,3}(\.\d{1,3})?$"),    # "550.54.14", "570.26"
    "arch_list": re.compile(r"^\d{1,2}\.\d[af]?(\+PTX)?([ ;]\d{1,2}\.\d[af]?(\+PTX)?){2,}$"),
    "vllm_version": re.compile(r"^v?0\.\d{1,2}\.\d{1,2}(\.\d+)?$"),       # "0.8.5"
    "require_cuda": re.compile(r"^(cuda>=\d|brand=[a-z]+,driver)"),
}
_QUANT_MARKERS = frozenset(("awq", "gptq", "fp8", "gguf", "bitsandbytes", "marlin", "compressed-tensors",
                            "compressed_tensors", "modelopt", "moe_wna16"))
_CC_KEY = re.compile(r"^\d{1,2}\.\d$")
_ARCH_NAME = re.compile(r"^[A-Z][a-z]+( [A-Z][a-z]+)?$")

# Legitimate uses outside the knowledge base: (file, kind, value) -> why.
ALLOWED = {
    # The distributions' own archives: which branches a distribution ships is packaging knowledge
    # of the nvidia_driver role, not compatibility policy; Ubuntu 22.04 and 24.04 ship the same two.
    ("_driver.py", "driver_branches", (550, 580)): "DISTROS native branches (Ubuntu 22.04 and 24.04)",
    # How model_facts reads a checkpoint: the methods whose quantization_config describes integer
    # weights by bits and group_size. A reading rule of the config format, stated nowhere else.
    ("_model.py", "quantization_methods", ("gptq", "awq", "gptq_marlin", "awq_marlin", "marlin", "moe_wna16")):
        "integer-weight methods in quant_from_config_json",
    # The memory model is code transcribed from two releases' sources; the version names which
    # source a rule was read from (a citation label), not a compatibility fact about that release.
    ("_vllm_memory.py", "vllm_version", "0.8.5"): "the release whose V0 profile run is modelled",
    ("_vllm_memory.py", "vllm_version", "0.19.1"): "the release whose V1 profile run is modelled",
    # The startup checks are transcribed from the same two releases' sources; the version names
    # which release's rule applies (a citation label and the key of CHECKS' source columns).
    ("_vllm_startup.py", "vllm_version", "0.8.5"): "the release whose startup checks are modelled",
    ("_vllm_startup.py", "vllm_version", "0.19.1"): "the release whose startup checks are modelled",
    # A code-reading fact of vLLM's attention layer: the quantization configs whose
    # get_quant_method() returns a KV-cache method for Attention (so fp8_e5m2 is refused); it
    # describes vLLM's loader, not which GPU a method needs.
    ("_vllm_startup.py", "quantization_methods", ("fp8", "modelopt", "modelopt_fp4", "compressed_tensors", "quark")):
        "KV_SCALE_QUANT_METHODS (fp8_e5m2 with a KV-scale checkpoint)",
}

# Calls of .replace("-", "_") outside the knowledge base that normalise something other than a
# quantization name: (file, function) -> why.
REPLACE_ALLOWED = {
    ("_plan.py", "arg_key()"): "a vLLM flag's argparse dest (--max-num-seqs -> max_num_seqs), the inverse of _flag",
}


def _docstring_ids(tree):
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _lookup_ids(tree):
    """Constants used to look something up (d["0.8.5"], f("12.4")) rather than to state it."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            for sub in ast.walk(node.slice):
                ids.add(id(sub))
    return ids


def _int_list(node):
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) or len(node.elts) < 2:
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if len(values) != len(node.elts):
        return None
    if all(isinstance(v, int) and not isinstance(v, bool) and 400 <= v <= 999 for v in values):
        return tuple(values)
    return None


def _quant_list(node):
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("frozenset", "set", "tuple", "list") \
            and node.args:
        node = node.args[0]
    if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) or len(node.elts) < 5:
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if len(values) == len(node.elts) and len(_QUANT_MARKERS.intersection(values)) >= 3:
        return tuple(values)
    return None


def _cc_name_map(node):
    if not isinstance(node, ast.Dict) or len(node.keys) < 2:
        return False
    pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values)
             if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
             and isinstance(k.value, str) and isinstance(v.value, str)]
    return len(pairs) >= 2 and sum(1 for k, v in pairs if _CC_KEY.match(k) and _ARCH_NAME.match(v)) >= 2


def _table_of(tree):
    """Map id(node) -> name of the module-level assignment or function the node sits in."""
    owner = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            name = ",".join(getattr(t, "id", "?") for t in stmt.targets)
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            name = stmt.name + "()"
        else:
            name = "<module>"
        for node in ast.walk(stmt):
            owner[id(node)] = name
    return owner


def _field_of(tree):
    """Map id(constant) -> the innermost dict key it is the value of (also through a list value),
    or "func#n" / "func:kw" for an argument of a call."""
    field = {}
    # ast.walk goes outside in, so an inner dict or call overwrites what an outer one set.
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    for sub in ast.walk(value):
                        field[id(sub)] = key.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for index, arg in enumerate(node.args):
                for sub in ast.walk(arg):
                    field[id(sub)] = "%s#%d" % (node.func.id, index)
            for kw in node.keywords:
                for sub in ast.walk(kw.value):
                    field[id(sub)] = "%s:%s" % (node.func.id, kw.arg)
    return field


# --- Tables: what knowledge/ holds as tables may not be restated as a literal anywhere else ------

# GPU names: the model table's rows and what its family rules read as a GPU (short strings only: a
# sentence that names a GPU is prose, not a table).
_GPU_MODEL_NAMES = frozenset(row["model"] for row in _gpu_models.GPU_MODELS)
# The tool versions of the policy, as written there.
_TOOL_VERSION_TEXTS = frozenset(entry["version"] for entry in P.TOOL_VERSIONS.values() if "." in entry["version"])


# Architecture names ("Ada Lovelace") are the policy's, not GPU models.
_ARCH_WORDS = frozenset(w.lower() for key, entry in P.ARCHITECTURES.items() for w in [key, entry["label"]])


def _is_gpu_name(value):
    return isinstance(value, str) and value.lower() not in _ARCH_WORDS and (value in _GPU_MODEL_NAMES or (
        len(value) <= 40 and len(value.split()) <= 5 and _gpu_models.compute_capability_from_name(value) is not None))


def _is_int_constant(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _is_cc(node):
    """A compute capability literal: "7.0" or (7, 0)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(_CC_KEY.match(node.value))
    return (isinstance(node, ast.Tuple) and len(node.elts) == 2
            and all(_is_int_constant(e) for e in node.elts)
            and 1 <= node.elts[0].value <= 20 and 0 <= node.elts[1].value <= 9)


def _is_number(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _members(node):
    """The constants a table literal states: its elements, a dict's keys and values, and the members of
    tuples, lists, dicts or a call's arguments one level down (rows)."""
    items = list(node.keys) + list(node.values) if isinstance(node, ast.Dict) else list(node.elts)
    found = []
    for item in items:
        if isinstance(item, (ast.Tuple, ast.List)):
            found.extend(item.elts)
        elif isinstance(item, ast.Call):
            found.extend(item.args)
        elif isinstance(item, ast.Dict):
            found.extend(list(item.keys) + list(item.values))
        found.append(item)
    return [item for item in found if item is not None]


def _table_problem(node):
    """What kind of knowledge table a dict/list/tuple/set literal restates, or None."""
    if not isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
        return None
    members = _members(node)
    names = set(m.value for m in members if isinstance(m, ast.Constant) and _is_gpu_name(m.value))
    if len(names) >= 2:
        return "a table of GPU models (%s); the GPU model table is knowledge/_gpu_models.py" % ", ".join(sorted(names)[:3])
    if isinstance(node, ast.Dict) and len(node.keys) >= 2 and all(
            k is not None and _is_cc(k) for k in node.keys) and all(_is_number(v) for v in node.values):
        return "a per-compute-capability table of numbers (SM counts, bandwidths, ...); derive it from knowledge/"
    rows = list(node.values if isinstance(node, ast.Dict) else node.elts)
    pairs = [row for row in rows if isinstance(row, ast.Tuple) and len(row.elts) == 2 and _is_cc(row.elts[1])]
    if len(pairs) >= 3 or (isinstance(node, ast.Dict) and sum(1 for v in node.values if _is_cc(v)) >= 3):
        return "a table of names -> compute capability; the GPU model table is knowledge/_gpu_models.py"
    return None


def _version_tuple(node):
    """A literal (major, minor, patch) of a tool, CUDA or driver release (vLLM's 0.x are strings)."""
    return (isinstance(node, ast.Tuple) and len(node.elts) == 3
            and all(_is_int_constant(e) for e in node.elts)
            and node.elts[0].value >= 1 and node.elts[1].value <= 99)


def _restated_tables(name, tree):
    """Problems: knowledge tables, tool versions and version literals written outside knowledge/."""
    problems = []
    skip = _docstring_ids(tree)
    for node in ast.walk(tree):
        what = _table_problem(node)
        if what:
            problems.append("%s:%d: %s" % (name, node.lineno, what))
        compared = []
        if isinstance(node, ast.Compare) and not any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            compared = node.comparators + [node.left]
        elif isinstance(node, ast.Call):
            compared = node.args
        for operand in compared:
            if _version_tuple(operand):
                problems.append("%s:%d: compares with the version %s; name it in _policy.TOOL_VERSIONS (tool_version())"
                                % (name, node.lineno, ast.unparse(operand)))
        if isinstance(node, ast.Constant) and node.value in _TOOL_VERSION_TEXTS and id(node) not in skip:
            problems.append("%s:%d: tool version %r is written here; read it from _policy.TOOL_VERSIONS"
                            % (name, node.lineno, node.value))
    return problems


# Field names that state the same kind of fact (a value under any of them is one fact).
FIELD_GROUPS = {
    "cuda_base": "cuda", "cuda_version": "cuda", "cuda": "cuda",
    "vllm_arch": "vllm_arch", "arch_list": "vllm_arch",
    "torch_arch": "torch_arch", "torch_arch_list": "torch_arch", "arch": "torch_arch",
    "torch": "torch", "torch_version": "torch",
    "min_linux_driver": "min_driver", "_tk#1": "min_driver",
}


def scan(repo=REPO):
    """(facts, problems): facts[(kind, value)] = [(file, line, table, field)]; problems: list of text."""
    facts = collections.defaultdict(list)
    problems = []
    for name, in_knowledge, tree in _sources(repo):
        if not in_knowledge:
            problems.extend(_restated_tables(name, tree))
        elif name != GPU_TABLE:
            problems.extend("%s:%d: %s" % (name, node.lineno, what) for node in ast.walk(tree)
                            for what in [_table_problem(node)] if what)
        skip = _docstring_ids(tree) | _lookup_ids(tree)
        tables = _table_of(tree)
        fields = _field_of(tree)
        for node in ast.walk(tree):
            where = (name, getattr(node, "lineno", 0), tables.get(id(node), "?"), fields.get(id(node)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                for kind, pattern in FACT_STRINGS.items():
                    if pattern.match(node.value):
                        facts[(kind, node.value)].append(where)
            branches = _int_list(node)
            if branches is not None:
                facts[("driver_branches", branches)].append(where)
            methods = _quant_list(node)
            if methods is not None:
                facts[("quantization_methods", methods)].append(where)
            if _cc_name_map(node):
                problems.append("%s:%d: a compute capability -> architecture name dict; derive it from "
                                "_policy.ARCHITECTURES (architecture_label)" % where[:2])
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)) \
                    and isinstance(node.right, ast.Constant) and node.right.value == 1000 \
                    and name != KNOWLEDGE_BASE:
                problems.append("%s:%d: decodes NVML's integer CUDA version itself; call "
                                "_policy.cuda_version_from_nvml" % where[:2])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace" \
                    and [getattr(a, "value", None) for a in node.args] == ["-", "_"] and name != KNOWLEDGE_BASE \
                    and (name, where[2]) not in REPLACE_ALLOWED:
                problems.append("%s:%d: normalises a quantization name itself; call _policy.quant_text / "
                                "canonical_quant / quant_key" % where[:2])
    for (kind, value), places in sorted(facts.items(), key=lambda item: repr(item[0])):
        outside = [p for p in places if p[0] != KNOWLEDGE_BASE and (p[0], kind, value) not in ALLOWED]
        for place in outside:
            problems.append("%s:%d: %s %r is written here; it belongs in %s once (then import or derive it)"
                            % (place[0], place[1], kind, value, KNOWLEDGE_BASE))
        if kind in ("quantization_methods", "driver_branches"):
            inside = [p for p in places if p[0] == KNOWLEDGE_BASE]
            if len(inside) > 1:
                problems.append("%s: %s %r is written %d times (lines %s)" % (
                    KNOWLEDGE_BASE, kind, value, len(inside), ", ".join(str(p[1]) for p in inside)))
        # Inside the knowledge base: one kind of fact with one value sits in one table.
        by_group = collections.defaultdict(set)
        for place in places:
            if place[0] == KNOWLEDGE_BASE and place[3] in FIELD_GROUPS:
                by_group[FIELD_GROUPS[place[3]]].add((place[2], place[1]))
        for group, spots in by_group.items():
            tables = sorted(set(spot[0] for spot in spots))
            if len(tables) > 1:
                problems.append("%s: %s %r is stated in %d tables (%s)" % (
                    KNOWLEDGE_BASE, group, value, len(tables),
                    ", ".join("%s line %d" % s for s in sorted(spots))))
    unique = []
    for problem in problems:
        if problem not in unique:
            unique.append(problem)
    return facts, unique


def test_each_fact_is_written_once():
    facts, problems = scan()
    assert facts, "the scan found no facts at all; the patterns no longer match the sources"
    assert not problems, "facts written more than once:\n" + "\n".join(problems)


def test_allow_list_is_still_needed():
    facts = scan()[0]
    used = set()
    for (kind, value), places in facts.items():
        for place in places:
            used.add((place[0], kind, value))
    stale = [key for key in ALLOWED if key not in used]
    assert not stale, "ALLOWED entries that match nothing any more (remove them): %r" % stale


def test_scan_catches_a_restated_fact(tmp_path):
    """The scan itself: a profile literal restating a CUDA version, a second cc -> name map, a
    branch list outside the policy and one CUDA version in two policy tables all fail; the same
    value for two releases of one table does not."""
    module_utils = tmp_path / "plugins" / "module_utils"
    module_utils.mkdir(parents=True)
    (tmp_path / "plugins" / "modules").mkdir()
    (module_utils / "_policy.py").write_text(
        u'X = {"0.8.5": {"cuda_base": "12.4.0"}, "0.8.4": {"cuda_base": "12.4.0"}}\n'
        u'Y = {"vllm/vllm-openai:v0.8.5": {"cuda_version": "12.4.0"}}\n')
    (module_utils / "_image.py").write_text(
        u'P = {"cuda_version": "12.4.1"}\nA = {"8.9": "Ada", "9.0": "Hopper"}\nB = (470, 525, 535)\n')
    problems = scan(str(tmp_path))[1]
    text = "\n".join(problems)
    assert "_image.py:1: cuda_version '12.4.1'" in text
    assert "_image.py:2: a compute capability -> architecture name dict" in text
    assert "_image.py:3: driver_branches (470, 525, 535)" in text
    assert "_policy.py: cuda '12.4.0' is stated in 2 tables (X line 1, Y line 2)" in text


def test_scan_catches_a_restated_table(tmp_path):
    """The table scan itself: outside knowledge/, a bandwidth dict keyed by GPU names, a row list of
    GPU names, an SM count per compute capability, a name -> compute capability list, a tool version
    compared as a tuple and a tool version string all fail; inside knowledge/ only the GPU model table
    may hold GPU tables; a sentence naming a GPU and an architecture name are not tables."""
    knowledge = tmp_path / "plugins" / "module_utils" / "knowledge"
    reporting = tmp_path / "plugins" / "module_utils" / "reporting"
    knowledge.mkdir(parents=True)
    reporting.mkdir()
    (tmp_path / "plugins" / "modules").mkdir()
    (knowledge / "_gpu_models.py").write_text(u'ROWS = [("Tesla V100 PCIe 32GB", "7.0", 900), ("Tesla T4", "7.5", 320)]\n')
    (knowledge / "_vllm_memory.py").write_text(u'SMS = {(7, 0): 80, (8, 0): 108}\n')
    (reporting / "_bench.py").write_text(
        u'BW = {"Tesla V100 PCIe 32GB": {"gb_s": 900}, "A100 SXM4 80GB": {"gb_s": 2039}}\n'
        u'ROWS = [_bw("Tesla V100-PCIE-32GB", 900), _bw("NVIDIA H100 80GB HBM3", 3350)]\n'
        u'SMS = {(7, 0): 80, (8, 0): 108}\n'
        u'NAMES = [(r"v100", "7.0"), (r"t4", "7.5"), (r"a100", "8.0")]\n'
        u'FAMILY = [(re.compile(r"x"), "7.0"), (re.compile(r"y"), "7.5"), (re.compile(r"z"), "8.0")]\n'
        u'OLD = toolkit < (1, 14, 0)\n'
        u'PIN = "1.18.2"\n'
        u'OK = ["use a V100 or a T4 for this, as the reference deployment does", "Ada Lovelace", "Volta"]\n'
        u'HEADS = head in (64, 128, 256)\n')
    text = "\n".join(scan(str(tmp_path))[1])
    assert "_gpu_models.py:" not in text
    expected = ["_vllm_memory.py:1: a per-compute-capability table of numbers",
                "_bench.py:1: a table of GPU models (A100 SXM4 80GB, Tesla V100 PCIe 32GB)",
                "_bench.py:2: a table of GPU models (NVIDIA H100 80GB HBM3, Tesla V100-PCIE-32GB)",
                "_bench.py:3: a per-compute-capability table of numbers",
                "_bench.py:4: a table of GPU models (a100, t4, v100)",
                "_bench.py:5: a table of names -> compute capability",
                "_bench.py:6: compares with the version (1, 14, 0)",
                "_bench.py:7: tool version '1.18.2' is written here"]
    assert [line for line in expected if line not in text] == []
    assert "_bench.py:8" not in text and "_bench.py:9" not in text


# --------------------------------------------------------------------------------------------
# 2. Agreement between the modules that use a fact
# --------------------------------------------------------------------------------------------

POLICY = P.merge_policy()


def _profile_releases():
    for version, release in sorted(P.VLLM_RELEASES.items()):
        for image_key in sorted(release.get("images") or {}):
            yield version, image_key


@pytest.mark.parametrize("version,image_key", list(_profile_releases()))
def test_image_profiles_agree_with_the_release_table(version, image_key):
    release = P.VLLM_RELEASES[version]
    image = release["images"][image_key]
    fields = dict(release, **(image.get("variant") or {}))
    profile = I.PROFILES[image_key]
    assert profile["vllm_version"] == version
    assert profile["cuda_version"] == fields["cuda_base"]
    assert profile["arch_list"] == fields["vllm_arch"].split()
    assert profile["torch_version"] == fields["torch"]
    assert profile["quantization_methods"] == fields["quantization_methods"]
    assert profile["require_cuda"] == P.require_cuda_string(fields["cuda_base"])
    assert profile["min_compute_capability"] == P.format_cc(P.vllm_min_cc(POLICY, P.parse_version(version)))
    assert profile["entrypoint"] == fields["entrypoint"]
    assert profile["tags"] == image["tags"]
    # and the gate reads the same release through its own path
    key, entry = GF.release_for(POLICY, P.parse_version(version))
    assert key == version and entry["cuda_base"] == release["cuda_base"]


def test_every_release_row_with_an_image_profile_is_profiled():
    assert sorted(I.PROFILES) == sorted(pair[1] for pair in _profile_releases())
    assert I.QUANT_0_8_5 is P.VLLM_RELEASES["0.8.5"]["quantization_methods"]


@pytest.mark.parametrize("version", sorted(P.VLLM_RELEASES))
def test_release_min_cc_and_require_cuda_are_derived(version):
    release = P.VLLM_RELEASES[version]
    assert release["min_cc"] == P.format_cc(P.vllm_min_cc(POLICY, P.parse_version(version)))
    assert release["require_cuda"] == P.require_cuda_string(release["cuda_base"])
    wheel = P.TORCH_WHEELS.get(release.get("torch_wheel"))
    assert release["torch_arch"] == (wheel["arch"] if wheel else None)


def test_reference_values_that_were_wrong_before():
    assert P.VLLM_RELEASES["0.8.5"]["cuda_base"] == "12.4.0"
    assert I.PROFILES["vllm/vllm-openai:v0.8.5"]["cuda_version"] == "12.4.0"
    assert "11.0" not in P.VLLM_RELEASES["0.20.0"]["vllm_arch"].split()
    assert I.PROFILES["vllm/vllm-openai:v0.20.0"]["arch_list"] == P.VLLM_RELEASES["0.20.0"]["vllm_arch"].split()
    assert P.FORWARD_COMPAT_IMAGE_BRANCHES["12.4"]["branches"] == [470, 525, 535]


def test_torch_without_sm70_follows_the_releases():
    span = P.TORCH_WITHOUT_SM70["range"]
    low, high = P.parse_version(span[0]), P.parse_version(span[1])
    for version, release in P.VLLM_RELEASES.items():
        wheel = P.TORCH_WHEELS.get(release.get("torch_wheel"))
        if not wheel:
            continue
        lacks = P.covers(release.get("vllm_arch", "").split(), (7, 0)) == "sass" \
            and P.covers(wheel["arch"].split(), (7, 0)) is None
        assert lacks == GD.in_range(P.parse_version(version), low, high), version
    assert P.TORCH_WITHOUT_SM70["torch_arch"] == P.TORCH_WHEELS["2.7 cu128"]["arch"]


@pytest.mark.parametrize("cuda", sorted(P.FORWARD_COMPAT_IMAGE_BRANCHES))
def test_require_cuda_strings_come_from_the_forward_compat_table(cuda):
    entry = P.FORWARD_COMPAT_IMAGE_BRANCHES[cuda]
    alternatives = P.parse_require_cuda(P.require_cuda_string(cuda))
    assert alternatives[0] == [("cuda", ">=", cuda)]
    branches = sorted(set(int(c[2]) for alt in alternatives[1:] for c in alt if c[:2] == ("driver", ">=")))
    assert branches == sorted(entry["branches"])
    for name in ("REQUIRE_CUDA_" + cuda.replace(".", "_"),):
        if hasattr(I, name):
            assert getattr(I, name) == P.require_cuda_string(cuda)


def test_cuda_toolkits_agree_with_mvc_and_driver_branches():
    for key, entry in P.CUDA_TOOLKITS.items():
        major = key.split(".")[0]
        assert entry["mvc_floor"] == P.MINOR_VERSION_COMPATIBILITY[major]["driver_min"], key
        branch = P.parse_driver_version(entry["min_linux_driver"])[0]
        native = P.max_cuda_for_branch(POLICY, branch)[0]
        assert native is not None and P.compare_versions(native, P.parse_version(key)[:2]) >= 0, key


ALL_CCS = sorted(set(cc for entry in P.ARCHITECTURES.values() for cc in entry["cc"]) | {"1.0", "8.8", "13.0"},
                 key=P.parse_cc)


@pytest.mark.parametrize("cc", ALL_CCS)
def test_architecture_names_agree(cc):
    label = P.architecture_label(cc)
    assert _gpu_models.architecture_for(cc) == label
    assert _gpu_models.CC_ARCHITECTURE.get(cc) == label
    gpu = _gpu.complete_gpu(dict(_gpu.new_gpu("test"), compute_capability=cc))
    assert gpu["architecture"] == label
    if label is not None:
        key = P.arch_for_cc(POLICY, P.parse_cc(cc))
        assert POLICY["architectures"][key]["label"] == label


def test_pci_table_names_come_from_the_policy():
    for device_id, entry in _gpu_models.PCI_DEVICES.items():
        assert entry["architecture"] == P.architecture_label(entry["compute_capability"]), device_id
    assert P.architecture_label("7.0") == "Volta"
    assert P.architecture_label("8.9") == "Ada Lovelace"


@pytest.mark.parametrize("number", list(range(1000, 100000, 997)) + [11040, 12040, 12080, 13000, 99990])
def test_nvml_cuda_version_decodes_the_same_everywhere(number):
    via_gpu_facts = _gpu.cuda_version_from_int(number)
    via_gate = GI._cuda_driver_tuple(number, "cuda_driver_version")
    via_gate_text = GI._cuda_driver_tuple(str(number), "cuda_driver_version")
    assert via_gpu_facts == "%d.%d" % via_gate == "%d.%d" % via_gate_text
    assert G.validate_inputs(cuda_driver_version=number)["cuda_driver"] == via_gate


def _arch_lists():
    lists = set()
    for release in P.VLLM_RELEASES.values():
        for field in ("vllm_arch", "vllm_arch_dockerfile", "torch_arch"):
            if release.get(field):
                lists.add(release[field])
    for wheel in P.TORCH_WHEELS.values():
        lists.add(wheel["arch"])
    lists.update(["9.0a", "9.0a+PTX", "compute_90a", "compute_90", "sm_70+PTX", "sm_70 compute_80",
                  "10.0f 12.0f", "8.0+PTX", "7.5 sm_90a compute_90a", "12.0+PTX", "5.0 6.1"])
    return sorted(lists)


@pytest.mark.parametrize("arch_list", _arch_lists())
def test_arch_coverage_is_one_rule(arch_list):
    entries = G.validate_inputs(image={"arch_list": arch_list})["image"]["arch"]
    for text in ALL_CCS + ["9.1", "10.1", "12.1"]:
        cc = P.parse_cc(text)
        assert I.covers(arch_list.split(), cc) == GD.arch_support(entries, cc), (arch_list, text)


QUANT_SPELLINGS = ["nvfp4", "NVFP4", "modelopt_fp4", "modelopt-fp4", "fp4", "modelopt_nvfp4", "nvfp4a16",
                   "compressed-tensors", "compressed_tensors", "Compressed-Tensors", "gptq", "GPTQ", "gptq_marlin",
                   "awq", "AWQ", "awq_marlin", "fp8", "FP8", "fbgemm_fp8", "gguf", "bitsandbytes", "marlin",
                   "modelopt", "moe_wna16", "experts_int8", "mxfp4", "petit_nvfp4", "bitnet", "aqlm"]
QUANT_SPELLINGS += sorted(P.KNOWN_VLLM_QUANT_METHODS)


@pytest.mark.parametrize("spelling", QUANT_SPELLINGS)
def test_quantization_names_normalise_the_same_way(spelling):
    # model_facts' path: the checkpoint's name -> vLLM's spelling, then the gate reads it
    model_name = M.normalise_method(spelling)[0]
    via_model = P.resolve_quant(POLICY, G.validate_inputs(model={"quant_method": model_name})["model"]
                                ["quant_method"])[0]
    # the gate's path: the same spelling given straight to vllm.quantization
    via_gate = P.resolve_quant(POLICY, G.validate_inputs(vllm={"quantization": spelling})["vllm"]
                               ["quantization"])[0]
    assert via_model == via_gate == P.quant_key(spelling)


def test_model_facts_method_tables_are_the_policys():
    assert M.KNOWN_VLLM_METHODS is P.KNOWN_VLLM_QUANT_METHODS
    for key, names in M.METHOD_ALIASES.items():
        assert names[1:] == P.QUANTIZATION[key]["aliases"]
    assert M.normalise_method("compressed_tensors") == ("compressed-tensors", True)
    assert M.normalise_method("nvfp4") == ("modelopt_fp4", True)


def test_coercion_helpers_are_one_copy():
    for value in (0, 1, "1", " 12 ", "12.0", 12.0):
        assert GI._to_int(value, "x") == P.coerce_int(value, "x")
        assert P._as_int(value, "x") == P.coerce_int(value, "x")
    # "1_000" and other scripts' digits are no plain number (issue 13): both copies refuse them.
    for bad in ("1_000", "\uff11\uff12", "\u0661\u0662"):
        with pytest.raises(G.GateInputError):
            GI._to_int(bad, "x")
        with pytest.raises(P.PolicyError):
            P._as_int(bad, "x")
    for value in (True, False, "yes", "off", 1, 0):
        assert G.to_bool(value, "x") == P.coerce_bool(value, "x") == P._as_bool(value, "x")
    for bad in ("maybe", 2, [1]):
        with pytest.raises(G.GateInputError):
            G.to_bool(bad, "x")
        with pytest.raises(P.PolicyError):
            P._as_bool(bad, "x")


# One NVFP4 detection: the converters' layout detection (_nvfp4.detect_layout) and model_facts'
# quantization reader (_model.read_quantization) read each description the same way.
_MODELOPT_TENSORS = {"model.layers.0.mlp.up_proj.weight": {}, "model.layers.0.mlp.up_proj.weight_scale": {},
                     "model.layers.0.mlp.up_proj.weight_scale_2": {}}


def _ct(group_format, num_bits, kind, group_size, top="pack-quantized"):
    return {"quant_method": "compressed-tensors", "format": top, "config_groups": {"group_0": {
        "format": group_format, "targets": ["Linear"],
        "weights": {"num_bits": num_bits, "type": kind, "group_size": group_size, "strategy": "group"}}}}


NVFP4_DESCRIPTIONS = [
    ("hf_quant_config.json", {"quantization": {"quant_algo": "NVFP4"}}),
    ("hf_quant_config.json", {"quantization": {"quant_algo": "nvfp4"}}),
    ("hf_quant_config.json", {"quantization": {"quant_algo": "FP8"}}),
    ("config.json", {"quant_method": "modelopt", "quant_algo": "NVFP4"}),
    ("config.json", {"quant_method": "modelopt", "quant_algo": "FP8"}),
    ("config.json", _ct("nvfp4-pack-quantized", 4, "float", 16)),
    ("config.json", _ct(None, 4, "float", 16, top="nvfp4-pack-quantized")),
    ("config.json", _ct("float-quantized", 4, "float", 16)),
    ("config.json", _ct("pack-quantized", 4, "int", 128)),
    ("config.json", {"quant_method": "gptq", "bits": 4, "group_size": 128}),
] + [("quant_config.json", {"quant_method": name, "block_size": 16, "scale_bits": 8})
     for name in ("nvfp4", "NVFP4", "fp4", "modelopt_fp4", "modelopt-fp4", "nvfp4-pack-quantized", "modelopt", "gptq",
                  "fp8")]


@pytest.mark.parametrize("filename,description", NVFP4_DESCRIPTIONS, ids=lambda v: str(v)[:60])
def test_nvfp4_is_detected_once(tmp_path, filename, description):
    cfg = {"model_type": "llama"}
    if filename == "config.json":
        cfg["quantization_config"] = description
    else:
        (tmp_path / filename).write_text(json.dumps(description))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    quant = M.read_quantization(str(tmp_path), cfg, str(tmp_path / "config.json"))[0]
    try:
        layout = N.detect_layout(str(tmp_path), headers=[{"tensors": _MODELOPT_TENSORS}])
    except N.Nvfp4Error:
        layout = None
    assert (quant["quant_format"] == "nvfp4") == (layout is not None), (quant, layout)


def _role_yaml(*parts):
    from ansible.parsing.yaml.loader import AnsibleLoader
    with open(os.path.join(REPO, "roles", *parts)) as handle:
        return AnsibleLoader(handle).get_single_data()


def test_the_container_runtime_role_keeps_the_policys_tool_versions():
    """The role keeps the user-facing pin and its own Docker checks (YAML cannot import _policy); they
    are the policy's TOOL_VERSIONS and TOOLKIT_PACKAGES."""
    defaults = _role_yaml("container_runtime", "defaults", "main.yml")
    assert defaults["container_runtime_toolkit_version"] == P.TOOL_VERSIONS["toolkit_tested"]["version"]
    role_vars = _role_yaml("container_runtime", "vars", "main.yml")
    assert tuple(role_vars["__container_runtime_toolkit_packages"]) == P.TOOLKIT_PACKAGES
    checks = [task for task in _role_yaml("container_runtime", "tasks", "install.yml")
              if task.get("name") == "Check that Docker is recent enough for what was asked"]
    assert len(checks) == 1
    stated = re.findall(r"version\('([0-9.]+)', '>='\)", " ".join(checks[0]["ansible.builtin.assert"]["that"]))
    assert [P.parse_version(v) + (0,) * (3 - len(P.parse_version(v))) for v in stated] == \
        [P.tool_version("docker_gpus"), P.tool_version("docker_cdi")]


@pytest.mark.parametrize("key", sorted(P.TOOL_VERSIONS))
def test_tool_versions_carry_a_source(key):
    entry = P.TOOL_VERSIONS[key]
    assert entry["tool"] in ("docker", "nvidia-container-toolkit") and entry["source"] and entry["what"]
    assert entry["confidence"] in ("verified", "third_party", "inferred")
    assert len(P.tool_version(key)) == 3
