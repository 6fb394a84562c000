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
  - Nothing is written from input that makes no sense to Docker. The file must be a regular file of
    at most 1 MiB whose arrays and objects nest at most 32 levels, without C(NaN), C(Infinity) or
    numbers beyond 64 bits; O(settings) is checked the same way and, for the keys Docker documents,
    against the type Docker reads (for example C(runtimes) must map each runtime name to an object
    with a C(path), and C(log-opts) values must be strings). Any other input fails with a message
    that names the field and what it must be, and the file is left untouched.
  - The module does not restart Docker; notify a handler when the task reports a change.
author:
  - labfleet contributors (@labfleet)
options:
  path:
    description:
      - The daemon configuration file. When it is a symbolic link, the file it points to is read and
        written and the link is kept.
      - It must be a regular file (or not exist yet); a directory, FIFO, device or socket is an error
        and is never opened for reading in a way that could block.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description:
      - Keys to set, as a (nested) dictionary in daemon.json's own shape.
      - Objects are merged key by key at every level; other values replace the existing value.
      - It must be a dictionary (a string is accepted only when it holds a JSON object). Text such
        as V(runtimes=nvidia) is refused, where Ansible's C(dict) type would have read it as a
        dictionary whose C(runtimes) is the string C(nvidia).
      - The keys of Docker's documented full example (for example C(runtimes), C(default-runtime),
        C(features), C(log-opts), C(default-ulimits), C(registry-mirrors), C(mtu)) must have the JSON
        type Docker reads; other keys are passed through (give O(validate) to have dockerd check them).
    type: raw
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
        configure) writes), from V(0) to V(8).
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
      - It may run for O(validate_timeout) seconds; then it is stopped and the task fails.
    type: str
  validate_timeout:
    description:
      - Seconds O(validate) may run before it is stopped (SIGTERM, then SIGKILL 5 seconds later, to
        the command and every process it started that still holds its output) and the task fails
        with the file left untouched, from V(1) to V(3600).
    type: int
    default: 60
    version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.files
  - labfleet.vllm.attributes
attributes:
  check_mode:
    description: Reports what would change and the diff; writes nothing.
  diff_mode:
    description: The diff shows the parsed configuration before and after, both serialised the way
      the module writes them, so it lists only the keys that change, never formatting.
    support: full
notes:
  - Keys outside Docker's documented full example, and the values of known keys beyond their JSON
    type, are not checked unless O(validate) is given.
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

import errno
import json
import os
import shlex
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import (
    absurd_number,
    module_within_depth,
    run_bounded,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._daemon_json import (
    MAX_BYTES,
    MAX_DEPTH,
    DaemonJsonError,
    SettingsError,
    check_indent,
    check_removals,
    check_settings,
    control_character,
    int_text,
    plan,
)

VALIDATE_TIMEOUT_MAX = 3600

_FILE_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode):
    for test, name in _FILE_KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _not_regular(module, path, mode):
    module.fail_json(msg="%s is %s, not a regular file; path must name Docker's daemon configuration file (a "
                         "regular file, or one that does not exist yet); nothing was changed."
                         % (path, file_kind(mode)), path=path, changed=False)


def read_existing(module, path):
    """Return the file's bytes, or None when it does not exist.

    Only a regular file of at most MAX_BYTES is read: the type is checked before opening, and the
    file is opened non-blocking and checked again, so a FIFO (or a file swapped for one) never
    blocks and a device such as /dev/zero is never read.
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.lexists(path):
            return None
        module.fail_json(msg="Cannot read %s: %s; nothing was changed." % (path, to_native(exc)),
                         path=path, changed=False)
    if stat.S_ISDIR(info.st_mode):
        module.fail_json(msg="%s is a directory, not a daemon configuration file; nothing was changed." % path,
                         path=path, changed=False)
    if not stat.S_ISREG(info.st_mode):
        _not_regular(module, path, info.st_mode)
    if info.st_size > MAX_BYTES:
        module.fail_json(msg="%s is %d bytes, more than the %d a daemon configuration file may have here (a real one "
                             "is a few kilobytes); check that path names the right file; nothing was changed."
                             % (path, info.st_size, MAX_BYTES), path=path, changed=False)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = os.open(path, flags)
    except OSError as exc:
        module.fail_json(msg="Cannot read %s: %s; nothing was changed." % (path, to_native(exc)),
                         path=path, changed=False)
    try:
        opened = os.fstat(handle)
        if not stat.S_ISREG(opened.st_mode):
            _not_regular(module, path, opened.st_mode)
        chunks = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(handle, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        module.fail_json(msg="Cannot read %s: %s; nothing was changed." % (path, to_native(exc)),
                         path=path, changed=False)
    finally:
        os.close(handle)
    if size > MAX_BYTES:
        module.fail_json(msg="%s grew beyond %d bytes while it was read; check what writes it; nothing was changed."
                             % (path, MAX_BYTES), path=path, changed=False)
    return b"".join(chunks)


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
    limit = module.params["validate_timeout"]
    # Split first, then put the file in: a % or a quote in the command can never become a traceback.
    argv = [word.replace("%s", temp_path) for word in shlex.split(command)]
    rc, out, err, timed_out = run_bounded(module, argv, limit)
    if timed_out:
        module.fail_json(
            msg="`%s` (validate) did not finish within %d s (validate_timeout) and was stopped; %s was left "
                "untouched. Raise validate_timeout if the check is just slow." % (command, limit, path),
            rc=rc, stdout=out, stderr=err, path=path, changed=False)
    if rc != 0:
        module.fail_json(
            msg="The merged configuration for %s was rejected by `%s` (rc %d): %s; %s was left untouched."
            % (path, command, rc, (err or out).strip(), path),
            rc=rc, stdout=out, stderr=err, path=path, changed=False,
        )


INT_OPTIONS = ("indent", "validate_timeout")
DEPTH_HINT = ("settings and remove[].value may nest at most %d levels (daemon.json's own keys nest at most 5): flatten "
              "them; nothing was changed." % MAX_DEPTH)


def argument_spec(int_type="int"):
    """The options; ``int_type="raw"`` only to report an infinite number (see make_module)."""
    return dict(
        path=dict(type="path", default="/etc/docker/daemon.json"),
        settings=dict(type="raw", default={}),
        remove=dict(
            type="list",
            elements="dict",
            default=[],
            options=dict(
                keys=dict(type="list", elements="str", required=True, no_log=False),
                value=dict(type="raw"),
            ),
        ),
        indent=dict(type=int_type, default=4),
        backup=dict(type="bool", default=False),
        validate=dict(type="str"),
        validate_timeout=dict(type=int_type, default=60),
    )


def make_module():
    """AnsibleModule, never a traceback: options nested hundreds of levels deep fail naming the bound
    (module_within_depth), and so do the numbers ansible-core raises for (see _make_module)."""
    return module_within_depth(_make_module, "docker_daemon_config", DEPTH_HINT)


def _make_module():
    """ansible-core raises for two numbers itself: OverflowError converting an infinite float to int
    (``indent: .inf``), and ValueError logging an int of more than 4300 digits (``indent: "1e5000"``).
    The options are then read again as given, and the task fails naming the option."""
    try:
        return AnsibleModule(argument_spec=argument_spec(), add_file_common_args=True, supports_check_mode=True)
    except (OverflowError, ValueError):
        module = AnsibleModule(argument_spec=argument_spec("raw"), add_file_common_args=True,
                               supports_check_mode=True)
        names = [name for name in INT_OPTIONS if absurd_number(module.params[name])]
        module.fail_json(msg="%s must be a whole number (indent 0 to 8, validate_timeout 1 to %d), got an infinite "
                             "or absurdly large value; nothing was changed."
                             % (" and ".join(names) or "indent or validate_timeout", VALIDATE_TIMEOUT_MAX),
                         changed=False)


def check_options(module):
    """Fail, naming the field, on any option Docker could not use; returns the checked settings."""
    path = module.params["path"]
    bad = control_character(path)
    if bad:
        module.fail_json(msg="path must be a file path without control characters, got %s (%s at position %d); "
                             "nothing was changed." % (json.dumps(path), json.dumps(bad[1]), bad[0]), changed=False)
    validate = module.params["validate"]
    if validate:
        bad = control_character(validate)
        if bad:
            module.fail_json(msg="validate must be one command line without control characters, got %s (%s at "
                                 "position %d); nothing was changed." % (json.dumps(validate), json.dumps(bad[1]),
                                                                         bad[0]), changed=False)
        try:
            words = shlex.split(validate)
        except ValueError as exc:
            words = None
            module.fail_json(msg="validate must be a command line whose quotes are balanced, got %s (%s); nothing "
                                 "was changed." % (json.dumps(validate), exc), changed=False)
        if not words:
            module.fail_json(msg="validate must name a command, for example dockerd --validate --config-file %s; "
                                 "got an empty command; nothing was changed.", changed=False)
    limit = module.params["validate_timeout"]
    if not 1 <= limit <= VALIDATE_TIMEOUT_MAX:
        module.fail_json(msg="validate_timeout must be a whole number of seconds from 1 to %d, got %s; nothing was "
                             "changed." % (VALIDATE_TIMEOUT_MAX, int_text(limit)), changed=False)
    try:
        check_indent(module.params["indent"])
        check_removals(module.params["remove"])
        return check_settings(module.params["settings"])
    except SettingsError as exc:
        module.fail_json(msg=to_native(exc), changed=False)


def main():
    module = make_module()
    settings = check_options(module)
    path = module.params["path"]
    # A daemon.json that is a link to a file kept elsewhere stays a link: the target is written.
    if os.path.islink(path):
        path = os.path.realpath(path)

    existing = read_existing(module, path)
    try:
        outcome = plan(existing, settings, module.params["remove"], path, module.params["indent"])
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
