# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.vllm_doctor module instead.
"""What the doctor reads on a host, read-only: the raw texts _doctor.diagnose() takes.

collect() reads, for one vLLM instance (unit ``<name>.service``, container ``<name>``, env file
``<config_dir>/<name>.env``, as the vllm_server role names them):

- the instance's journal tail and the kernel log (``journalctl``), for the fault lines;
- /etc/docker/daemon.json, the CDI specs, the /dev/nvidia* nodes and their /dev/char links;
- ``nvidia-smi topo -m`` and ``topo -p2p r``, ``lspci -vvv`` (ACS), /proc/cmdline;
- the running container's vLLM arguments (``docker inspect``), else none (the doctor then judges the plan's);
- the container's environment from the env file (only NCCL_/CUDA_/VLLM_/... names are kept by
  _doctor.container_env; names that look like secrets are dropped there, and nothing raw is returned);
- when asked and the image is on the host: ``docker run --rm --network none --gpus all --entrypoint
  nvidia-smi <image> -L`` (what a container sees) and, opt-in, the image's CUDA check with
  CUDA_FORCE_PTX_JIT=1. Both containers are removed when they end (--rm) or time out.

Every command is bounded by ``timeout`` seconds; a command that is missing, fails or times out
leaves its field out and says so in ``notes`` (the check that needs it then answers "unknown" and
says what to collect). The I/O goes through the functions passed in, so tests give recorded answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import stat

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import CDI_SPEC_DIRS, cdi_spec_paths, read_regular_text
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._image import GPU_CHECK_SCRIPT
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import served_model
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import image_gate_view

# The largest text kept from one command or file (the journal tail of 5000 lines is about 1 MB).
MAX_TEXT = 4 * 1024 * 1024
# Journal lines read: enough to reach the start-up of a server that has run for a while.
DEFAULT_JOURNAL_LINES = 2000
KERNEL_LOG_LINES = 2000
# Kernel log lines that matter here (SIGILL traps, Xid errors, the OOM killer); the rest is left out.
_KERNEL_LINE_RE = re.compile(r"invalid opcode|trap|NVRM|Xid|Out of memory|oom-kill", re.I)
_INSTANCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_DEV_NVIDIA_RE = re.compile(r"^nvidia(\d{1,3}|ctl|-uvm|-uvm-tools|-modeset)$")
DEFAULT_DAEMON_JSON = "/etc/docker/daemon.json"
DEFAULT_CONFIG_DIR = "/etc/vllm"


class CollectError(Exception):
    """An option the collector cannot work with (the message names it)."""


def check_instance_name(name):
    """The instance name as the role uses it for the unit, container and env file."""
    if not isinstance(name, str) or not _INSTANCE_RE.match(name):
        raise CollectError("instance must be the instance's name as the vllm_server role names its unit and "
                           "container (letters, digits, '_', '.', '@', '-'; at most 64), got %r" % (name,))
    return name


# deploy_gate's inputs that _gate.evaluate() takes besides the vLLM arguments.
GATE_INPUT_KEYS = ("gpus", "driver_version", "image", "model", "policy_overrides", "nvlink", "driver_library_mismatch",
                   "cuda_driver_version", "lost_gpus", "require_cuda_enforced", "runtime_mode_why")


def doctor_gate_inputs(gate_inputs, verdict):
    """The gate's inputs for the out-of-memory check's search: what the plan was made from (the
    plan's made_from, deploy_gate's inputs; its ``image`` as vllm_image_facts read it, of which the
    gate takes the gate view), the keys evaluate() takes, with the model the plan serves (an NVFP4
    checkpoint served from its FP16 copy is judged as that copy)."""
    gate_inputs = dict(gate_inputs or {})
    gate_inputs["image"] = image_gate_view(gate_inputs.get("image"))
    inputs = dict((k, v) for k, v in gate_inputs.items() if k in GATE_INPUT_KEYS and v is not None)
    if not inputs.get("model"):
        return {}
    inputs["model"] = served_model(inputs["model"], verdict)
    if "policy" in (gate_inputs or {}) and "policy_overrides" not in inputs:
        inputs["policy_overrides"] = gate_inputs["policy"]
    return inputs


def test_image(verdict, image):
    """The image the test containers run: the plan's image, else the probed one; None when neither."""
    deployment = (verdict or {}).get("deployment") or {}
    for value in (deployment.get("image"), (image or {}).get("reference")):
        if isinstance(value, str) and value.strip() and not any(ord(ch) < 33 for ch in value.strip()):
            return value.strip()
    return None


def _clip(text):
    text = text or ""
    return text if len(text) <= MAX_TEXT else text[-MAX_TEXT:]


def _said(rc, out, err, timed_out, limit):
    if timed_out:
        return "no answer within %d s" % limit
    lines = ((err or "").strip() or (out or "").strip()).splitlines()
    return "exit %s: %s" % (rc, lines[-1][:300] if lines else "no output")


class Collector(object):
    """Reads one host. ``run(argv, limit)`` returns (rc, stdout, stderr, timed_out) and never raises
    for a missing command (rc 127 or an OSError turned into it); ``which(name)`` a path or None;
    ``read_text(path)`` a regular file's text (raises IOError/OSError); ``listdir``, ``lstat``,
    ``exists`` as in os."""

    def __init__(self, run, which, read_text=None, listdir=os.listdir, lstat=os.lstat, exists=os.path.exists,
                 timeout=60):
        self.run = run
        self.which = which
        self.read_text = read_text or (lambda path: read_regular_text(path, MAX_TEXT))
        self.listdir = listdir
        self.lstat = lstat
        self.exists = exists
        self.timeout = timeout
        self.notes = {}

    def command(self, key, argv):
        """stdout of ``argv`` when it exits 0, else None with a note under ``key``."""
        tool = self.which(argv[0]) if not argv[0].startswith("/") else argv[0]
        if not tool:
            self.notes[key] = "%s is not on this host's PATH" % argv[0]
            return None
        rc, out, err, late = self.run([tool] + list(argv[1:]), self.timeout)
        if rc != 0 or late:
            self.notes[key] = "`%s` failed (%s)" % (" ".join(argv[:4]), _said(rc, out, err, late, self.timeout))
            return None
        self.notes[key] = "read"
        return _clip(out)

    def text_file(self, key, path):
        """A regular file's text; None when it is absent (noted) or unreadable (noted)."""
        try:
            text = self.read_text(path)
        except (IOError, OSError) as exc:
            if not self.exists(path):
                self.notes[key] = "%s does not exist" % path
            else:
                self.notes[key] = "%s could not be read: %s" % (path, exc)
            return None
        self.notes[key] = "read"
        return text

    # ------------------------------------------------------------------ the pieces

    def journal(self, unit, lines):
        return self.command("journal", ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"])

    def kernel_log(self):
        text = self.command("kernel_log", ["journalctl", "-k", "-n", str(KERNEL_LOG_LINES), "--no-pager",
                                           "-o", "short-iso"])
        if text is None:
            text = self.command("kernel_log", ["dmesg"])
        if text is None:
            return None
        return "\n".join(line for line in text.splitlines() if _KERNEL_LINE_RE.search(line))

    def dev_nodes(self):
        """(/dev/nvidia* names, the /dev/char links those character devices lack)."""
        try:
            names = sorted(n for n in self.listdir("/dev") if _DEV_NVIDIA_RE.match(n))
        except (IOError, OSError) as exc:
            self.notes["dev_nodes"] = "/dev could not be listed: %s" % exc
            return None, None
        missing = []
        for name in names:
            try:
                info = self.lstat("/dev/" + name)
            except (IOError, OSError):
                continue
            if not stat.S_ISCHR(info.st_mode):
                continue
            link = "/dev/char/%d:%d" % (os.major(info.st_rdev), os.minor(info.st_rdev))
            if not self.exists(link):
                missing.append(link)
        self.notes["dev_nodes"] = "read (%d node(s))" % len(names)
        return names, missing

    def cdi_specs(self, dirs):
        specs = []
        for path in cdi_spec_paths(dirs, self.listdir):
            try:
                specs.append({"path": path, "text": self.read_text(path)})
            except (IOError, OSError) as exc:
                self.notes["cdi_specs:%s" % path] = "could not be read: %s" % exc
        self.notes["cdi_specs"] = "read (%d spec(s))" % len(specs)
        return specs

    def deployed_argv(self, docker, container):
        """The vLLM arguments of the running container (docker inspect .Args), or None."""
        out = self.command("deployed_argv", [docker, "container", "inspect", "--format", "{{json .Args}}", container])
        if out is None:
            return None
        try:
            args = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.notes["deployed_argv"] = "docker inspect printed no JSON list"
            return None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            self.notes["deployed_argv"] = "docker inspect printed no list of words"
            return None
        return args

    def image_present(self, docker, image):
        out = self.command("image", [docker, "image", "inspect", "--format", "{{.Id}}", image])
        if out is None:
            self.notes["image"] = "the image %s is not on this host, so no test container ran" % image
            return False
        return True

    def container_test(self, key, docker, argv, name):
        """{rc, stdout, stderr} of a `docker run --rm` test; the container is removed if it times out."""
        tool = self.which(docker) if not docker.startswith("/") else docker
        rc, out, err, late = self.run([tool] + argv, self.timeout)
        if late:
            self.run([tool, "rm", "-f", name], 30)
            self.notes[key] = "the test container did not end within %d s and was removed" % self.timeout
            return None
        self.notes[key] = "ran (exit %s)" % rc
        return {"rc": rc, "stdout": _clip(out), "stderr": _clip(err)}


def collect(collector, instance, config_dir=DEFAULT_CONFIG_DIR, docker="docker", journal_lines=DEFAULT_JOURNAL_LINES,
            daemon_json_path=DEFAULT_DAEMON_JSON, cdi_dirs=CDI_SPEC_DIRS, image=None, gpu_test=True,
            ptx_jit_test=False, name_suffix="0"):
    """The ``raw`` argument of _doctor.diagnose() for ``instance``, and the notes of what was read.

    ``image``: the reference (or ID) to run the test containers with; None or absent from the host:
    no test container. Returns (raw, notes)."""
    instance = check_instance_name(instance)
    c = collector
    raw = {"daemon_json_path": daemon_json_path}
    raw["journal"] = c.journal(instance + ".service", journal_lines)
    raw["kernel_log"] = c.kernel_log()
    raw["daemon_json"] = c.text_file("daemon_json", daemon_json_path)
    raw["dev_nodes"], raw["dev_char_missing"] = c.dev_nodes()
    raw["cdi_specs"] = c.cdi_specs(cdi_dirs)
    raw["kernel_cmdline"] = c.text_file("kernel_cmdline", "/proc/cmdline")
    if c.which("nvidia-smi"):
        raw["topo_matrix"] = c.command("topo_matrix", ["nvidia-smi", "topo", "-m"])
        raw["topo_p2p"] = c.command("topo_p2p", ["nvidia-smi", "topo", "-p2p", "r"])
    else:
        c.notes["topo_matrix"] = "nvidia-smi is not on this host's PATH"
    raw["lspci_acs"] = c.command("lspci_acs", ["lspci", "-vvv"])
    raw["container_env"] = c.text_file("container_env", "%s/%s.env" % (config_dir.rstrip("/"), instance))
    if c.which(docker) or docker.startswith("/"):
        raw["deployed_argv"] = c.deployed_argv(docker, instance)
        if image and (gpu_test or ptx_jit_test) and c.image_present(docker, image):
            if gpu_test:
                name = "labfleet-doctor-gpus-%s" % name_suffix
                raw["gpu_test"] = c.container_test(
                    "gpu_test", docker, ["run", "--rm", "--network", "none", "--gpus", "all", "--name", name,
                                         "--entrypoint", "nvidia-smi", image, "-L"], name)
            if ptx_jit_test:
                name = "labfleet-doctor-ptx-%s" % name_suffix
                raw["ptx_jit_test"] = c.container_test(
                    "ptx_jit_test", docker, ["run", "--rm", "--network", "none", "--gpus", "all", "--name", name,
                                             "-e", "CUDA_FORCE_PTX_JIT=1", "--entrypoint", "python3", image, "-c",
                                             GPU_CHECK_SCRIPT], name)
        elif not image:
            c.notes["gpu_test"] = "no image named, so no test container ran"
    else:
        c.notes["docker"] = "%s is not on this host's PATH" % docker
    return dict((k, v) for k, v in raw.items() if v is not None), dict(c.notes)
