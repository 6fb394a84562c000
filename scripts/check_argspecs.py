"""Fail when a role's meta/argument_specs.yml and defaults/main.yml disagree.

For every role under roles/: the variables in defaults/main.yml and the options of the `main`
entry point must be the same set, and each option's `default` must equal the value in defaults.
argument_specs only validate and document; the values come from defaults, so a drift between the
two makes the documentation lie.
"""

import os
import sys

import yaml

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def check_role(role_dir):
    problems = []
    name = os.path.basename(role_dir)
    defaults_path = os.path.join(role_dir, "defaults", "main.yml")
    specs_path = os.path.join(role_dir, "meta", "argument_specs.yml")
    if not os.path.exists(specs_path):
        return ["%s: meta/argument_specs.yml is missing" % name]
    defaults = load(defaults_path) if os.path.exists(defaults_path) else {}
    options = (load(specs_path).get("argument_specs", {}).get("main", {}) or {}).get("options") or {}
    for key in sorted(set(defaults) - set(options)):
        problems.append("%s: %s is in defaults/main.yml but not in meta/argument_specs.yml" % (name, key))
    for key in sorted(set(options) - set(defaults)):
        if options[key].get("required"):
            continue
        problems.append("%s: %s is in meta/argument_specs.yml but not in defaults/main.yml" % (name, key))
    for key in sorted(set(options) & set(defaults)):
        spec_default = options[key].get("default")
        if spec_default != defaults[key]:
            problems.append(
                "%s: %s default differs: argument_specs has %r, defaults/main.yml has %r"
                % (name, key, spec_default, defaults[key])
            )
        if not key.startswith(name + "_"):
            problems.append("%s: %s does not carry the role prefix %s_" % (name, key, name))
    return problems


def main():
    roles_dir = os.path.join(TOP, "roles")
    problems = []
    roles = sorted(d for d in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, d)))
    for role in roles:
        problems.extend(check_role(os.path.join(roles_dir, role)))
    for line in problems:
        print("argument_specs: " + line)
    print("argument_specs: %d role(s) checked, %d problem(s)" % (len(roles), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
