#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Merge settings into Docker's daemon.json without losing anyone else's keys
version_added: 0.1.0
description:
  - Reads Docker's daemon configuration file (by default C(/etc/docker/daemon.json)), merges
    O(settings) into it key by key, removes the keys listed in O(remove), and writes the result
    back only when the parsed configuration changes.
  - Every key that O(settings) and O(remove) do not name is kept as it is, for example the
    C(registry-mirrors), C(log-opts) or C(data-root) a site set by hand. Objects are merged
    recursively, so setting C(runtimes.nvidia) keeps C(runtimes.other); any other value (string,
    number, boolean, list, null) replaces the existing one as a whole.
  - An existing file that is not valid JSON (or holds duplicate keys, or whose top level is not an
    object) is an error whose message names the file; the file is left untouched. An empty file
    counts as an empty configuration, and a missing file is created when there is something to set.
  - The comparison is semantic (parsed JSON), so a file that differs only in formatting is not
    rewritten. When the file is written it is serialised with O(indent) spaces, existing key order
    kept and new keys appended.
  - The module does not restart Docker; notify a handler when the task reports a change.
author:
  - labfleet contributors (@labfleet)
options:
  path:
    description:
      - The daemon configuration file. When it is a symbolic link, the file it points to is read and
        written and the link is kept.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description:
      - Keys to set, as a (nested) dictionary in daemon.json's own shape.
      - Objects are merged key by key at every level; other values replace the existing value.
    type: dict
    default: {}
  remove:
    description:
      - Keys to remove when present. Absent keys are ignored.
    type: list
    elements: dict
    default: []
    suboptions:
      keys:
        description:
          - Path of the key from the top of the document, one list item per level, for example
            V([default-runtime]) or V([runtimes, nvidia]).
        type: list
        elements: str
        required: true
      value:
        description:
          - When set, the key is removed only while it holds exactly this value, for example
            remove C(default-runtime) only while it is V(nvidia).
        type: raw
  indent:
    description:
      - Spaces per indentation level when the file is written (4 is what C(nvidia-ctk runtime
        configure) writes).
    type: int
    default: 4
  backup:
    description:
      - Keep a timestamped copy of the previous file next to it before it is changed.
    type: bool
    default: false
  validate:
    description:
      - Command that checks the new content before it replaces the file; C(%s) stands for a
        temporary file holding it, for example V(dockerd --validate --config-file %s) (Docker 23
        and later).
      - It runs in check mode too (on the temporary file only), so a dry run reports a
        configuration Docker would refuse.
    type: str
extends_documentation_fragment:
  - ansible.builtin.files
attributes:
  check_mode:
    description: Reports what would change and the diff; writes nothing.
    support: full
  diff_mode:
    description: The diff shows the parsed configuration before and after, both serialised the way
      the module writes them, so it lists only the keys that change, never formatting.
    support: full
  platform:
    description: Any POSIX host.
    support: full
    platforms: posix
notes:
  - Keys and values are not checked against Docker's list of options unless O(validate) is given.
seealso:
  - name: Docker daemon configuration file
    description: The keys daemon.json accepts.
    link: https://docs.docker.com/reference/cli/dockerd/#daemon-configuration-file
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime, keep everything else in daemon.json
  labfleet.vllm.docker_daemon_config:
    settings:
      runtimes:
        nvidia:
          path: nvidia-container-runtime
    backup: true
    owner: root
    group: root
    mode: "0644"
  notify: Restart docker

- name: Stop making nvidia the default runtime (only if it still is)
  labfleet.vllm.docker_daemon_config:
    remove:
      - keys: [default-runtime]
        value: nvidia

- name: Let dockerd check the result first (Docker 23 and later)
  labfleet.vllm.docker_daemon_config:
    settings:
      features:
        cdi: true
    validate: dockerd --validate --config-file %s
"""

RETURN = r"""
path:
  description: The configuration file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
changed_keys:
  description: The key paths whose value is set, changed or removed, dot-separated (a key that
    holds a dot is quoted).
  returned: always
  type: list
  elements: str
  sample: ["runtimes.nvidia", "default-runtime"]
config:
  description: The configuration as it is after the task (as it would be, in check mode).
  returned: success
  type: dict
  sample: {"data-root": "/srv/docker", "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}
backup_file:
  description: The copy of the previous file, when O(backup=true) and the file was changed.
  returned: changed and a backup was made
  type: str
  sample: /etc/docker/daemon.json.12345.2026-11-29@10:00:00~
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.labfleet.vllm.plugins.module_utils._daemon_json import (
    DaemonJsonError,
    plan,
)


def read_existing(module, path):
    """Return the file's bytes, or None when it does not exist."""
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        module.fail_json(msg="%s is a directory, not a daemon configuration file; nothing was changed." % path,
                         path=path, changed=False)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        module.fail_json(msg="Cannot read %s: %s; nothing was changed." % (path, to_native(exc)),
                         path=path, changed=False)


def write_temp(module, text):
    handle, name = tempfile.mkstemp(dir=module.tmpdir, prefix="daemon.json.")
    with os.fdopen(handle, "wb") as out:
        out.write(to_bytes(text, errors="surrogate_or_strict"))
    return name


def validate_content(module, path, temp_path):
    command = module.params["validate"]
    if "%s" not in command:
        module.fail_json(msg="validate must contain %%s (the file to check), got %r." % command,
                         path=path, changed=False)
    rc, out, err = module.run_command(command % temp_path)
    if rc != 0:
        module.fail_json(
            msg="The merged configuration for %s was rejected by `%s` (rc %d): %s; %s was left untouched."
            % (path, command, rc, (err or out).strip(), path),
            rc=rc, stdout=out, stderr=err, path=path, changed=False,
        )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            settings=dict(type="dict", default={}),
            remove=dict(
                type="list",
                elements="dict",
                default=[],
                options=dict(
                    keys=dict(type="list", elements="str", required=True, no_log=False),
                    value=dict(type="raw"),
                ),
            ),
            indent=dict(type="int", default=4),
            backup=dict(type="bool", default=False),
            validate=dict(type="str"),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    path = module.params["path"]
    # A daemon.json that is a link to a file kept elsewhere stays a link: the target is written.
    if os.path.islink(path):
        path = os.path.realpath(path)
    if module.params["indent"] < 0:
        module.fail_json(msg="indent must be 0 or more, got %d." % module.params["indent"], changed=False)

    existing = read_existing(module, path)
    try:
        outcome = plan(existing, module.params["settings"], module.params["remove"], path,
                       module.params["indent"])
    except DaemonJsonError as exc:
        module.fail_json(msg=to_native(exc), path=path, changed=False)

    changed = outcome["changed"]
    result = dict(path=path, changed_keys=outcome["changed_keys"], config=outcome["after"])

    if changed:
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent) and not module.check_mode:
            module.fail_json(msg="Cannot write %s: the directory %s does not exist (is the Docker engine "
                                 "installed?); nothing was changed." % (path, parent),
                             path=path, changed=False)
        temp_path = write_temp(module, outcome["after_text"])
        try:
            if module.params["validate"]:
                validate_content(module, path, temp_path)
            if not module.check_mode:
                if module.params["backup"] and existing is not None:
                    result["backup_file"] = module.backup_local(path)
                module.atomic_move(temp_path, path, unsafe_writes=module.params["unsafe_writes"])
        finally:
            if os.path.exists(temp_path):
                os.remove(temp_path)

    diffs = []
    if module._diff:
        diffs.append(dict(before_header=path, after_header=path,
                          before=outcome["before_text"], after=outcome["after_text"]))

    if os.path.exists(path):
        attr_diff = dict(before=dict(path=path), after=dict(path=path))
        file_args = module.load_file_common_arguments(module.params, path=path)
        changed = module.set_fs_attributes_if_different(file_args, changed, diff=attr_diff)
        if module._diff and len(attr_diff["before"]) > 1:
            diffs.append(attr_diff)

    if diffs:
        result["diff"] = diffs
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
