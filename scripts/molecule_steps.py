# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time the steps of one `molecule test` run from its output.

    molecule test -s S 2>&1 | scripts/molecule_steps.py LOG STEPS

Copies standard input to LOG unchanged, line by line as it comes, and writes STEPS: one line per
step Molecule ran, "<step> <seconds>", in order (a step run twice, such as destroy, is named
"destroy" and "destroy#2"). Molecule announces each step with "[<scenario> > <step>] Executing"
and ends it with "[<scenario> > <step>] Executed: ..."; a step that never ended (the run failed or
was stopped in it) is written with the seconds it had run, and a "!" after its name.
"""

import re
import sys
import time

# "[<scenario> > <step>] Executing" without colours (PY_COLORS=0, as make sets it), "<scenario> ➜ <step>:
# Executing" with them; colour codes are stripped first.
STEP = re.compile(r"(?P<scenario>[\w.-]+)(?: > | \u279c )(?P<step>[a-z_]+)\]?:? (?P<what>Executing$|Executed)")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: molecule_steps.py LOG STEPS\n")
        return 2
    steps = []
    seen = {}
    current = None
    sys.stdin.reconfigure(errors="replace")
    with open(argv[1], "w", encoding="utf-8", errors="replace") as log:
        for line in sys.stdin:
            log.write(line)
            log.flush()
            match = STEP.search(COLOUR.sub("", line).rstrip())
            if not match or match.group("step") == "discovery":
                continue
            now = time.monotonic()
            if match.group("what") == "Executing":
                name = match.group("step")
                seen[name] = seen.get(name, 0) + 1
                if seen[name] > 1:
                    name = "%s#%d" % (name, seen[name])
                current = [name, now, None]
                steps.append(current)
            elif current is not None:
                current[2] = now
                current = None
    end = time.monotonic()
    with open(argv[2], "w", encoding="utf-8") as out:
        for name, start, stop in steps:
            out.write("%s%s %d\n" % (name, "" if stop is not None else "!", round((stop or end) - start)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
