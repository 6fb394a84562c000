#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_manifest
short_description: Write the manifest of a model revision in the model store
version_added: 0.1.0
description:
  - Runs on the model store host. A revision directory C(<store_root>/<name>/<revision>/) holds the model
    files and C(labfleet-manifest.json), which lists every file (relative path, size, sha256), what the
    deployment gate needs (the C(model) input of M(labfleet.vllm.deploy_gate)), C(config.json) and the
    quantization description, and for a converted copy the source it was made from.
    M(labfleet.vllm.model_fetch) reads it on the serving hosts.
  - With O(src), the model directory O(src) is first copied into O(path) - into a temporary sibling
    C(.<revision>.tmp-XXXX), manifest written and everything fsync'd, then renamed into place - so a
    revision appears whole or not at all.
  - Files are hashed in parallel (one thread per CPU). A file whose size and mtime are those recorded in
    the hash cache C(.labfleet-hashes.json) beside the manifest keeps its recorded sha256 unless O(rehash).
  - The manifest is written (atomically) only when its content changed, C(created) aside, so a re-run
    reports no change. Its text is canonical JSON, so C(manifest_sha256) names exactly one content.
  - Files and directories whose name starts with C(.) are state, not model files, and are left out.
    A symbolic link pointing outside the directory, a link to a directory, a FIFO or device, or a
    name with a control character or a backslash fails the task, naming the file.
author:
  - labfleet maintainers (@labfleet)
options:
  path:
    description:
      - The revision directory, C(<store_root>/<name>/<revision>).
    type: path
    required: true
  src:
    description:
      - A model directory to copy into O(path) first. When O(path) already holds the same files (paths,
        sizes, sha256) nothing is copied; other files fail the task unless O(force).
    type: path
  name:
    description:
      - The model's name in the store; defaults to the name of O(path)'s parent directory.
      - 1 to 128 ASCII letters, digits, C(.), C(_), C(+) or C(-), starting with a letter or digit.
    type: str
  revision:
    description:
      - The revision; defaults to the name of O(path). Same characters as O(name).
      - A converted copy is its own revision, for example C(2026-01+fp16) or C(2026-01+gptq-g128).
    type: str
  source:
    description:
      - For a converted copy, what it was made from - C(name), C(revision), C(manifest_sha256) (of the
        source revision's manifest), C(files) (a dict of source path to sha256), C(converter) and
        C(settings) (a dict). Written as the manifest's C(source).
    type: dict
  rehash:
    description:
      - Hash every file again, even those whose size and mtime the hash cache knows.
    type: bool
    default: false
  force:
    description:
      - With O(src), replace a revision that holds other files (a revision should never change; servers
        that fetched it repair to the new content on their next fetch).
    type: bool
    default: false
extends_documentation_fragment:
  - labfleet.vllm.attributes
attributes:
  check_mode:
    description: Hashes and reports what the manifest would be; writes and copies nothing.
  platform:
    description: Runs on the model store host.
seealso:
  - module: labfleet.vllm.model_fetch
  - module: labfleet.vllm.model_facts
"""

EXAMPLES = r"""
- name: Add a model to the store
  labfleet.vllm.model_manifest:
    path: /srv/model-store/llama-3.1-8b/2026-01
    src: /data/incoming/Llama-3.1-8B-Instruct
  register: __store_added

- name: Refresh the manifest of a revision already in place
  labfleet.vllm.model_manifest:
    path: /srv/model-store/llama-3.1-8b/2026-01

- name: Record the FP16 copy made from it
  labfleet.vllm.model_manifest:
    path: /srv/model-store/llama-3.1-8b/2026-01+fp16
    source:
      name: llama-3.1-8b
      revision: "2026-01"
      manifest_sha256: "{{ __store_added.manifest_sha256 }}"
      files: {}
      converter: labfleet.vllm.nvfp4_dequantize
      settings: {}
"""

RETURN = r"""
manifest_path:
  description: The manifest file.
  returned: success
  type: str
  sample: /srv/model-store/llama-3.1-8b/2026-01/labfleet-manifest.json
manifest_sha256:
  description: sha256 of the manifest's text (what O(labfleet.vllm.model_fetch#module:manifest_sha256) pins).
  returned: success
  type: str
name:
  description: The model's name in the store.
  returned: success
  type: str
revision:
  description: The revision.
  returned: success
  type: str
total_bytes:
  description: Bytes of all files listed.
  returned: success
  type: int
files:
  description: Number of files listed.
  returned: success
  type: int
hashed_bytes:
  description: Bytes hashed by this run (0 on a converged re-run; with O(src) the source and the copy both count).
  returned: success
  type: int
seconds:
  description: Seconds the module took.
  returned: success
  type: float
gate:
  description: The C(model) input of M(labfleet.vllm.deploy_gate), as M(labfleet.vllm.model_facts) gives it.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.store._manifest import (
    StoreError,
    ensure_revision,
)


ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    src=dict(type="path"),
    name=dict(type="str"),
    revision=dict(type="str"),
    source=dict(type="dict"),
    rehash=dict(type="bool", default=False),
    force=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result = ensure_revision(params["path"], name=params["name"], revision=params["revision"], src=params["src"],
                                 source=params["source"], rehash=params["rehash"], force=params["force"],
                                 check_mode=module.check_mode)
    except StoreError as exc:
        module.fail_json(msg="model_manifest: %s" % exc)
    except (IOError, OSError) as exc:
        module.fail_json(msg="model_manifest: %s; check the store directory's free space and permissions" % exc)
    result.pop("manifest")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
