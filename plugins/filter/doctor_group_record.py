# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: doctor_group_record
short_description: Read a host group's record (group.json) for the doctor, without failing on a bad one
version_added: 0.1.0
author: labfleet maintainers
description:
  - Parses and checks C(/etc/labfleet/ray/group.json) as the C(labfleet.vllm.ray_cluster) role writes it (name,
    member, leader, leader_address, port, members, stages, nccl_interface, mtu, gpus_total, tp, pp, image_id).
  - A file that is not JSON or lacks a field is not an error here - the result's C(error) names the field, and the
    M(labfleet.vllm.doctor_group) filter makes it a finding.
options:
  _input:
    description: The file's text.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the group's record
  ansible.builtin.set_fact:
    group_record: "{{ slurped['content'] | b64decode | labfleet.vllm.doctor_group_record }}"
"""

RETURN = r"""
_value:
  description: C(group) (the checked record, or null) and C(error) (why it cannot be read, or null).
  type: dict
"""

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor_group import (
    GroupRecordError,
    parse_group_record,
)


def doctor_group_record(text):
    """{"group": the checked record or None, "error": None or why not}."""
    try:
        return {"group": parse_group_record(str(text)), "error": None}
    except GroupRecordError as exc:
        return {"group": None, "error": str(exc)}


class FilterModule(object):
    """The doctor's reading of group.json."""

    def filters(self):
        return {"doctor_group_record": doctor_group_record}
