"""Fill, check and list the model store, outside Ansible (on the store host).

    python3 scripts/model-store.py add SRC --store ROOT --name N --revision R [--rehash] [--force]
    python3 scripts/model-store.py verify --store ROOT --name N --revision R [--full]
    python3 scripts/model-store.py list --store ROOT

The same code as the labfleet.vllm.model_manifest module (plugins/module_utils/store/_manifest.py):
``add`` copies SRC into ROOT/N/R through a temporary sibling, writes labfleet-manifest.json and renames
it into place (a re-run changes nothing); ``verify`` checks every file against the manifest (sizes, and
sha256 of the files whose size or mtime changed, or of all with --full); ``list`` shows the revisions.
Exit status 1 with a message on error or on a mismatch.
"""

import argparse
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# collections/ansible_collections/labfleet/vllm is a link to the checkout.
sys.path.insert(0, os.path.join(TOP, "collections"))

from ansible_collections.labfleet.vllm.plugins.module_utils.store import _manifest  # noqa: E402


def _size(count):
    return "%.2f GB" % (count / 1e9) if count >= 1e9 else "%.1f MB" % (count / 1e6)


def _rate(hashed, seconds):
    if not hashed:
        return "nothing hashed (sizes and mtimes unchanged)"
    return "hashed %s in %.2f s (%.2f GB/s)" % (_size(hashed), seconds, hashed / 1e9 / max(seconds, 1e-6))


def add(args, out):
    path = os.path.join(args.store, args.name, args.revision)
    result = _manifest.ensure_revision(path, name=args.name, revision=args.revision, src=args.src,
                                       rehash=args.rehash, force=args.force)
    out.write("%s %s/%s: %d files, %s, manifest sha256 %s; %s\n" % (
        "added" if result["changed"] else "unchanged", args.name, args.revision, result["files"],
        _size(result["total_bytes"]), result["manifest_sha256"], _rate(result["hashed_bytes"], result["seconds"])))
    return 0


def verify(args, out):
    path = os.path.join(args.store, args.name, args.revision)
    result = _manifest.verify_revision(path, full=args.full)
    problems = [("missing", result["missing"]), ("damaged (size or sha256)", result["mismatched"]),
                ("not in the manifest", result["extra"])]
    bad = [(what, paths) for what, paths in problems if paths]
    out.write("%s/%s: %d files, %s, manifest sha256 %s; %s\n" % (
        args.name, args.revision, result["files"], _size(result["total_bytes"]), result["manifest_sha256"],
        _rate(result["hashed_bytes"], result["seconds"])))
    for what, paths in bad:
        out.write("  %s: %s\n" % (what, ", ".join(paths)))
    if bad:
        out.write("fix: copy the right files back (or add the model again as a new revision)\n")
        return 1
    out.write("  all files match the manifest\n")
    return 0


def list_revisions(args, out):
    rows = _manifest.list_store(args.store)
    for row in rows:
        if "error" in row:
            out.write("%s/%s: manifest not usable: %s\n" % (row["name"], row["revision"], row["error"]))
            continue
        out.write("%s/%s: %d files, %s, sha256 %s, created %s%s\n" % (
            row["name"], row["revision"], row["files"], _size(row["total_bytes"]), row["manifest_sha256"][:16],
            row["created"], ", converted from %s" % row["source"] if row["source"] else ""))
    if not rows:
        out.write("no revisions in %s\n" % args.store)
    return 0


def main(argv=None, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("add", help="add a model directory to the store as NAME/REVISION")
    one.add_argument("src", help="the model directory to add")
    one.set_defaults(run=add)
    two = commands.add_parser("verify", help="check a revision's files against its manifest")
    two.add_argument("--full", action="store_true", help="hash every file (not only those whose size or mtime changed)")
    two.set_defaults(run=verify)
    for sub in (one, two):
        sub.add_argument("--store", required=True, help="the store's root directory")
        sub.add_argument("--name", required=True, help="the model's name in the store")
        sub.add_argument("--revision", required=True, help="the revision")
    one.add_argument("--rehash", action="store_true", help="hash every file again")
    one.add_argument("--force", action="store_true", help="replace a revision that holds other files")
    three = commands.add_parser("list", help="list the store's revisions")
    three.add_argument("--store", required=True, help="the store's root directory")
    three.set_defaults(run=list_revisions)
    args = parser.parse_args(argv)
    try:
        return args.run(args, out)
    except (_manifest.StoreError, OSError) as exc:
        err.write("model-store: %s\n" % exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
