"""Record, replay and compare the verdict snapshot of the decision code (test-only; tests/verdicts/README.md).

    python3 scripts/verdict_snapshot.py record [-o OUT] [-- PYTEST_ARGS...]
        Run the unit suite (CI=1: the property tests' fixed examples) with the recorder plugin;
        write every distinct call of the entry points (tests/verdicts/entry_points.py) to OUT.
    python3 scripts/verdict_snapshot.py import-molecule DIR [-o OUT]
        Turn what the Molecule callback wrote under DIR (LABFLEET_VERDICT_DIR) into a snapshot of
        the deploy_gate module's calls.
    python3 scripts/verdict_snapshot.py replay SNAPSHOT... [--show N] [-o OUT]
        Call the current code with every recorded input (through the adapter table) and compare
        each outcome with the recorded one. Exit status 1 when any differs. -o: write the same
        inputs with the current outcomes (a re-baseline, once each change is justified).
    python3 scripts/verdict_snapshot.py compare A B [--show N]
        Two snapshot files: the calls both hold (identical or differing), and those only one holds.

Run it with the project's venv (.venv/bin/python, or `make verdict-snapshot`): record and replay
import the collection and Ansible. Exit status 2 on a usage or file error.
"""

import argparse
import difflib
import os
import subprocess
import sys
import tempfile

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
for _path in (TOP, os.path.join(TOP, "collections")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# pylint: disable=wrong-import-position
from tests.verdicts import codec  # noqa: E402
from tests.verdicts.entry_points import ENTRY_POINTS  # noqa: E402
from tests.verdicts.module_harness import module_view  # noqa: E402

# pytest empties it when a recording starts; its path is part of some recorded inputs.
BASETEMP = os.path.join(tempfile.gettempdir(), "labfleet-verdicts-basetemp")


# ---------------------------------------------------------------------------------------------
# record
# ---------------------------------------------------------------------------------------------


def cmd_record(opts):
    """Run the unit suite with the recorder; the pytest exit status."""
    env = dict(os.environ, CI="1", PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"))
    out = os.path.abspath(opts.output)
    # A fixed --basetemp: tests that pass a tmp_path to an entry point (deploy_gate's copy paths)
    # then record the same inputs on every run (pytest-of-<user>/pytest-<n> would change the keys).
    cmd = [sys.executable, "-m", "pytest", "-p", "tests.verdicts.recorder", "--verdict-record", out,
           "--basetemp", BASETEMP, "-p", "no:cacheprovider", "-q"] + opts.pytest_args
    print("+ CI=1 PYTHONHASHSEED=%s %s" % (env["PYTHONHASHSEED"], " ".join(cmd)), flush=True)
    status = subprocess.call(cmd, cwd=TOP, env=env)
    if status != 0:
        print("record: pytest exited with status %d: the snapshot at %s is of a failing suite" % (status, out))
    return status


# ---------------------------------------------------------------------------------------------
# import-molecule
# ---------------------------------------------------------------------------------------------


def _measured(args, result):
    """What deploy_gate measured on the host ({fp16_copy, gptq_copy}), as far as its verdict shows it.

    The module measures the copies' directories only when its arguments do not give fp16_copy /
    gptq_copy; the verdict keeps the measurement of the serving path it took (serving.fp16_copy or
    serving.gptq_copy). Returns (measured, [what could not be recovered although the plan looked at it]).
    """
    verdict = result.get("verdict") or {}
    serving = verdict.get("serving") or {}
    tried = serving.get("tried") or []
    measured, unknown = {}, []
    if args.get("fp16_copy") is None:
        record = serving.get("fp16_copy")
        if record:
            measured["fp16_copy"] = {"complete": record.get("complete") is True,
                                     "disk_free_bytes": record.get("disk_free_bytes")}
        elif "fp16_fallback" in tried:
            unknown.append("fp16_copy")
    if args.get("gptq_copy") is None:
        record = serving.get("gptq_copy")
        if record:
            measured["gptq_copy"] = {"complete_paths": [record["path"]] if record.get("complete") else [],
                                     "disk_free_bytes": record.get("disk_free_bytes")}
        elif "gptq_repack" in tried:
            unknown.append("gptq_copy")
    return measured, unknown


def molecule_records(directory):
    """(deploy_gate records of the callback's files under ``directory``, not yet deduped; the
    results without the module's invocation, where it did not run)."""
    records, not_run = [], []
    names = sorted(n for n in os.listdir(directory) if n.endswith(".jsonl"))
    for name in names:
        for raw in codec.read_snapshot(os.path.join(directory, name)):
            where = "molecule:%s:%s:%s" % (raw.get("scenario"), raw.get("host"), raw.get("task"))
            if raw.get("args_from") != "invocation":
                not_run.append(where)   # the module did not answer (it did not start, or timed out)
                continue
            result = module_view(raw["result"], raw.get("failed"))
            args = raw["args"]
            if result.get("failed") and not str(result.get("msg", "")).startswith("deploy_gate:") and "task_args" in raw:
                # Refused by AnsibleModule's argument validation: the invocation holds only what passed it.
                args = raw["task_args"]
            measured, unknown = _measured(args, raw["result"])
            inputs = codec.encode({"kwargs": {"module_args": args, "measured": measured}})[0]
            record = {"entry": "deploy_gate", "key": codec.input_key("deploy_gate", inputs), "inputs": inputs,
                      "outcome": {"return": codec.encode(result)[0]}, "calls": 1,
                      "tests": [where],
                      "pinned": {"today": {"$date": raw["date"]}}}
            if unknown:
                record["measured_unknown"] = unknown
            records.append(record)
    return records, not_run


def cmd_import_molecule(opts):
    """Write the snapshot of a Molecule recording directory; 1 when its records conflict."""
    records, not_run = molecule_records(opts.directory)
    for where in not_run:
        print("not a verdict (the module did not answer): %s" % where)
    records, conflicts = codec.merge_records(records)
    codec.write_snapshot(opts.output, records)
    print("%s: %d distinct deploy_gate calls (%d recorded)" % (
        opts.output, len(records), sum(r["calls"] for r in records)))
    for entry, key in conflicts:
        print("CONFLICT: %s %s: the same inputs gave different results" % (entry, key))
    return 1 if conflicts else 0


# ---------------------------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------------------------


def replay_record(record, resolved):
    """(status, current outcome) of one record: status is identical, differ or skipped (outcome: why)."""
    if record.get("unreplayable"):
        return "skipped", record["unreplayable"]
    entry = ENTRY_POINTS.get(record["entry"])
    if entry is None:
        return "skipped", "no entry %r in tests/verdicts/entry_points.py" % record["entry"]
    if record["entry"] not in resolved:
        resolved[record["entry"]] = entry.resolve()[1]
    func = resolved[record["entry"]]
    try:
        inputs = codec.decode(record["inputs"])
        pinned = codec.decode(record.get("pinned") or {})
    except ValueError as exc:
        return "skipped", str(exc)
    try:
        if "args" in inputs:
            result = func(*inputs["args"], **inputs["kwargs"])
        else:
            result = entry.call(func, inputs["kwargs"], pinned)
    except Exception as exc:  # pylint: disable=broad-except
        outcome = codec.encode_outcome(raised=exc)[0]
    else:
        outcome = codec.encode_outcome(returned=result)[0]
    same = codec.canonical(outcome) == codec.canonical(record["outcome"])
    return ("identical" if same else "differ"), outcome


def _diff(old, new, limit=80):
    lines = list(difflib.unified_diff(codec.pretty(old), codec.pretty(new), "recorded", "now", lineterm="", n=2))
    if len(lines) > limit:
        lines = lines[:limit] + ["... (%d more diff lines)" % (len(lines) - limit)]
    return lines


def _table(counts, columns):
    """Print one row per entry point and a total row; counts: {entry: {column: n}}."""
    width = max([len("total")] + [len(e) for e in counts])
    print("%-*s %s" % (width, "entry point", " ".join("%10s" % c for c in columns)))
    totals = dict((c, 0) for c in columns)
    for entry in sorted(counts):
        print("%-*s %s" % (width, entry, " ".join("%10d" % counts[entry].get(c, 0) for c in columns)))
        for c in columns:
            totals[c] += counts[entry].get(c, 0)
    print("%-*s %s" % (width, "total", " ".join("%10d" % totals[c] for c in columns)))
    return totals


def cmd_replay(opts):
    """Replay every record of the snapshots; 1 when any outcome differs."""
    columns = ("identical", "differ", "skipped")
    failed = False
    current = []
    for path in opts.snapshots:
        records = codec.read_snapshot(path)
        counts, shown, resolved = {}, {}, {}
        print("== replay %s (%d records)" % (path, len(records)))
        for record in records:
            status, outcome = replay_record(record, resolved)
            current.append(dict(record, outcome=outcome) if status == "differ" else record)
            counts.setdefault(record["entry"], {}).setdefault(status, 0)
            counts[record["entry"]][status] += 1
            if status == "identical":
                continue
            if shown.get(record["entry"], 0) >= opts.show:
                continue
            shown[record["entry"]] = shown.get(record["entry"], 0) + 1
            print("-- %s %s %s (from %s)" % (status.upper(), record["entry"], record["key"],
                                             ", ".join(record.get("tests") or ["?"])))
            if status == "skipped":
                print("   " + outcome)
            else:
                if record.get("measured_unknown"):
                    print("   note: deploy_gate measured %s on the host and the verdict does not show it"
                          % ", ".join(record["measured_unknown"]))
                print("\n".join(_diff(record["outcome"], outcome)))
        totals = _table(counts, columns)
        print("%s: %d identical, %d differ, %d skipped" % (path, totals["identical"], totals["differ"], totals["skipped"]))
        failed = failed or totals["differ"] > 0
    if opts.output:
        # The same inputs with today's outcomes: `compare` against the old file lists each change, and
        # once every change is justified it is the new baseline (no re-recording of the tests needed).
        codec.write_snapshot(opts.output, current)
        print("wrote %s: %d records with the current outcomes" % (opts.output, len(current)))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------


def cmd_compare(opts):
    """Compare two snapshot files; 1 when they are not the same set of identical verdicts."""
    old = dict(((r["entry"], r["key"]), r) for r in codec.read_snapshot(opts.a))
    new = dict(((r["entry"], r["key"]), r) for r in codec.read_snapshot(opts.b))
    counts, shown = {}, {}
    for ident in sorted(set(old) | set(new)):
        entry = ident[0]
        if ident not in new:
            status = "only_a"
        elif ident not in old:
            status = "only_b"
        elif codec.canonical(old[ident]["outcome"]) == codec.canonical(new[ident]["outcome"]):
            status = "identical"
        else:
            status = "differ"
        counts.setdefault(entry, {}).setdefault(status, 0)
        counts[entry][status] += 1
        if status == "identical" or shown.get((entry, status), 0) >= opts.show:
            continue
        shown[(entry, status)] = shown.get((entry, status), 0) + 1
        rec = old.get(ident) or new.get(ident)
        print("-- %s %s %s (from %s)" % (status.upper(), entry, ident[1], ", ".join(rec.get("tests") or ["?"])))
        if status == "differ":
            print("\n".join(_diff(old[ident]["outcome"], new[ident]["outcome"])))
    print("== compare %s (A) with %s (B)" % (opts.a, opts.b))
    totals = _table(counts, ("identical", "differ", "only_a", "only_b"))
    print("%d in A, %d in B: %d identical, %d differ, %d only in A, %d only in B" % (
        len(old), len(new), totals["identical"], totals["differ"], totals["only_a"], totals["only_b"]))
    return 0 if totals["differ"] == totals["only_a"] == totals["only_b"] == 0 else 1


def main(argv=None):
    """Parse the command line and run one command."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run the unit suite with the recorder")
    rec.add_argument("-o", "--output", default=os.path.join(tempfile.gettempdir(), "verdicts-unit.jsonl.gz"),
                     help="the snapshot to write (.jsonl or .jsonl.gz; default: %(default)s)")
    rec.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (e.g. a test file)")
    mol = sub.add_parser("import-molecule", help="a snapshot of the Molecule callback's recording")
    mol.add_argument("directory", help="LABFLEET_VERDICT_DIR of the Molecule run")
    mol.add_argument("-o", "--output", required=True, help="the snapshot to write")
    rep = sub.add_parser("replay", help="replay snapshots against the current code")
    rep.add_argument("snapshots", nargs="+")
    rep.add_argument("--show", type=int, default=3, help="differences shown per entry point (default 3)")
    rep.add_argument("-o", "--output", help="also write the records with the current outcomes to this snapshot")
    cmp_ = sub.add_parser("compare", help="compare two snapshot files")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--show", type=int, default=3, help="differences shown per entry point and kind (default 3)")
    opts = parser.parse_args(argv)
    handlers = {"record": cmd_record, "import-molecule": cmd_import_molecule, "replay": cmd_replay,
                "compare": cmd_compare}
    try:
        return handlers[opts.command](opts)
    except (OSError, ValueError) as exc:
        print("verdict_snapshot: %s" % exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
