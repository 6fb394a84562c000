"""Convert an NVFP4 checkpoint (ModelOpt or compressed-tensors) to FP16, outside Ansible.

    python3 scripts/nvfp4_dequantize.py SRC DEST [--layout auto] [--max-shard-size 5GB] [--check]

The same code as the labfleet.vllm.nvfp4_dequantize module (plugins/module_utils/formats/_nvfp4.py);
needs numpy (python3-numpy). Prints the result as JSON; exit status 1 with a message on error.
"""

import argparse
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# collections/ansible_collections/labfleet/vllm is a link to the checkout.
sys.path.insert(0, os.path.join(TOP, "collections"))

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="NVFP4 checkpoint directory")
    parser.add_argument("dest", help="FP16 output directory (must not exist, be empty, or be an earlier output)")
    parser.add_argument("--layout", default="auto", choices=list(_nvfp4.LAYOUTS))
    parser.add_argument("--max-shard-size", default="5GB", help="largest output shard (default 5GB)")
    parser.add_argument("--check", action="store_true", help="report what would be done, write nothing")
    args = parser.parse_args(argv)
    return _nvfp4.run_script("nvfp4_dequantize", lambda: _nvfp4.convert_checkpoint(
        args.src, args.dest, layout=args.layout, max_shard_size=args.max_shard_size, check_mode=args.check),
        sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
