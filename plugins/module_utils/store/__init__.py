# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Floor 4: store.

The model store: a revision's manifest (files, sizes, sha256, the gate's model input), built on the
store host, and the fetch of a revision onto a serving host (resumed, verified, published atomically).

May import: knowledge, formats, clients, converters, probes. Nothing here imports a private name (``_x``) of another file, or a floor above.
(tests/unit/plugins/module_utils/test_layers.py checks both.)
"""
