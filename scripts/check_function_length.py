"""List every function and class in plugins/ longer than a limit; exit 1 when there is one.

A unit's length is its lines from ``def``/``class`` to its last line (docstring, comments and
blank lines inside it included; decorators not). Nested functions and methods are units of their
own, and count in the unit around them too. Files are read with Python's ast module, never run.

    python3 scripts/check_function_length.py [--max N] [PATH ...]

PATH: files or folders (default: plugins/ of this repository, all its folders). N: 150 unless
given (the limit of issue 23: a rule, a check or a helper fits on a screen or two).
"""

import argparse
import ast
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LIMIT = 150
_UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def python_files(paths):
    """The .py files under ``paths`` (files or folders), sorted."""
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            found.extend(os.path.join(folder, name) for name in files if name.endswith(".py"))
    return sorted(found)


def units(tree):
    """(kind, qualified name, first line, length) of each function and class in ``tree``."""
    result = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _UNITS):
                name = prefix + child.name
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                result.append((kind, name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return result


def long_units(paths, limit):
    """[(path, line, kind, name, length)] of the units longer than ``limit`` lines."""
    found = []
    for path in python_files(paths):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
        for kind, name, line, length in units(tree):
            if length > limit:
                found.append((os.path.relpath(path, TOP), line, kind, name, length))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max", type=int, default=LIMIT, help="the most lines a function or class may have")
    parser.add_argument("paths", nargs="*", default=[os.path.join(TOP, "plugins")])
    options = parser.parse_args(argv)
    found = long_units(options.paths, options.max)
    for path, line, kind, name, length in found:
        print("%s:%d: %s %s is %d lines (limit %d)" % (path, line, kind, name, length, options.max))
    files = len(python_files(options.paths))
    if found:
        print("%d function(s)/class(es) longer than %d lines in %d file(s)" % (len(found), options.max, files))
        return 1
    print("no function or class longer than %d lines in %d file(s)" % (options.max, files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
