# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the shipped compatibility policy (_policy.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os
import re

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
REFERENCE = os.path.join(os.path.dirname(REPO), "shared", "reference")
MATRIX = os.path.join(REFERENCE, "compat_matrix.yaml")
FACTS = os.path.join(REFERENCE, "facts.md")


# --- the data carries its provenance ----------------------------------------------------------

def _entries():
    for section in ("cuda_toolkits", "minor_version_compatibility", "driver_branches", "architectures",
                    "dtypes", "quantization", "vllm_min_compute_capability", "vllm_releases",
                    "compressed_tensors_schemes", "forward_compat_image_branches", "cuda_min_target_cc",
                    "kv_cache_dtypes_by_release"):
        for key, entry in P.SHIPPED[section].items():
            yield section, key, entry
    yield "torch_without_sm70", "-", P.SHIPPED["torch_without_sm70"]
    yield "memory", "-", P.SHIPPED["memory"]


@pytest.mark.parametrize("section,key,entry", list(_entries()), ids=lambda v: str(v)[:30])
def test_every_entry_has_source_and_confidence(section, key, entry):
    assert entry.get("source"), "%s.%s has no source" % (section, key)
    assert entry.get("confidence") in ("verified", "third_party", "inferred"), (section, key)
    for part in re.split(r";\s*", entry["source"]):
        head = part.split(" ")[0]
        if head.startswith("S-"):
            assert head in P.SOURCES, "unknown source key %s in %s.%s" % (head, section, key)


def test_policy_version_is_a_version():
    assert re.match(r"^\d+\.\d+\.\d+$", P.POLICY_VERSION)
    assert P.SHIPPED["version"] == P.POLICY_VERSION


def test_header_says_private():
    with open(P.__file__) as handle:
        head = handle.read(1200)
    assert "PRIVATE" in head


# --- version parsing ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("550.54.14", (550, 54, 14)),
    ("570.26", (570, 26)),
    ("595.71.05", (595, 71, 5)),
    ("R580", (580,)),
    (" 535.104.05 ", (535, 104, 5)),
])
def test_parse_driver_version(text, expected):
    assert P.parse_driver_version(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "550.x", "550..1", "5.5.5.5.5", None, 550, "550.54.14-1"])
def test_parse_driver_version_rejects(text):
    assert P.parse_driver_version(text) is None


def test_driver_versions_compare_numerically():
    assert P.compare_versions(P.parse_driver_version("550.54.14"), P.parse_driver_version("550.54.15")) < 0
    assert P.compare_versions(P.parse_driver_version("570.26"), P.parse_driver_version("570.124.06")) < 0
    assert P.compare_versions(P.parse_driver_version("595.71.05"), P.parse_driver_version("595.71.5")) == 0
    assert P.compare_versions((550,), (550, 0, 0)) == 0


@pytest.mark.parametrize("value,expected", [
    ("7.0", (7, 0)), (7.0, (7, 0)), (8.6, (8, 6)), ("10.0", (10, 0)), ("12.1", (12, 1)), (9, (9, 0)),
    ((7, 5), (7, 5)), ("7", (7, 0)),
])
def test_parse_cc(value, expected):
    assert P.parse_cc(value) == expected


@pytest.mark.parametrize("value", ["seven", "7.05", "", None, True, float("nan"), -1, "sm_70", [7], {}])
def test_parse_cc_rejects(value):
    assert P.parse_cc(value) is None


# --- NVIDIA_REQUIRE_CUDA -------------------------------------------------------------------------

def _image_string(cuda, branches, brands=("unknown", "grid", "tesla", "nvidia", "quadro")):
    parts = ["cuda>=%s" % cuda]
    for branch in branches:
        for brand in brands:
            parts.append("brand=%s,driver>=%d,driver<%d" % (brand, branch, branch + 1))
    return " ".join(parts)


def test_require_cuda_space_is_or_comma_is_and():
    alts = P.parse_require_cuda("cuda>=12.4 brand=tesla,driver>=470,driver<471")
    assert alts == [[("cuda", ">=", "12.4")],
                    [("brand", "=", "tesla"), ("driver", ">=", "470"), ("driver", "<", "471")]]
    # native: the driver's CUDA level satisfies the first alternative
    ok, matched = P.evaluate_require_cuda(alts, cuda=(12, 4), driver=(550, 54, 14), brand="geforce")
    assert ok is True and matched == [alts[0]]
    # forward compatibility: an R470 Tesla passes through the brand/driver clause
    ok, matched = P.evaluate_require_cuda(alts, cuda=(11, 4), driver=(470, 82, 1), brand="tesla")
    assert ok is True and matched == [alts[1]]
    # every comma-joined constraint must hold
    assert P.evaluate_require_cuda(alts, cuda=(11, 4), driver=(470, 82, 1), brand="geforce")[0] is False


def test_require_cuda_12_8_admits_tesla_r550_but_not_geforce():
    alts = P.parse_require_cuda(_image_string("12.8", P.FORWARD_COMPAT_IMAGE_BRANCHES["12.8"]["branches"]))
    assert P.evaluate_require_cuda(alts, cuda=(12, 4), driver=(550, 54, 14), brand="tesla")[0] is True
    assert P.evaluate_require_cuda(alts, cuda=(12, 4), driver=(550, 54, 14), brand="geforce")[0] is False
    assert P.evaluate_require_cuda(alts, cuda=(12, 8), driver=(570, 26), brand="geforce")[0] is True


def test_require_cuda_unknown_brand_is_undecided():
    alts = P.parse_require_cuda(_image_string("12.8", [550]))
    assert P.evaluate_require_cuda(alts, cuda=(12, 4), driver=(550, 54, 14), brand=None)[0] is None


def test_require_cuda_lower_bound():
    alts = P.parse_require_cuda("cuda>=12.4")
    assert P.evaluate_require_cuda(alts, cuda=(13, 2), cuda_is_lower_bound=True)[0] is True
    assert P.evaluate_require_cuda(alts, cuda=(12, 2), cuda_is_lower_bound=True)[0] is None


def test_require_cuda_arch_and_ops():
    alts = P.parse_require_cuda("arch>=7.5,driver!=550.54.14")
    assert P.evaluate_require_cuda(alts, driver=(550, 54, 15), arch=(8, 0))[0] is True
    assert P.evaluate_require_cuda(alts, driver=(550, 54, 14), arch=(8, 0))[0] is False
    assert P.evaluate_require_cuda(alts, driver=(550, 54, 15), arch=(7, 0))[0] is False


@pytest.mark.parametrize("text", ["cuda>>12", "gpu>=1", "cuda>=abc", "brand>=tesla", "arch=x", 12])
def test_require_cuda_rejects(text):
    with pytest.raises(P.PolicyError):
        P.parse_require_cuda(text)


# --- lookups -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cc,arch", [
    ((3, 7), "kepler"), ((5, 2), "maxwell"), ((6, 0), "pascal"), ((6, 1), "pascal"), ((7, 0), "volta"),
    ((7, 5), "turing"), ((8, 0), "ampere"), ((8, 6), "ampere"), ((8, 9), "ada"), ((9, 0), "hopper"),
    ((10, 0), "blackwell"), ((12, 0), "blackwell"), ((2, 0), None),
])
def test_arch_for_cc(cc, arch):
    assert P.arch_for_cc(P.merge_policy(), cc) == arch


def test_driver_branches_per_architecture():
    policy = P.merge_policy()
    archs = policy["architectures"]
    assert archs["volta"]["max_driver_branch"] == 580
    assert archs["pascal"]["max_driver_branch"] == 580
    assert archs["maxwell"]["max_driver_branch"] == 580
    assert archs["kepler"]["max_driver_branch"] == 470
    assert archs["volta"]["kernel_module"] == "proprietary"
    assert archs["ampere"]["max_driver_branch"] is None


@pytest.mark.parametrize("method,version,expected", [
    ("awq", (0, 8, 5), (7, 5)), ("awq", (0, 19, 1), (7, 5)),
    ("gptq", (0, 8, 5), (6, 0)), ("gptq_marlin", (0, 8, 5), (8, 0)), ("gptq_marlin", (0, 19, 1), (7, 5)),
    ("gptq_marlin", (0, 10, 2), (7, 5)), ("gptq_marlin", (0, 6, 3), (8, 0)), ("gptq_marlin", None, (7, 5)),
    ("gptq_marlin", (0, 33, 0), (7, 5)), ("modelopt_fp4", (0, 8, 5), (10, 0)),
    ("modelopt_fp4", (0, 19, 1), (7, 5)), ("bitsandbytes", (0, 8, 5), (7, 0)), ("modelopt", None, (8, 9)),
])
def test_quantization_min_cc_per_version(method, version, expected):
    policy = P.merge_policy()
    assert P.value_for_version(policy["quantization"][method]["min_cc"], version) == expected


def test_quantization_aliases():
    policy = P.merge_policy()
    assert P.resolve_quant(policy, "nvfp4")[0] == "modelopt_fp4"
    assert P.resolve_quant(policy, "compressed-tensors")[0] == "compressed_tensors"
    assert P.resolve_quant(policy, "None") == (None, None)
    assert P.resolve_quant(policy, "petit_nvfp4") == ("petit_nvfp4", None)


@pytest.mark.parametrize("version,expected", [
    ((0, 8, 5), (7, 0)), ((0, 19, 1), (7, 0)), ((0, 20, 0), (7, 5)), ((0, 33, 0), (7, 5)), (None, (7, 0)),
])
def test_vllm_min_cc(version, expected):
    assert P.vllm_min_cc(P.merge_policy(), version) == expected


def test_bf16_needs_8_0():
    assert P.DTYPES["bfloat16"]["min_cc"] == "8.0"


@pytest.mark.parametrize("branch,day,eol", [
    (550, datetime.date(2026, 1, 1), True),
    (580, datetime.date(2026, 9, 1), False),
    (580, datetime.date(2028, 9, 1), True),
    (570, datetime.date(2026, 3, 1), True),
    (570, datetime.date(2025, 12, 1), False),
    (535, datetime.date(2026, 1, 1), False),
    (535, datetime.date(2026, 7, 1), True),
    (520, datetime.date(2026, 1, 1), True),  # older than listed branches, not listed
    (610, datetime.date(2026, 1, 1), False),  # newer than anything known
])
def test_driver_branch_eol(branch, day, eol):
    assert P.driver_branch_eol(P.merge_policy(), branch, day)[0] is eol


def test_max_cuda_for_branch():
    policy = P.merge_policy()
    assert P.max_cuda_for_branch(policy, 550) == ((12, 4), True)
    assert P.max_cuda_for_branch(policy, 580) == ((13, 0), True)
    assert P.max_cuda_for_branch(policy, 620) == ((13, 2), False)
    assert P.max_cuda_for_branch(policy, 400) == (None, False)


# --- overrides ---------------------------------------------------------------------------------

def test_merge_policy_defaults():
    policy = P.merge_policy()
    assert policy["settings"]["auto_fix"] is True
    assert policy["settings"]["reserve_mib"] is P.ACTIVATION_RESERVE_MIB is None  # modelled (_vllm_memory)
    # the shipped data is not mutated by merging
    P.merge_policy({"quantization": {"awq": {"min_cc": {"0.8.5": "7.0"}}}})
    assert P.QUANTIZATION["awq"]["min_cc"]["0.8.5"] == "7.5"


def test_merge_policy_deep_merges_and_marks_user_entries():
    policy = P.merge_policy({
        "auto_fix": "false",
        "allowed_driver_branches": ["R580", 550],
        "quantization": {"awq": {"min_cc": {"0.8.5": "7.0"}},
                         "my_quant": {"min_cc": {"0.1.0": "7.0"}, "bytes_per_param": 0.5}},
        "driver_branches": {"R600": {"max_cuda_native": "13.4"}},
    })
    assert policy["settings"]["auto_fix"] is False
    assert policy["settings"]["allowed_driver_branches"] == [580, 550]
    assert policy["quantization"]["awq"]["min_cc"] == {"0.8.5": "7.0", "0.19.1": "7.5"}
    assert policy["quantization"]["awq"]["source"] == "user"
    assert policy["quantization"]["my_quant"]["source"] == "user"
    assert policy["driver_branches"]["600"]["max_cuda_native"] == "13.4"
    assert policy["driver_branches"]["580"]["max_cuda_native"] == "13.0"


@pytest.mark.parametrize("overrides,fragment", [
    ("strict", "policy: expected a mapping"),
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"auto_fix": "maybe"}, "policy.auto_fix"),
    ({"reserve_mib": -5}, "policy.reserve_mib"),
    ({"reserve_mib": "lots"}, "policy.reserve_mib"),
    ({"min_compute_capability": "seven"}, "policy.min_compute_capability"),
    ({"allowed_driver_branches": "580"}, "policy.allowed_driver_branches"),
    ({"allowed_driver_branches": ["x"]}, "policy.allowed_driver_branches[0]"),
    ({"ignore_codes": [1]}, "policy.ignore_codes"),
    ({"quantization": []}, "policy.quantization"),
    ({"quantization": {"awq": {"min_cc": {"0.8.5": "high"}}}}, "policy.quantization.awq.min_cc.0.8.5"),
    ({"quantization": {"x": {"min_cc": {}}}}, "policy.quantization.x"),
    ({"quantization": {"x": {"min_cc": {"0.1": "7.0"}, "bytes_per_param": -1}}}, "bytes_per_param"),
    ({"driver_branches": {"abc": {}}}, "policy.driver_branches.abc"),
    ({"driver_branches": {"600": {"eol": "soon"}}}, "policy.driver_branches.600.eol"),
    ({"architectures": {"volta": {"max_driver_branch": "x"}}}, "policy.architectures.volta.max_driver_branch"),
    ({"architectures": {"volta": {"kernel_module": "closed"}}}, "kernel_module"),
    ({"dtypes": {"bfloat16": {"min_cc": "x"}}}, "policy.dtypes.bfloat16.min_cc"),
    ({"cuda_toolkits": {"12.10.0": {"min_linux_driver": "abc", "mvc_floor": "525"}}}, "min_linux_driver"),
    ({"vllm_min_compute_capability": {"0.30.0": {"min_cc": "eight"}}}, "vllm_min_compute_capability"),
])
def test_merge_policy_rejects(overrides, fragment):
    with pytest.raises(P.PolicyError) as info:
        P.merge_policy(overrides)
    assert fragment in str(info.value)


# --- checked against the reference material ----------------------------------------------------

def _load_matrix():
    if not os.path.exists(MATRIX):
        pytest.skip("../shared/reference/compat_matrix.yaml is not beside this checkout")
    yaml = pytest.importorskip("yaml")
    with open(MATRIX) as handle:
        return yaml.safe_load(handle)


def _toolkit_key(label):
    match = re.match(r"^(\d+)\.(\d+) (GA|U(\d+))$", label)
    assert match, label
    return "%s.%s.%s" % (match.group(1), match.group(2), match.group(4) or "0")


def test_matches_compat_matrix_cuda_toolkits():
    matrix = _load_matrix()
    for row in matrix["cuda_toolkits"]:
        entry = P.CUDA_TOOLKITS[_toolkit_key(row["cuda"])]
        assert entry["label"] == row["cuda"]
        assert entry["min_linux_driver"] == row["min_linux_driver"], row
        assert entry["mvc_floor"] == row["mvc_floor"], row
        assert entry["confidence"] == row["confidence"], row
        assert entry["source"] == row["source"], row


def test_matches_compat_matrix_mvc_and_forward_compat():
    matrix = _load_matrix()
    for row in matrix["minor_version_compatibility"]:
        if "cuda_major" in row:
            assert P.MINOR_VERSION_COMPATIBILITY[str(row["cuda_major"])]["driver_min"] == row["driver_min"]
    for row in matrix["forward_compatibility"]["container_gate_examples"]:
        entry = P.FORWARD_COMPAT_IMAGE_BRANCHES[row["image_cuda"]]
        assert entry["branches"] == row["allowed_branches_without_native_support"]


def test_matches_compat_matrix_driver_branches():
    matrix = _load_matrix()
    policy = P.merge_policy()
    for row in matrix["driver_branches"]:
        number = int(row["branch"].lstrip("R"))
        entry = P.DRIVER_BRANCHES[str(number)]
        assert entry["max_cuda_native"] == row["max_cuda_native"], row
        volta_cap = policy["architectures"]["volta"]["max_driver_branch"]
        if row.get("supports_volta") is False:
            assert number > volta_cap
        if row.get("supports_volta") is True:
            assert number <= volta_cap
        for arch_text in row.get("last_branch_for", []) or []:
            arch = arch_text.split()[0].lower()
            assert policy["architectures"][arch]["max_driver_branch"] == number, row
        designation = row.get("designation", "")
        match = re.search(r"EOL (\w+) (\d{4})", designation)
        if match:
            month = datetime.datetime.strptime(match.group(1)[:3], "%b").month
            assert entry["eol"] == "%s-%02d" % (match.group(2), month), row
        if "end of life" in designation:
            assert entry["eol"] is True


def test_matches_compat_matrix_architectures_and_dtypes():
    matrix = _load_matrix()
    policy = P.merge_policy()
    for row in matrix["last_cuda_and_driver_per_arch"]:
        arch = row["arch"].lower()
        for cc in row["cc"]:
            assert P.arch_for_cc(policy, P.parse_cc(cc)) == arch, row
        last = row["last_driver_branch"]
        if isinstance(last, str) and last.startswith("R"):
            assert policy["architectures"][arch]["max_driver_branch"] == int(last[1:]), row
        if last == "ongoing":
            assert policy["architectures"][arch]["max_driver_branch"] is None
    dtypes = dict((row["dtype"], row) for row in matrix["dtype_support"])
    assert dtypes["bf16"]["min_cc"] == P.DTYPES["bfloat16"]["min_cc"]
    assert dtypes["fp16"]["min_cc"].startswith(P.DTYPES["float16"]["min_cc"])


def test_matches_compat_matrix_cuda_targets():
    matrix = _load_matrix()
    for row in matrix["compute_capability_by_cuda"]:
        major = row["cuda"].split(".")[0]
        if row["cuda"] == "11.8" or row["cuda"].startswith(("12.0", "13.0")):
            assert P.CUDA_MIN_TARGET_CC[major]["min_cc"] == row["min_cc"], row


def test_matches_compat_matrix_vllm_images():
    matrix = _load_matrix()
    for row in matrix["vllm_images"]:
        version = str(row["vllm"])
        if version in P.VLLM_RELEASES:
            entry = P.VLLM_RELEASES[version]
            assert entry["cuda_base"] == row["cuda_base"], row
            if "vllm_arch" in row:
                # The matrix records the Dockerfile default; where the release build passes another
                # list (0.20.0: CUDA_ARCH_X86 without 11.0) the policy keeps the default apart.
                assert entry.get("vllm_arch_dockerfile", entry["vllm_arch"]) == row["vllm_arch"], row
            if "entrypoint" in row and row["entrypoint"].startswith("python3"):
                assert " ".join(entry["entrypoint"]) == row["entrypoint"], row
        parsed = P.parse_version(version.split("-", 1)[0])
        min_cc = P.vllm_min_cc(P.merge_policy(), parsed)
        if row.get("v100_ok") is False:
            assert min_cc > (7, 0) or "7.0" not in row.get("vllm_arch", "7.0"), row
        if row.get("v100_ok") is True:
            assert min_cc == (7, 0), row
    torch_cu128 = [r for r in matrix["pytorch_wheels_arch"] if r["torch"] == "2.7 cu128"][0]
    assert P.TORCH_WITHOUT_SM70["torch_arch"] == torch_cu128["arch"]


def test_matches_facts_quantization_table():
    if not os.path.exists(FACTS):
        pytest.skip("../shared/reference/facts.md is not beside this checkout")
    with open(FACTS) as handle:
        text = handle.read()
    section = text.split("### 3.7", 1)[1].split("\n---", 1)[0]
    checked = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0] or "CT " in cells[0] or "(config)" in cells[0]:
            continue
        names = re.findall(r"`([a-z0-9_]+)`", cells[0])
        values = [c.replace("*", "").strip() for c in cells[1:3]]
        if not names or not all(re.match(r"^\d+$", v) for v in values):
            continue
        for name in names:
            entry = P.resolve_quant(P.merge_policy(), name)[1]
            assert entry is not None, name
            expected = ["%d.%d" % (int(v) // 10, int(v) % 10) for v in values]
            assert entry["min_cc"]["0.8.5"] == expected[0], name
            assert entry["min_cc"]["0.19.1"] == expected[1], name
            checked += 1
    assert checked >= 12
