# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Floor 0: knowledge, as data with its sources.

The compatibility policy (driver branches, CUDA, architectures, vLLM releases, quantization), the GPU
model table, vLLM's memory model. Pure facts and the functions that read them.

Imports nothing of the collection outside this package. Nothing here imports a private name (``_x``) of another file, or a floor above.
(tests/unit/plugins/module_utils/test_layers.py checks both.)
"""
