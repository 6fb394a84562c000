#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: benchmark_chart
short_description: Draw a host's benchmark chart (TTFT and throughput vs concurrency, baseline vs now) as a PNG
version_added: 0.1.0
description:
  - From the result documents of M(labfleet.vllm.vllm_benchmark) (this run's and each instance's baseline), draws
    three panels against concurrency - time to first token (p50 and p90, ms), output tokens/s of one request (p50,
    the decode speed) with the roofline's decode bound (memory bandwidth / weight bytes per GPU) and the measured
    share of it, and aggregate output tokens/s. This run is drawn solid, the baseline dashed.
  - Writes O(dest) only when the image differs from the file there (the same figures give the same bytes), through
    a temporary file renamed into place. Meant to run on the controller (C(delegate_to) localhost), next to the
    fleet report that links the chart.
requirements:
  - matplotlib (C(pip install matplotlib)) for the Python that runs the module.
options:
  dest:
    description:
      - The PNG file to write; its directory must exist.
    type: path
    required: true
  title:
    description:
      - The chart's title, for example the host's name.
    type: str
    default: ""
  instances:
    description:
      - One entry per instance - C(name), C(benchmark) (this run's RV(labfleet.vllm.vllm_benchmark#module:benchmark))
        and C(baseline) (the saved baseline's document, or null for none).
    type: list
    elements: dict
    required: true
extends_documentation_fragment:
  - labfleet.vllm.attributes
attributes:
  check_mode:
    description: Draws the chart and says whether the file would change, without writing it.
  diff_mode:
    description: A PNG has no useful diff.
  platform:
    description: Runs on the controller (C(delegate_to) localhost), where matplotlib is installed.
author:
  - labfleet maintainers (@labfleet)
seealso:
  - module: labfleet.vllm.vllm_benchmark
"""

EXAMPLES = r"""
- name: Draw the host's benchmark chart next to the fleet report
  labfleet.vllm.benchmark_chart:
    dest: "{{ playbook_dir }}/reports/benchmarks/{{ inventory_hostname }}.png"
    title: "{{ inventory_hostname }}"
    instances:
      - name: vllm
        benchmark: "{{ bench['benchmark'] }}"
        baseline: "{{ baseline | default(none) }}"
  delegate_to: localhost
"""

RETURN = r"""
dest:
  description: The PNG file.
  returned: success
  type: str
bytes:
  description: Size of the PNG.
  returned: success
  type: int
width:
  description: Width in pixels.
  returned: success
  type: int
height:
  description: Height in pixels.
  returned: success
  type: int
lines:
  description: How many lines the chart has (series with at least one point).
  returned: success
  type: int
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._chart import ChartError, png_size, render, series

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    HAS_MATPLOTLIB = True
    MATPLOTLIB_ERROR = None
except ImportError:
    HAS_MATPLOTLIB = False
    MATPLOTLIB_ERROR = traceback.format_exc()


def write_atomically(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same directory, mode 0644."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temp = tempfile.mkstemp(prefix=".benchmark-chart-", suffix=".png", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temp, 0o644)
        os.rename(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            title=dict(type="str", default=""),
            instances=dict(type="list", elements="dict", required=True),
        ),
        supports_check_mode=True,
    )
    if not HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib"), exception=MATPLOTLIB_ERROR)
    dest = module.params["dest"]
    if not os.path.isdir(os.path.dirname(os.path.abspath(dest))):
        module.fail_json(msg="dest: the directory of %s does not exist; create it first" % dest)
    if os.path.exists(dest) and not os.path.isfile(dest):
        module.fail_json(msg="dest: %s exists and is not a regular file" % dest)
    try:
        data = series(module.params["instances"])
    except ChartError as exc:
        module.fail_json(msg="instances: %s" % exc)
    png = render(data, plt, title=module.params["title"])
    width, height = png_size(png)
    old = None
    if os.path.isfile(dest):
        with open(dest, "rb") as handle:
            old = handle.read()
    changed = old != png
    if changed and not module.check_mode:
        write_atomically(dest, png)
    lines = sum(1 for panel in data["panels"] for line in panel["lines"] if line["points"])
    module.exit_json(changed=changed, dest=dest, bytes=len(png), width=width, height=height, lines=lines)


if __name__ == "__main__":
    main()
