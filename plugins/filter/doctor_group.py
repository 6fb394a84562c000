# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: doctor_group
short_description: The doctor's cross-host checks of a host group from its members' records
version_added: 0.1.0
author: labfleet maintainers
description:
  - Compares what every member of a host group saw (the records the C(labfleet.vllm.doctor) role collects on each
    member with C(/etc/labfleet/ray/group.json)) into four findings in the doctor's format - C(ray_membership)
    (the leader's M(labfleet.vllm.ray_status) against the members), C(nccl_interface) (the group's NCCL interface
    on every member, up, one MTU, the group's MTU), C(group_ports) (each member to the leader's Ray GCS port, the
    leader to each member's Ray node manager port), C(stage_stopped) (each stage's C(labfleet-ray) unit and
    container, the leader's vLLM server). C(docs/doctor.md) of the collection lists the codes and their fixes.
  - Returns one entry of the host's C(doctor_result.instances) (C(instance) V(group <name>)) and the lines to show.
positional: group, member
options:
  _input:
    description: The members' records by inventory name; a member not in it was not diagnosed in this run.
    type: dict
    required: true
  group:
    description:
      - What the M(labfleet.vllm.doctor_group_record) filter made of this member's group.json - C(group) (the record)
        or C(error) (why it cannot be read).
    type: dict
    required: true
  member:
    description: This member's inventory name.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Compare the members of the group
  ansible.builtin.set_fact:
    group_doctor: "{{ records | labfleet.vllm.doctor_group(group_record, inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description:
    - C(entry) - C(instance) (V(group <name>)), C(group), C(member), C(leader), C(status), C(findings) (each
      C(check), C(status), C(cause), C(fix), C(evidence) with its C(items) - C(code), C(member), C(status),
      C(cause), C(fix)) and C(journal_states); C(lines) - one line per finding for a person.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor import summary_lines
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor_group import (
    diagnose_group,
    invalid_record,
)


def doctor_group(records, group, member):
    """The group's cross-host findings for ``member``: {"entry", "lines"}."""
    if not isinstance(records, dict) or not isinstance(group, dict):
        raise AnsibleFilterError("labfleet.vllm.doctor_group: expected the records by member and the group record")
    if group.get("group") is None:
        entry = invalid_record(member, group.get("error") or "no group record")
    else:
        entry = diagnose_group(group["group"], records)
    return {"entry": entry, "lines": summary_lines(entry)}


class FilterModule(object):
    """The doctor's cross-host checks."""

    def filters(self):
        return {"doctor_group": doctor_group}
