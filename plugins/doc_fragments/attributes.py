# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes every labfleet.vllm module shares: check mode is supported, there is nothing to
    diff, and it runs on POSIX hosts (DOCUMENTATION); READ_ONLY adds what check mode does in a module
    that changes nothing. A module states only where it differs; its keys win over these. Of two
    fragments that set the same key the first listed wins, so a module lists this one last."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
    description: Nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs on any POSIX host it is given.
"""

    # labfleet.vllm.attributes.read_only: a module that changes nothing on any host.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: The module changes nothing; check mode runs it the same way and returns the same result.
"""
