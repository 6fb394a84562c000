# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of the modules that talk to a vLLM (OpenAI-compatible) server (openai_smoke,
    vllm_benchmark); clients/_openai.py client_argument_spec() is their argument spec and
    check_client_options() checks them."""

    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of the server, for example C(http://127.0.0.1:8000); every request goes to a path below it.
    type: str
    required: true
  model:
    description:
      - The served model name the requests ask for (the one C(/v1/models) lists).
    type: str
    required: true
  api_key:
    description:
      - API key of the server (vLLM's C(--api-key) or C(VLLM_API_KEY)); empty for none. Sent as a bearer token,
        never returned; no control characters (it goes into an HTTP header).
    type: str
    default: ""
attributes:
  platform:
    description: Any host that reaches the server's address (usually the GPU host, against its loopback address);
      Python standard library only.
"""
