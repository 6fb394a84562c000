"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test bootstraps pip into each sanity-test virtualenv with a get-pip.py it downloads from
ci-files.testing.ansible.com, a host these machines cannot reach. This does the same with what
Python already ships: `ensurepip` installs the bundled pip, which then installs the exact
packages ansible-test asked for (pip==<version> and friends) from the package index.
Arguments are get-pip.py's: pip options and requirement specifiers.
"""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
