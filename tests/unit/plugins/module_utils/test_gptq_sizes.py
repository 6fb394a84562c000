# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_gptq.repacked_tensor_bytes, GROUP_SIZES and EXPECTED_ERROR (what the gate imports)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq


def test_group_sizes():
    assert _gptq.GROUP_SIZES == (16, 32, 64, 128)


@pytest.mark.parametrize("group", [16, 32, 64, 128])
def test_bytes_by_hand(group):
    n, k = 4096, 14336
    groups = k // group
    expected = (k // 8) * n * 4 + groups * (n // 8) * 4 + groups * n * 2 + k * 4
    assert _gptq.repacked_tensor_bytes(n, k, group) == expected


def test_llama70b_layer_group32_bits_per_weight():
    # one 8192 x 28672 down_proj at group 32: 4 bits + (16 + 4/8 * 4 ... ) per group of 32
    n, k = 8192, 28672
    total = _gptq.repacked_tensor_bytes(n, k, 32)
    assert total == k * n // 2 + (k // 32) * (n // 8) * 4 + (k // 32) * n * 2 + k * 4
    bits = total * 8.0 / (n * k)
    assert 4.62 < bits < 4.63   # 4 + 16/32 + 4/32 (zeros) + tiny g_idx


def test_partial_group_counts_as_one():
    assert _gptq.repacked_tensor_bytes(8, 24, 16) == 3 * 8 * 4 + 2 * 1 * 4 + 2 * 8 * 2 + 24 * 4


@pytest.mark.parametrize("args", [(0, 16, 16), (16, -1, 16), (16, 16, 8), (16, 16, 48), (True, 16, 16),
                                  (16.0, 16, 16), (16, "16", 16)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        _gptq.repacked_tensor_bytes(*args)


def test_expected_error_table():
    assert sorted(_gptq.EXPECTED_ERROR) == list(_gptq.GROUP_SIZES)
    for group, entry in _gptq.EXPECTED_ERROR.items():
        assert set(entry) == {"rel_rms", "max_abs_rel", "source"}
        assert entry["source"]
    assert _gptq.EXPECTED_ERROR[16]["rel_rms"] <= 0.067       # issue 15's searched prototype figures
    assert _gptq.EXPECTED_ERROR[32]["rel_rms"] <= 0.079
    figures = [_gptq.EXPECTED_ERROR[g]["rel_rms"] for g in _gptq.GROUP_SIZES]
    assert figures == sorted(figures) and all(0 < f < 0.2 for f in figures)      # larger groups, larger error
    assert all("provisional" not in e["source"] for e in _gptq.EXPECTED_ERROR.values())
