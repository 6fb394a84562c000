# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: fleet_report
short_description: Build the fleet report document, with every host's outcome, from per-host records
version_added: 0.1.0
author: labfleet maintainers
description:
  - Takes one record per host (what the preflight found and planned, what each rollout role recorded, how far the
    rolling rollout got, whether the host was still in the play) and returns the fleet report document that the
    C(labfleet.vllm.fleet_report) role writes as JSON and renders as Markdown and HTML.
  - Each host gets one C(outcome) word; the rules are tried in this order and the first that applies wins -
    no preflight result (V(unreachable) when the host left the play, else V(no_data)); V(refused);
    V(planned) (allowed, and O(mode=preflight) or a probe-only host); V(rolled_back); V(failed);
    V(pending_reboot); V(not_reached); V(unreachable); V(deployed), V(serving) or V(check_mode) from the vLLM
    server's status; V(unknown).
  - The document's keys are described in C(docs/fleet_report.md) of the collection.
positional: mode
options:
  _input:
    description:
      - The per-host records, one dictionary per host.
      - C(host) is the inventory name; C(preflight) what the preflight left on the host, or null -
        C(plan) (its plan, the fact C(preflight_verdict)), C(nvidia) and C(host) (the probes' facts
        C(ansible_facts.nvidia) and C(ansible_facts.labfleet_host)) and C(probe_only) (bool), from which the
        filter makes the host's preflight view (a record may carry that view instead, a mapping with C(verdict));
        C(driver) its
        C(nvidia_driver_result) or null; C(runtime) its C(container_runtime_info) or null; C(server) its
        C(vllm_server_result) or null; C(rollout) its C(labfleet_rollout) (C(state) V(ok), V(failed) or
        V(not_reached), C(step), C(msg), C(batch), C(task)) or null; C(reachable) whether the host was still in the play
        that writes the report (default V(true)); C(exporter) its C(dcgm_exporter_result) (C(labfleet.vllm.dcgm_exporter)
        role), a scrape target when it runs; C(doctor) its C(doctor_result) (C(labfleet.vllm.doctor) role) and
        C(benchmark) its C(benchmark_result) (C(playbooks/benchmark.yml)), optional, each one section of the report.
    type: list
    elements: dict
    required: true
  mode:
    description:
      - V(rollout) when the run rolled out to the allowed hosts (C(site.yml)); V(preflight) for a preflight-only
        run, where allowed hosts are V(planned).
    type: str
    default: rollout
    choices: [rollout, preflight]
  gateways:
    description:
      - One record per gateway host (the C(vllm_gateways) group) - C(host), C(result) (its C(gateway_result), from the
        C(labfleet.vllm.gateway) role) and C(address) (where Prometheus reaches its exporter when that listens on every
        address). They make the report's C(gateway) section (each gateway's backends, their planned state and
        HAProxy's view of them, the drains the rollout performed) and add each exporter to C(scrape_targets).
    type: list
    elements: dict
  gateway_load:
    description:
      - The figures of upgrades under load (C(sent), C(failed), C(cut), C(refused), C(ttft_p50_s), C(ttft_p99_s), the
        same before the upgrade, C(drain), C(concurrency), C(duration_s), C(url)) as C(scripts/gateway-load.py) writes
        them, one mapping or a list; a run with C(drain) true goes into C(gateway.upgrade_under_load), one with it
        false into C(gateway.upgrade_under_load_no_drain). Unknown keys and values of the wrong type are left out.
    type: raw
  previous:
    description:
      - The report document already on disk (the last rollout's). When given, the result is that document with
        this run's C(doctor) and C(benchmark) sections put in host by host (the read-only playbooks
        C(doctor.yml) and C(benchmark.yml) update the report this way); every host's outcome stays the last
        rollout's. A document of another C(report_format), a damaged one (a part the merge or the templates read
        missing or of the wrong type) or a text that is not JSON is replaced by this run's report, with a warning
        and C(previous_report) saying why.
    type: raw
"""

EXAMPLES = r"""
- name: Build the report from two hosts' records
  ansible.builtin.set_fact:
    report: >-
      {{ [{'host': 'gpu01', 'reachable': true,
           'preflight': {'plan': hostvars['gpu01']['preflight_verdict'],
                         'nvidia': hostvars['gpu01']['ansible_facts']['nvidia'],
                         'host': hostvars['gpu01']['ansible_facts']['labfleet_host'], 'probe_only': false},
           'server': hostvars['gpu01']['vllm_server_result'] | default(none)},
          {'host': 'gpu02', 'reachable': false, 'preflight': none}]
         | labfleet.vllm.fleet_report('rollout') }}

- name: Count the hosts by outcome
  ansible.builtin.debug:
    msg: "{{ report['summary']['by_outcome'] }}"
"""

RETURN = r"""
_value:
  description:
    - The report document. C(report_format) (2), C(collection), C(mode), C(outcomes) (every outcome word in rule
      order, with its meaning), C(hosts) (one entry per host, sorted by name) and C(summary).
    - Each host entry holds the preflight view's keys (C(verdict), C(state), C(reasons), C(warnings), C(gpu_count),
      C(target) and C(policy_version) of the plan, C(replanned) when the rollout planned the host again, ...)
      and adds C(outcome), C(outcome_detail), C(reachable), C(serving_label) (the serving path as the report
      names it, V(gptq_repack) with the group size, bits per weight and expected error), C(rollout) (C(driver),
      C(runtime), C(server)), C(rollout_status), C(serving) (deployed and serving hosts - C(image),
      C(image_digest), C(model_path), C(serving_path), C(served_model_path), C(fp16_copy), C(gptq_copy) and
      C(gptq_copy_detail) (the copy the server serves), C(instances) with C(flags), C(ttft_s), C(tokens_per_s),
      C(health_s)) and C(failure) (rolled_back and failed hosts - C(step), C(msg), C(failed_instance),
      C(journal_tail)).
    - C(summary) holds C(hosts) (a count), C(by_outcome), C(by_state), C(allowed) and C(refused) (host names).
    - C(gateway), when O(gateways) or O(gateway_load) is given - C(gateways) (each C(host), C(state), C(url),
      C(backends) with C(planned), C(why), C(admin), C(up), C(in_flight), C(requests), C(errors_5xx), and C(left_out)),
      C(drains) (C(host), C(instance), C(gateway), C(outcome), C(in_flight_at_start), C(in_flight_at_end),
      C(waited_s)), C(summary) and C(upgrade_under_load).
    - C(doctor) and C(benchmark), when a record carries them - C(hosts) (each the host's record with C(host)) and
      C(summary) (C(hosts), and C(by_status) and C(problem) for the doctor, C(instances) for the benchmark).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._report import build_report, merge_report


display = Display()


def fleet_report(records, mode="rollout", previous=None, gateways=None, gateway_load=None):
    """The fleet report document from a list of per-host records; with ``previous``, that document
    with this run's doctor, benchmark and gateway sections merged in."""
    if gateways is not None and not isinstance(gateways, list):
        raise AnsibleFilterError("labfleet.vllm.fleet_report: gateways must be a list of gateway records, got %s"
                                 % type(gateways).__name__)
    try:
        fresh = build_report(records, mode=mode, gateways=gateways, gateway_load=gateway_load)
        doc = fresh if previous is None else merge_report(previous, fresh)
    except ValueError as exc:
        raise AnsibleFilterError("labfleet.vllm.fleet_report: %s" % exc)
    if doc.get("previous_report"):
        display.warning("labfleet.vllm.fleet_report: %s; this run's report is written in its place "
                        "(the last rollout's outcomes are not in it)" % doc["previous_report"])
    return doc


class FilterModule(object):
    """The fleet report filter."""

    def filters(self):
        return {"fleet_report": fleet_report}
