#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch a model revision from the model store, verify it and publish it atomically
version_added: 0.1.0
description:
  - Runs on a serving host. Reads C(<url>/<name>/<revision>/labfleet-manifest.json) (written by
    M(labfleet.vllm.model_manifest)), fetches the revision's files into C(<dest>.revisions/<revision>/)
    and points the link O(dest) (the model path the vLLM container mounts) at it, as the relative
    target C(<basename(dest)>.revisions/<revision>).
  - Nothing is written before the manifest was read and validated; an unreachable store, a missing
    revision or a manifest that O(manifest_sha256) does not pin fails the task with dest untouched.
  - Files are downloaded into C(<file>.part) in the staging directory C(<dest>.revisions/.<revision>.partial/),
    written and fsync'd chunk by chunk and hashed as they come. An interrupted download resumes with an
    HTTP range request on the next run (the store's nginx answers 206); a store that ignores ranges makes
    it start over (counted in C(restarts)). A file whose size or sha256 differs from the manifest is
    fetched once more from zero, then the task fails naming it.
  - A file that another fetched revision under C(<dest>.revisions/) holds with the same sha256 and size
    (verified there) is hard-linked instead of fetched again.
  - The link switches only after every file was verified; until then it points where it pointed before.
  - A published revision whose file was damaged (changed size or mtime; with O(verify=full) any changed
    byte) is repaired copy-on-write - a new directory gets hard links of the good files and the damaged
    file fetched again, and replaces the revision whole; the directory a server may be reading is never
    written into, and the link never dangles.
  - Keeps at most O(keep_revisions) revisions, never removing the one just published, the one the link
    pointed to before (a running container may still read it) or one in O(protect). Staging directories
    are kept so that an interrupted fetch resumes; remove C(<dest>.revisions/.<revision>.partial) by hand to
    give up on one. Copies that a repair moved aside are removed by the next fetch.
  - Two fetches of the same O(dest) do not run at once - the second waits for the first's lock on
    C(<dest>.revisions/.lock) as long as O(timeout), then fails.
  - Before downloading, the free disk space of O(dest)'s filesystem must exceed the bytes still to fetch
    plus 64 MiB.
author:
  - labfleet maintainers (@labfleet)
options:
  url:
    description:
      - The store's base URL, C(http://) or C(https://), under which C(<name>/<revision>/) are served.
    type: str
    required: true
  name:
    description:
      - The model's name in the store.
    type: str
    required: true
  revision:
    description:
      - The revision to fetch and publish.
    type: str
    required: true
  dest:
    description:
      - The absolute model path, a symbolic link this module manages. A real directory there fails the task.
    type: path
    required: true
  keep_revisions:
    description:
      - The most revisions kept under C(<dest>.revisions/) (the published one and the previous one are kept
        even beyond it).
    type: int
    default: 2
  protect:
    description:
      - Revisions never pruned (for example the one another instance still serves).
    type: list
    elements: str
    default: []
  verify:
    description:
      - V(quick) takes a file as good when its size and mtime are those recorded after its sha256 was
        checked; V(full) hashes every file again.
    type: str
    choices: [quick, full]
    default: quick
  manifest_sha256:
    description:
      - The sha256 of the manifest the preflight judged (M(labfleet.vllm.model_manifest)'s C(manifest_sha256)).
        The task fails, changing nothing, when the store's manifest is another one.
    type: str
  timeout:
    description:
      - Seconds each HTTP request may wait for the store (connecting, each read), 1 to 3600.
    type: int
    default: 60
  chunk_size:
    description:
      - Bytes read, written and fsync'd at a time, 4096 to 1073741824. An interrupted download re-sends at
        most one chunk.
    type: int
    default: 8388608
  headers:
    description:
      - Extra HTTP request headers (for example an authorization header the store's proxy wants). Never
        shown in results.
    type: dict
    default: {}
  validate_certs:
    description:
      - Verify the store's TLS certificate with C(https://).
    type: bool
    default: true
extends_documentation_fragment:
  - labfleet.vllm.attributes
attributes:
  check_mode:
    description: Reads the manifest and the local state (hashing with O(verify=full)) and reports what would be
      fetched, published and pruned; writes nothing.
  platform:
    description: Runs on the serving host that holds O(dest).
seealso:
  - module: labfleet.vllm.model_manifest
  - module: labfleet.vllm.model_facts
"""

EXAMPLES = r"""
- name: Fetch the model the preflight judged
  labfleet.vllm.model_fetch:
    url: http://store.lab:8080/models
    name: llama-3.1-8b
    revision: "2026-01"
    dest: /srv/models/llama
    manifest_sha256: "{{ __preflight_manifest_sha256 }}"
  register: __fetched

- name: Check every byte (after a disk scare)
  labfleet.vllm.model_fetch:
    url: http://store.lab:8080/models
    name: llama-3.1-8b
    revision: "2026-01"
    dest: /srv/models/llama
    verify: full
"""

RETURN = r"""
revision:
  description: The revision published.
  returned: always
  type: str
path:
  description: The revision's directory (the link resolved).
  returned: success
  type: str
  sample: /srv/models/llama.revisions/2026-01
previous:
  description: The revision the link pointed to before (null when it pointed nowhere the store manages).
  returned: success
  type: str
manifest_sha256:
  description: sha256 of the store's manifest.
  returned: success
  type: str
bytes_fetched:
  description: Bytes received from the store by this run (0 on a converged run).
  returned: always
  type: int
bytes_resumed:
  description: Bytes of earlier partial downloads kept and not sent again.
  returned: always
  type: int
restarts:
  description: Downloads that had to start over (the store ignored a range, or a file did not match its sha256).
  returned: always
  type: int
files_fetched:
  description: Files downloaded by this run.
  returned: always
  type: int
files_verified:
  description: Files found in place and verified, not downloaded.
  returned: always
  type: int
files_reused:
  description:
    - Files not fetched but hard-linked from another revision under C(<dest>.revisions/) that holds the same
      content (same sha256 and size, verified there as O(verify) says).
  returned: always
  type: int
files_repaired:
  description: Paths of files of the published revision that were damaged and fetched again.
  returned: always
  type: list
  elements: str
verify:
  description: The verification used (V(quick) or V(full)).
  returned: success
  type: str
seconds:
  description: Seconds the module took.
  returned: success
  type: float
pruned:
  description: Revisions removed (in check mode, those that would be).
  returned: success
  type: list
  elements: str
pending:
  description: In check mode, the paths that would be fetched; empty otherwise.
  returned: success
  type: list
  elements: str
pending_bytes:
  description: In check mode, the bytes that would be fetched; 0 otherwise.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.store._fetch import (
    DEFAULT_CHUNK,
    FetchError,
    display_url,
    fetch_revision,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.store._manifest import StoreError


ARGUMENT_SPEC = dict(
    url=dict(type="str", required=True),
    name=dict(type="str", required=True),
    revision=dict(type="str", required=True),
    dest=dict(type="path", required=True),
    keep_revisions=dict(type="int", default=2),
    protect=dict(type="list", elements="str", default=[]),
    verify=dict(type="str", choices=["quick", "full"], default="quick"),
    manifest_sha256=dict(type="str"),
    timeout=dict(type="int", default=60),
    chunk_size=dict(type="int", default=DEFAULT_CHUNK),
    headers=dict(type="dict", default={}, no_log=True),
    validate_certs=dict(type="bool", default=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result = fetch_revision(
            params["url"], params["name"], params["revision"], params["dest"],
            keep_revisions=params["keep_revisions"], verify=params["verify"],
            manifest_sha256_pin=params["manifest_sha256"], timeout=params["timeout"],
            chunk_size=params["chunk_size"], headers=params["headers"], validate_certs=params["validate_certs"],
            protect=params["protect"], check_mode=module.check_mode)
    except FetchError as exc:
        module.fail_json(msg="model_fetch: %s" % exc, revision=params["revision"], **exc.progress)
    except StoreError as exc:
        module.fail_json(msg="model_fetch: %s" % exc, revision=params["revision"])
    except (IOError, OSError) as exc:
        module.fail_json(msg="model_fetch: %s (fetching from %s); check the free space and permissions of %s.revisions"
                         % (exc, display_url(params["url"]), params["dest"]), revision=params["revision"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
