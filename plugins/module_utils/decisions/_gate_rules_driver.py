# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""Gate rules about the driver and the image's CUDA: the driver branch against the GPUs'
architectures and the policy (:func:`rule_driver`, which also decides the driver requirements and
the driver's CUDA level), the image's CUDA against the driver (NVIDIA_REQUIRE_CUDA as the
container runtime reads it, and the minor-version-compatibility floor: :func:`rule_image_cuda`),
and the image's kernels for the GPUs (:func:`rule_image_arch`). Each rule is
``rule_x(facts) -> Findings`` (_gate_facts); _gate_rules.RULES lists them with codes and sources.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import (
    behaviour_value,
    clip,
    finding,
    findings,
    fmt_version,
    gpu_label,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import parse_arch_entry
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    arch_for_cc,
    arch_reach,
    compare_versions,
    driver_branch_eol,
    evaluate_require_cuda,
    format_cc,
    format_require_alternative,
    forward_compat_support,
    is_ascii_digits,
    max_cuda_for_branch,
    parse_cc,
    parse_driver_version,
    parse_version,
    toolkit_entry,
)


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


def driver_requirements(policy, arch_keys, today):
    """What the nvidia_driver role must install for these architectures: {architectures,
    min_branch, max_branch, kernel_module (proprietary, open, either, conflict or None),
    recommended_branch (the newest allowed branch within the limits that is not end of life)}."""
    archs = [policy["architectures"][k] for k in arch_keys if k in policy["architectures"]]
    maxes = [a["max_driver_branch"] for a in archs if a.get("max_driver_branch")]
    mins = [a["min_driver_branch"] for a in archs if a.get("min_driver_branch")]
    modules = set(a.get("kernel_module", "either") for a in archs)
    max_branch = min(maxes) if maxes else None
    min_branch = max(mins) if mins else None
    if "proprietary" in modules and "open" in modules:
        module = "conflict"
    elif "proprietary" in modules:
        module = "proprietary"
    elif "open" in modules:
        module = "open"
    else:
        module = "either" if archs else None
    recommended = None
    allowed = policy["settings"].get("allowed_driver_branches")
    for key in sorted((int(k) for k in policy["driver_branches"] if is_ascii_digits(str(k))), reverse=True):
        if max_branch is not None and key > max_branch:
            continue
        if min_branch is not None and key < min_branch:
            continue
        if allowed and key not in allowed:
            continue
        if driver_branch_eol(policy, key, today)[0]:
            continue
        recommended = key
        break
    return {
        "architectures": [policy["architectures"][k].get("label", k) for k in arch_keys
                          if k in policy["architectures"]],
        "min_branch": min_branch,
        "max_branch": max_branch,
        "kernel_module": module,
        "recommended_branch": recommended,
    }


def _driver_unknown(requirements):
    """DRIVER_UNKNOWN, with what these GPUs need when the requirements say."""
    advice = ""
    if requirements["max_branch"] or requirements["kernel_module"] not in (None, "either"):
        parts = []
        if requirements["max_branch"]:
            parts.append("a branch no newer than R%d" % requirements["max_branch"])
        if requirements["kernel_module"] in ("proprietary", "open"):
            parts.append("the %s kernel module" % requirements["kernel_module"])
        advice = "; these GPUs need %s" % " with ".join(parts)
    return finding("DRIVER_UNKNOWN", "no driver version is known (driver not installed or not loaded): "
                                     "driver checks were skipped; install the driver and run the preflight "
                                     "again%s" % advice)


def _branch_for_arch(facts, key, branch, text):
    """DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH for architecture ``key`` (policy max/min_driver_branch), or None."""
    policy = facts.policy
    arch = policy["architectures"][key]
    label = arch.get("label", key)
    names = ", ".join(gpu_label(g) for g in facts.distinct if arch_for_cc(policy, g["cc"]) == key)
    top = arch.get("max_driver_branch")
    bottom = arch.get("min_driver_branch")
    if top and branch > top:
        fix = "install an R%d driver" % top
        if str(top) in policy["driver_branches"]:
            entry = policy["driver_branches"][str(top)]
            if entry.get("designation") or entry.get("eol"):
                extra = [entry.get("designation")] if entry.get("designation") else []
                if isinstance(entry.get("eol"), str):
                    extra.append("EOL %s" % entry["eol"])
                fix += " (%s)" % ", ".join(extra)
        return finding("DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH",
                       "driver %s (R%d) does not drive %s GPUs (%s): R%d is the last branch for %s; %s "
                       "with the %s kernel module" % (text, branch, label, names, top, label, fix,
                                                      arch.get("kernel_module", "matching")))
    if bottom and branch < bottom:
        return finding("DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH",
                       "driver %s (R%d) predates %s GPUs (%s): install R%d or newer"
                       % (text, branch, label, names, bottom))
    return None


def _branch_eol(facts, branch, requirements):
    """DRIVER_BRANCH_EOL with the branch to move to, or None."""
    eol, when = driver_branch_eol(facts.policy, branch, facts.today)
    if not eol:
        return None
    advice = ""
    if requirements["recommended_branch"]:
        rec = facts.policy["driver_branches"].get(str(requirements["recommended_branch"]), {})
        detail = [rec.get("designation")] if rec.get("designation") else []
        if isinstance(rec.get("eol"), str):
            detail.append("EOL %s" % rec["eol"])
        advice = "; move to R%d%s" % (requirements["recommended_branch"],
                                      " (%s)" % ", ".join(detail) if detail else "")
        if requirements["max_branch"] == requirements["recommended_branch"]:
            advice += ", the last branch for these GPUs"
    return finding("DRIVER_BRANCH_EOL", "driver branch R%d is end of life (%s, NVIDIA supported-drivers "
                                        "page): no more security fixes%s" % (branch, when, advice))


def rule_driver(facts):
    """DRIVER_LIBRARY_MISMATCH, DRIVER_UNKNOWN, DRIVER_BRANCH_NOT_ALLOWED,
    DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH, DRIVER_BRANCH_EOL. Decides ``driver_requirements`` and,
    with a driver, ``host_cuda`` (cuda_driver_version as reported: exact; else the branch's
    CUDA level, a lower bound)."""
    requirements = driver_requirements(facts.policy, facts.arch_keys, facts.today)
    reasons = []
    if facts.driver_library_mismatch:
        reasons.append(finding(
            "DRIVER_LIBRARY_MISMATCH",
            "the loaded NVIDIA kernel module and the driver libraries differ (the driver was "
            "upgraded without a reboot; NVML reports 'Driver/library version mismatch'): "
            "reboot the host, then run the preflight again"))
    if facts.driver is None:
        return findings(reasons, [_driver_unknown(requirements)], driver_requirements=requirements)
    branch = facts.driver[0]
    text = facts.driver_text
    host_cuda, exact = facts.cuda_driver, facts.cuda_driver is not None
    if host_cuda is None:
        host_cuda, exact = max_cuda_for_branch(facts.policy, branch)
    allowed = facts.settings.get("allowed_driver_branches")
    if allowed and branch not in allowed:
        reasons.append(finding(
            "DRIVER_BRANCH_NOT_ALLOWED",
            "driver %s (R%d) is not among the branches this policy allows (%s): install one of "
            "them" % (text, branch, ", ".join("R%d" % b for b in allowed))))
    for key in facts.arch_keys:
        found = _branch_for_arch(facts, key, branch, text)
        if found:
            reasons.append(found)
    eol = _branch_eol(facts, branch, requirements)
    return findings(reasons, [eol] if eol else [], driver_requirements=requirements, host_cuda=host_cuda,
                    host_cuda_exact=exact)


# ---------------------------------------------------------------------------------------------
# The image's CUDA on this driver
# ---------------------------------------------------------------------------------------------


def infer_brands(name):
    """Candidate NVIDIA_REQUIRE_CUDA brands for a GPU name; None when it cannot be told."""
    text = (name or "").lower()
    if "tesla" in text:
        return ["tesla"]
    if "quadro rtx" in text:
        return ["quadrortx"]
    if "quadro" in text:
        return ["quadro"]
    if "geforce" in text:
        return ["geforce"]
    if "titan" in text:
        return ["titan"]
    if re.search(r"\brtx\s*(a\d|pro\b|\d{4}\s*ada)", text):
        return ["nvidiartx"]
    if text.startswith("nvidia "):
        return ["nvidia", "tesla"]
    return None


def image_cuda(facts):
    """(CUDA version, where it comes from): image.cuda_version, else the policy's profile of the
    image's vLLM release; (None, None) when neither says."""
    if facts.image["cuda"] is not None:
        return facts.image["cuda"], "image.cuda_version"
    if facts.release and parse_version(facts.release.get("cuda_base")):
        return parse_version(facts.release["cuda_base"]), "the policy's profile of vLLM %s" % facts.release_key
    return None, None


def _branches_with_cuda(policy, cuda):
    """Driver branches (ints, ascending) whose native CUDA is >= cuda."""
    out = []
    for key, entry in policy["driver_branches"].items():
        native = parse_version(entry.get("max_cuda_native"))
        if is_ascii_digits(str(key)) and native is not None and compare_versions(native, cuda) >= 0:
            out.append(int(key))
    return sorted(out)


def _branch_advice(lowest, top):
    """'driver R570 or newer' / 'driver R570 to R580' / 'driver R580' (top: the GPUs' last branch)."""
    if top is None:
        return "driver R%d or newer" % lowest
    if lowest == top:
        return "driver R%d (the last branch for these GPUs)" % top
    return "driver R%d to R%d (R%d is the last branch for these GPUs)" % (lowest, top, top)


def _driver_cap(facts):
    """The last driver branch that drives all the GPUs (None: no limit)."""
    caps = [facts.policy["architectures"][k].get("max_driver_branch") for k in facts.arch_keys]
    caps = [c for c in caps if c]
    return min(caps) if caps else None


def _driver_fix(facts, cuda):
    """'install driver R...' for an image built on ``cuda``, within the GPUs' last branch."""
    branches = _branches_with_cuda(facts.policy, cuda[:2])
    top = _driver_cap(facts)
    if top is not None:
        branches = [b for b in branches if b <= top]
    if branches:
        return "install %s" % _branch_advice(branches[0], top)
    return "use an image built for an older CUDA"


def _cuda_levels(facts):
    """What rule_image_cuda compares: {cuda (the image's), host_label (the driver's CUDA level in
    words), major, floor (the driver the major's minor-version compatibility needs)}."""
    cuda = image_cuda(facts)[0]
    host_cuda = facts.host_cuda
    host_label = "CUDA %s" % fmt_version(host_cuda[:2]) if host_cuda else "unknown CUDA level"
    if not facts.host_cuda_exact and host_cuda:
        host_label = "CUDA %s or newer" % fmt_version(host_cuda[:2])
    major = str(cuda[0]) if cuda else None
    mvc = facts.policy["minor_version_compatibility"].get(major) if major else None
    floor = parse_driver_version(str(mvc["driver_min"])) if mvc else None
    return {"cuda": cuda, "host_label": host_label, "major": major, "floor": floor}


def _require_cuda_results(facts, alternatives):
    """[(result, matched alternatives, brand, gpu)] of NVIDIA_REQUIRE_CUDA per distinct GPU and brand."""
    results = []
    for gpu in facts.distinct or [None]:
        if gpu is None:
            brands = [None]
        elif gpu["brand"]:
            brands = [gpu["brand"]]
        else:
            brands = infer_brands(gpu["name"]) or [None]
        for brand in brands:
            result, matched = evaluate_require_cuda(
                alternatives, cuda=facts.host_cuda, driver=facts.driver, brand=brand,
                arch=gpu["cc"] if gpu else None, cuda_is_lower_bound=not facts.host_cuda_exact)
            results.append((result, matched, brand, gpu))
    return results


def _compat_switch(facts):
    """How the image's release brings its cuda-compat libraries in (policy release_behaviour
    forward_compat), in words."""
    compat = behaviour_value(facts, "forward_compat") if facts.version is not None else {}
    if compat.get("compat_libs") == "opt_in":
        return ("%s's image loads them only with -e %s=1 in the container's environment"
                % (facts.vllm_label, compat.get("env") or "VLLM_ENABLE_CUDA_COMPATIBILITY"))
    if compat.get("compat_libs") == "build":
        return "%s's image wires them in when it is built, nothing to set" % facts.vllm_label
    return ("images before vLLM 0.17 wire them in when built; from 0.17 they need -e "
            "VLLM_ENABLE_CUDA_COMPATIBILITY=1")


def _forward_compat(facts, levels, results):
    """The image runs only through its cuda-compat libraries (the driver is below the major's
    floor): (reason, warning). By the GPUs' brands (policy forward_compat_support, NVIDIA's list):
    a consumer GPU (GeForce, TITAN) cannot use them, so DRIVER_TOO_OLD_FOR_IMAGE; a data-center GPU,
    or a professional one (only select SKUs), FORWARD_COMPAT_REQUIRED."""
    major, floor = levels["major"], levels["floor"]
    clause = format_require_alternative(results[0][1][0])
    table = facts.policy.get("forward_compat_support")
    kinds = [(forward_compat_support(brand, table), brand, gpu) for _result, _matched, brand, gpu in results]
    consumer = [(brand, gpu) for kind, brand, gpu in kinds if kind == "consumer"]
    head = ("the container runtime admits this image on driver %s (%s) only through the clause '%s' of "
            "NVIDIA_REQUIRE_CUDA, and the driver is below CUDA %s's minor-version-compatibility floor (%s)"
            % (facts.driver_text, levels["host_label"], clause, major or "?", fmt_version(floor) if floor else "?"))
    if consumer:
        brand, gpu = consumer[0]
        return finding(
            "DRIVER_TOO_OLD_FOR_IMAGE",
            "%s, so only the image's cuda-compat libraries could run it; forward compatibility works only on "
            "NVIDIA data-center GPUs, select NGC Server Ready RTX SKUs and Jetson boards (NVIDIA CUDA Compatibility "
            "guide, 'Forward Compatibility'), not on %s (brand %s): CUDA fails at startup with error 804 "
            "'forward compatibility was attempted on non supported HW': %s"
            % (head, gpu_label(gpu) if gpu else "this GPU", brand,
               _driver_fix(facts, levels["cuda"]) if levels["cuda"] else "install a newer driver")), None
    select = [(brand, gpu) for kind, brand, gpu in kinds if kind == "select"]
    caveat = ""
    if select:
        brand, gpu = select[0]
        caveat = ("; %s (brand %s) is a professional card, where it works only on the select NGC Server Ready "
                  "SKUs: check that this one is" % (gpu_label(gpu) if gpu else "this GPU", brand))
    return None, finding(
        "FORWARD_COMPAT_REQUIRED",
        "%s: the image runs only with its cuda-compat libraries, which work on data-center GPUs only (%s)%s; a "
        "driver of %s or newer avoids this"
        % (head, _compat_switch(facts), caveat, fmt_version(floor) if floor else "a newer branch"))


def _admitted(facts, levels, results):
    """The runtime admits the image: (reason, warning, native_ok, forward_compat, mvc_warned).
    Through a brand clause only, the driver's place against the major's floor decides: at or
    above it, minor-version compatibility (CUDA_MINOR_VERSION_COMPAT); below, the image's
    cuda-compat libraries (_forward_compat: FORWARD_COMPAT_REQUIRED, or a refusal on a GPU they
    do not work on)."""
    cuda, major, floor = levels["cuda"], levels["major"], levels["floor"]
    native = all(any(all(c[0] in ("cuda", "arch") for c in alt) for alt in r[1]) for r in results)
    if native:
        return None, None, True, False, False
    clause = format_require_alternative(results[0][1][0])
    if floor is not None and compare_versions(facts.driver, floor) >= 0:
        # The brand clause lets the runtime admit it; the CUDA runtime then runs through
        # minor-version compatibility (the driver is at or above the major's floor): no
        # cuda-compat libraries are involved (S-MVC).
        warning = None
        if facts.host_cuda_exact or facts.host_cuda is None:
            warning = finding(
                "CUDA_MINOR_VERSION_COMPAT",
                "the container runtime admits this image on driver %s (%s) through the clause '%s' "
                "of NVIDIA_REQUIRE_CUDA, and the image's CUDA %s then runs through minor-version "
                "compatibility (CUDA %s needs driver %s or newer): it works without the image's "
                "cuda-compat libraries (leave VLLM_ENABLE_CUDA_COMPATIBILITY unset), but PTX newer "
                "than the driver cannot be JIT-compiled; a driver with CUDA %s or newer lifts that"
                % (facts.driver_text, levels["host_label"], clause, fmt_version(cuda) if cuda else "?", major,
                   fmt_version(floor), fmt_version(cuda[:2]) if cuda else "?"))
        return None, warning, True, False, True
    reason, warning = _forward_compat(facts, levels, results)
    return reason, warning, False, reason is None, False


def _refused(facts, levels, results, alternatives):
    """DRIVER_TOO_OLD_FOR_IMAGE: NVIDIA_REQUIRE_CUDA rejects the driver (as the runtime reads it)."""
    failing = [r for r in results if r[0] is False][0]
    host_label, floor = levels["host_label"], levels["floor"]
    wanted = None
    for alt in alternatives:
        for key, op, value in alt:
            if key == "cuda" and op in (">=", ">"):
                wanted = parse_version(value)
    fix = "use an image built for %s or older" % host_label.replace(" or newer", "")
    if wanted:
        branches = _branches_with_cuda(facts.policy, wanted)
        top = _driver_cap(facts)
        if top is not None:
            branches = [b for b in branches if b <= top]
        if branches:
            fix = "install %s, or %s" % (_branch_advice(branches[0], top), fix)
        elif top is not None:
            fix = "no driver that drives these GPUs reaches CUDA %s: %s" % (fmt_version(wanted), fix)
    mode_why = facts.runtime_mode_why
    if facts.require_cuda_enforced:
        who = "the container runtime will refuse to start it (%s)" % (
            mode_why or "its legacy hook checks NVIDIA_REQUIRE_CUDA")
    else:
        who = ("the container runtime refuses to start it in legacy mode, which checks "
               "NVIDIA_REQUIRE_CUDA (the default with docker --gpus; this host's mode is unknown%s)"
               % (": " + mode_why if mode_why else ""))
    if levels["cuda"] is not None and floor is not None and compare_versions(facts.driver, floor) >= 0:
        fix += ("; or let the image run through minor-version compatibility (driver %s is at or above "
                "CUDA %s's floor %s): run the runtime in CDI mode or set NVIDIA_DISABLE_REQUIRE=true in "
                "the container's environment, which skip this check"
                % (facts.driver_text, levels["major"], fmt_version(floor)))
    return finding("DRIVER_TOO_OLD_FOR_IMAGE",
                   "the image requires NVIDIA_REQUIRE_CUDA='%s' and driver %s (%s%s) matches none of "
                   "its alternatives, so %s: %s"
                   % (clip(facts.image["require_text"]), facts.driver_text, host_label,
                      ", brand %s" % failing[2] if failing[2] else "", who, fix))


def _below_floor(facts, levels, native_ok, mvc_warned):
    """The image's CUDA against the driver when NVIDIA_REQUIRE_CUDA did not settle it: below the
    major's minor-version-compatibility floor (or, without a floor, below the image's CUDA):
    DRIVER_TOO_OLD_FOR_IMAGE; above the floor but older: CUDA_MINOR_VERSION_COMPAT. (reason, warning)."""
    cuda, floor, host_cuda = levels["cuda"], levels["floor"], facts.host_cuda
    text = facts.driver_text
    if floor is not None and compare_versions(facts.driver, floor) < 0 and native_ok is not True:
        unchecked = ""
        if facts.require_cuda_enforced is False and facts.image["require"]:
            unchecked = (" (NVIDIA_REQUIRE_CUDA is not checked here: %s; the CUDA runtime in the image then "
                         "fails with 'CUDA driver version is insufficient for CUDA runtime version')"
                         % (facts.runtime_mode_why or "the runtime does not read it"))
        return finding("DRIVER_TOO_OLD_FOR_IMAGE",
                       "the image's CUDA %s needs driver %s or newer (CUDA %s minor-version-compatibility "
                       "floor) and the host has %s%s: %s; on data-center GPUs the image's cuda-compat libraries "
                       "are the other way (vLLM >= 0.17 images: -e VLLM_ENABLE_CUDA_COMPATIBILITY=1)"
                       % (fmt_version(cuda), fmt_version(floor), levels["major"], text, unchecked,
                          _driver_fix(facts, cuda))), None
    if floor is None and host_cuda is not None and compare_versions(host_cuda[:2], cuda[:2]) < 0 \
            and native_ok is not True:
        entry = toolkit_entry(facts.policy, cuda)
        need = " (the toolkit ships with driver %s)" % entry["min_linux_driver"] if entry else ""
        return finding("DRIVER_TOO_OLD_FOR_IMAGE",
                       "the image's CUDA %s is newer than driver %s (%s)%s: %s"
                       % (fmt_version(cuda), text, levels["host_label"], need, _driver_fix(facts, cuda))), None
    if host_cuda is not None and compare_versions(host_cuda[:2], cuda[:2]) < 0:
        if not facts.host_cuda_exact or mvc_warned:
            return None, None
        return None, finding(
            "CUDA_MINOR_VERSION_COMPAT",
            "the image's CUDA %s is newer than driver %s (CUDA %s): it runs through minor "
            "version compatibility, which cannot JIT-compile PTX from the newer toolkit; a "
            "driver with CUDA %s or newer removes the limit"
            % (fmt_version(cuda), text, fmt_version(host_cuda[:2]), fmt_version(cuda[:2])))
    return None, None


def rule_image_cuda(facts):
    """DRIVER_TOO_OLD_FOR_IMAGE, CUDA_MINOR_VERSION_COMPAT, FORWARD_COMPAT_REQUIRED,
    REQUIRE_CUDA_UNDECIDED: the image's CUDA on the driver (after rule_driver: reads host_cuda).
    Forward compatibility only where NVIDIA supports it (policy forward_compat_support, by brand:
    a GeForce admitted through a brand clause is refused), with the release's cuda-compat switch.
    NVIDIA_REQUIRE_CUDA counts only where the runtime reads it (require_cuda_enforced not False).
    Decides ``forward_compat`` (the image runs only through its cuda-compat libraries)."""
    if facts.driver is None:
        return findings()
    levels = _cuda_levels(facts)
    alternatives = facts.image["require"]
    if alternatives and facts.require_cuda_enforced is False:
        # CDI / jit-cdi mode, or NVIDIA_DISABLE_REQUIRE: nothing reads NVIDIA_REQUIRE_CUDA; the
        # CUDA runtime in the image decides (minor-version compatibility, below).
        alternatives = None
    warnings = []
    native_ok, forward_compat, mvc_warned = None, False, False
    if alternatives:
        results = _require_cuda_results(facts, alternatives)
        values = set(r[0] for r in results)
        if values == set([True]):
            reason, warning, native_ok, forward_compat, mvc_warned = _admitted(facts, levels, results)
            if reason:
                return findings([reason])
            warnings.extend([warning] if warning else [])
        elif False in values:
            return findings([_refused(facts, levels, results, alternatives)])
        else:
            warnings.append(finding(
                "REQUIRE_CUDA_UNDECIDED",
                "cannot decide whether driver %s (%s) satisfies NVIDIA_REQUIRE_CUDA='%s' (GPU brand "
                "or the driver's CUDA level unknown): set brand on the gpus entries or pass "
                "cuda_driver_version" % (facts.driver_text, levels["host_label"], clip(facts.image["require_text"]))))
    if levels["cuda"] is None or forward_compat:
        return findings(warnings=warnings, forward_compat=forward_compat)
    reason, warning = _below_floor(facts, levels, native_ok, mvc_warned)
    return findings([reason] if reason else [], warnings + ([warning] if warning else []),
                    forward_compat=forward_compat)


# ---------------------------------------------------------------------------------------------
# The image's kernels for the GPUs
# ---------------------------------------------------------------------------------------------


def arch_support(entries, cc):
    """'sass', 'ptx' or None: how the image's arch entries reach compute capability cc
    (_policy.arch_reach, the one coverage rule)."""
    return arch_reach([(arch[0], arch[1], "a" if exact else "", kind == "sass", kind == "ptx")
                       for arch, kind, exact in entries], cc)


def in_range(version, low, high):
    """low <= version <= high."""
    return compare_versions(version, low) >= 0 and compare_versions(version, high) <= 0


def _arch_entries(facts):
    """(entries, origin, listed): the image's arch entries (image.arch_list, else the policy's
    profile of its vLLM release; None when neither says), where they come from, and as written."""
    if facts.image["arch"] is None and facts.release and facts.release.get("vllm_arch"):
        entries = []
        for index, text in enumerate(facts.release["vllm_arch"].split()):
            entries.extend(parse_arch_entry(text, "policy vllm_releases.%s.vllm_arch[%d]" % (facts.release_key, index)))
        return entries, "the policy's profile of vLLM %s" % facts.release_key, facts.release["vllm_arch"]
    listed = " ".join(facts.image["arch_list_text"]) if facts.image["arch_list_text"] else None
    return facts.image["arch"], "image.arch_list", listed


def _listed_arch(facts, gpu, entries, origin, listed):
    """IMAGE_LACKS_ARCH, PTX_NEWER_THAN_DRIVER or PTX_JIT_ONLY for one GPU against the arch
    entries: (reason, warning)."""
    cc = gpu["cc"]
    support = arch_support(entries, cc)
    if support is None:
        example = ""
        if cc == (7, 0):
            example = " (for 7.0: vllm/vllm-openai v0.8.5 on CUDA 12.4, or v0.10.2 to v0.19.1)"
        return finding("IMAGE_LACKS_ARCH",
                       "the image has no kernels for %s (arch list from %s: %s), so it fails with "
                       "'no kernel image is available for execution on the device': use an image "
                       "built with %s%s" % (gpu_label(gpu), origin, listed, format_cc(cc), example)), None
    if support != "ptx":
        return None, None
    host = facts.host_cuda if facts.host_cuda_exact else None
    cuda = image_cuda(facts)[0]
    if host and cuda and compare_versions(host[:2], cuda[:2]) < 0 and not facts.forward_compat:
        return finding("PTX_NEWER_THAN_DRIVER",
                       "the image reaches %s only through PTX (arch list: %s), built by CUDA %s, "
                       "which driver %s (CUDA %s) cannot JIT-compile: use an image with SASS for "
                       "%s or a driver with CUDA %s or newer"
                       % (gpu_label(gpu), listed, fmt_version(cuda), facts.driver_text,
                          fmt_version(host[:2]), format_cc(cc), fmt_version(cuda[:2]))), None
    return None, finding("PTX_JIT_ONLY",
                         "the image has no SASS for %s, only PTX (arch list: %s): the first start "
                         "JIT-compiles every kernel (minutes, CPU heavy) and runs slower; prefer an "
                         "image built with %s" % (gpu_label(gpu), listed, format_cc(cc)))


def _cuda_target_floor(facts, gpu):
    """IMAGE_LACKS_ARCH when no arch list is known and the image's CUDA cannot build code for the
    GPU (policy cuda_min_target_cc: CUDA 13 stops below 7.5), else None."""
    cuda = image_cuda(facts)[0]
    target = (facts.policy.get("cuda_min_target_cc") or {}).get(str(cuda[0])) if cuda else None
    floor = parse_cc(target.get("min_cc")) if isinstance(target, dict) else None
    if floor is not None and gpu["cc"] < floor:
        return finding("IMAGE_LACKS_ARCH",
                       "the image is built with CUDA %s, which cannot generate code for compute capability "
                       "below %s, so it has no kernels for %s: use an image built with CUDA %d.x or older"
                       % (fmt_version(cuda), format_cc(floor), gpu_label(gpu), cuda[0] - 1))
    return None


def _torch_without_sm70(facts, gpu):
    """IMAGE_LACKS_ARCH for 7.0 on the vLLM releases whose torch has no sm_70 (policy
    torch_without_sm70: 0.9.0 to 0.10.1.1), else None."""
    torch_gap = facts.policy.get("torch_without_sm70") or {}
    span = torch_gap.get("range") or []
    if facts.version is not None and len(span) == 2 and gpu["cc"] == (7, 0) \
            and in_range(facts.version, parse_version(span[0]), parse_version(span[1])):
        return finding("IMAGE_LACKS_ARCH",
                       "%s ships torch built without sm_70 (torch arch list %s), so %s fails with "
                       "'no kernel image is available': use vllm/vllm-openai v0.8.5 or v0.10.2 to "
                       "v0.19.1" % (facts.vllm_label, torch_gap.get("torch_arch", "?"), gpu_label(gpu)))
    return None


def rule_image_arch(facts):
    """IMAGE_LACKS_ARCH, PTX_NEWER_THAN_DRIVER, PTX_JIT_ONLY: the image's kernels for each GPU
    (after rule_image_cuda: reads forward_compat). One IMAGE_LACKS_ARCH for the torch gap at most."""
    entries, origin, listed = _arch_entries(facts)
    reasons, warnings = [], []
    for gpu in facts.distinct:
        reason, warning = None, None
        if entries:
            reason, warning = _listed_arch(facts, gpu, entries, origin, listed)
        elif entries is None:
            reason = _cuda_target_floor(facts, gpu)
        reasons.extend([reason] if reason else [])
        warnings.extend([warning] if warning else [])
        if not any(r["code"] == "IMAGE_LACKS_ARCH" for r in reasons):
            gap = _torch_without_sm70(facts, gpu)
            reasons.extend([gap] if gap else [])
    return findings(reasons, warnings)
