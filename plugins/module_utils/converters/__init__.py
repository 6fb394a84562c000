# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Floor 2: checkpoint converters.

Turn a checkpoint into another (NVFP4 to GPTQ int4); the sizes of the copies they make.

May import: knowledge, formats, clients. Nothing here imports a private name (``_x``) of another file, or a floor above.
(tests/unit/plugins/module_utils/test_layers.py checks both.)
"""
