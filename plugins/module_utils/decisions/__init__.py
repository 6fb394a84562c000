# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Floor 4: decisions.

The gate (rules over the facts and the request), vLLM's own startup checks, the plan of a host, the
driver's package plan. Pure functions of facts and a request.

May import: knowledge, formats, clients, converters, probes. Nothing here imports a private name (``_x``) of another file, or a floor above.
(tests/unit/plugins/module_utils/test_layers.py checks both.)
"""
