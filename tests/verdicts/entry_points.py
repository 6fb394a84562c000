# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""THE adapter table of the verdict snapshot: entry name -> the callable that decides (test-only).

The recorder (recorder.py) wraps every callable named here while the unit suite runs, and the
replay (scripts/verdict_snapshot.py replay) calls the same callables with the recorded inputs. The
entry NAMES are what a snapshot file stores; the TARGETS are where the code lives today. When a
refactor moves or renames a function, change its target here (and, if its parameters changed, give
it a ``call`` that maps the recorded keyword arguments onto the new signature); the recorded
snapshots stay valid. Nothing in plugins/ or roles/ knows about this file.

Each entry: ``target`` "python.module:attribute"; ``pin`` the parameters whose missing or None
value the code replaces with something of the moment (today's date: the driver branches' end of
life): the recorder stores the value it had then beside the inputs (not in the key), and the replay
passes it; ``call(func, kwargs, pinned)`` how the replay calls the target (default
``func(**kwargs)`` with the pinned values filled in); ``record`` False for entries that are only
replayed (the deploy_gate module, recorded by the Molecule callback, not by the unit suite).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import importlib

_MU = "ansible_collections.labfleet.vllm.plugins.module_utils."
_MODULES = "ansible_collections.labfleet.vllm.plugins.modules."


def _today():
    """The value a ``today`` parameter gets when the caller leaves it out (encoded by the caller)."""
    return datetime.date.today()


def default_call(func, kwargs, pinned):
    """Call ``func(**kwargs)``, a pinned value filling a parameter the recording left out or None."""
    kwargs = dict(kwargs)
    for name, value in pinned.items():
        if kwargs.get(name) is None:
            kwargs[name] = value
    return func(**kwargs)


def call_deploy_gate(func, kwargs, pinned):
    """Run the deploy_gate module's main() as Ansible would, on the recorded arguments.

    ``kwargs``: {"module_args": the task's invocation.module_args (defaults filled in), "measured":
    {"fp16_copy": ..., "gptq_copy": ...} what the module measured on the host (or None)}. The host
    measurement and today's date cannot be taken again on this machine, so the module's two
    measuring helpers return the recorded values and its ``plan`` gets the recorded date: the names
    patched here are deploy_gate.py's own (measure_fp16_copy, measure_gptq_copy, plan); repoint
    them with the module. Returns the module's result as Ansible's JSON would carry it.
    """
    # Imported here: the unit suite's recorder never needs Ansible's module machinery.
    from tests.verdicts.module_harness import run_module  # pylint: disable=import-outside-toplevel
    module = importlib.import_module(func.__module__)
    measured = kwargs.get("measured") or {}
    patches = {
        "measure_fp16_copy": lambda request: measured.get("fp16_copy"),
        "measure_gptq_copy": lambda request: measured.get("gptq_copy"),
    }
    if pinned.get("today") is not None:
        original_plan = module.plan

        def plan_on_the_recorded_day(*args, **kw):
            if kw.get("today") is None:
                kw["today"] = pinned["today"]
            return original_plan(*args, **kw)

        patches["plan"] = plan_on_the_recorded_day
    return run_module(module, func, kwargs["module_args"], patches)


# The keys of nvidia_driver_plan's "plan" request that the plan's driver step replaced (issue #23).
_OLD_DRIVER_PLAN_KEYS = ("branch", "version", "source", "kernel_module", "required_kernel_module", "allow_change",
                         "loaded_driver_version")


def call_driver_run(func, kwargs, pinned):
    """Replay _driver.run; a "plan" request recorded before the driver step moved into the plan (it
    carries branch, version, source, kernel_module, ... instead of ``step``) is translated first: the
    step is planned from the same inputs by _plan.plan_driver, with the packages the request's
    listings show, as the preflight now plans it. What the old run() refused with an error that the
    plan now refuses (flavour, source, distribution) comes back as that error, so both read alike."""
    request = kwargs.get("request")
    if not (isinstance(request, dict) and request.get("command") == "plan" and "step" not in request
            and any(k in request for k in _OLD_DRIVER_PLAN_KEYS)):
        return default_call(func, kwargs, pinned)
    # pylint: disable=import-outside-toplevel
    from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _driver, _plan
    from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError
    try:
        # In the order the role's run() checks now: the distribution, then the step, then the packages.
        _driver.distro_key(request.get("distribution"), request.get("distribution_major_version"),
                           request.get("distribution_version"))
        want = _plan.normalize_request({"driver": dict(
            (k, request.get(k)) for k in ("branch", "version", "source", "kernel_module", "allow_change")
            if request.get(k) is not None)})["driver"]
        installed = _driver.installed_driver_version(_driver._installed(request))  # pylint: disable=protected-access
    except (_driver.DriverInputError, GateInputError) as exc:
        return {"error": str(exc)}
    if want["branch"] is None:
        return {"error": "preflight_deployment.driver.branch: expected a branch like '550' or 'R580', got %r"
                         % (request.get("branch"),)}
    step = _plan.plan_driver(request.get("loaded_driver_version"), want,
                             packages={"installed_version": installed, "error": None},
                             required_kernel_module=request.get("required_kernel_module"),
                             distribution={"name": request.get("distribution"),
                                           "major_version": request.get("distribution_major_version"),
                                           "version": request.get("distribution_version")})
    errors = [p["message"] for p in step["problems"]
              if p["code"] in ("DRIVER_KERNEL_MODULE_UNSUITABLE", "DRIVER_SOURCE_UNAVAILABLE")]
    if errors:
        return {"error": errors[0]}
    translated = dict((k, v) for k, v in request.items() if k not in _OLD_DRIVER_PLAN_KEYS)
    translated["step"] = step
    return func(translated)


class Entry:
    """One decision entry point: where it lives and how a recorded call is replayed."""

    def __init__(self, target, pin=(), call=default_call, record=True):
        """See the module docstring for the fields."""
        self.target = target
        self.pin = tuple(pin)
        self.call = call
        self.record = record

    def resolve(self):
        """(python module, callable) of the target, imported now."""
        module_name, attr = self.target.split(":")
        module = importlib.import_module(module_name)
        return module, getattr(module, attr)


PINNERS = {"today": _today}

ENTRY_POINTS = {
    # The gate and the plan (deploy_gate's decision).
    "gate.evaluate": Entry(_MU + "decisions._gate:evaluate", pin=("today",)),
    "plan.plan": Entry(_MU + "decisions._plan:plan", pin=("today",)),
    "plan.normalize_request": Entry(_MU + "decisions._plan:normalize_request"),
    "plan.plan_driver": Entry(_MU + "decisions._plan:plan_driver"),
    "plan.fp16_copy_path": Entry(_MU + "decisions._plan:fp16_copy_path"),
    "plan.gptq_copy_path": Entry(_MU + "decisions._plan:gptq_copy_path"),
    # vLLM's own startup validation, as the gate asks it.
    "startup.startup_checks": Entry(_MU + "decisions._vllm_startup:startup_checks"),
    # The driver plan (nvidia_driver_plan's run() and the decisions it is made of).
    "driver.run": Entry(_MU + "decisions._driver:run", call=call_driver_run),
    "driver.decide_action": Entry(_MU + "decisions._driver:decide_action"),
    "driver.choose_flavour": Entry(_MU + "decisions._driver:choose_flavour"),
    "driver.choose_source": Entry(_MU + "decisions._driver:choose_source"),
    # The module as the preflight role runs it (recorded by tests/verdicts/callback in Molecule).
    "deploy_gate": Entry(_MODULES + "deploy_gate:main", pin=("today",), call=call_deploy_gate, record=False),
}
