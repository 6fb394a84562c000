# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""benchmark_chart: what the chart draws (_chart.series), that the file is a valid PNG of the stated size
drawn the same way twice, and the module's writes, check mode and refusals."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct
import zlib
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _chart as C
from ansible_collections.labfleet.vllm.plugins.modules import benchmark_chart

plt = pytest.importorskip("matplotlib.pyplot")


def stat(p50, p90):
    return {"p50": p50, "p90": p90, "mean": p50, "min": p50, "max": p90, "count": 3}


def document(scale=1.0, when="2026-12-01T10:00:00Z", roofline=True):
    levels = []
    for conc, ttft, rate, agg in ((1, 0.12, 48.0, 47.0), (8, 0.30, 40.0, 300.0), (32, 0.95, 30.0, 850.0)):
        aggregate = stat(agg * scale, agg * scale * 1.02)
        aggregate["level"] = agg * scale
        levels.append({"concurrency": conc, "runs": 3, "requests": 3 * conc, "failed": 0, "output_tokens": 768 * conc,
                       "wall_s": 10.0, "ttft_s": stat(ttft / scale, ttft * 1.3 / scale),
                       "itl_s": stat(0.02, 0.025), "request_tok_s": stat(rate * scale, rate * scale * 1.05),
                       "aggregate_tok_s": aggregate})
    doc = {"schema": "labfleet.vllm.benchmark/1", "model": "quasar", "levels": levels, "measured_at": when}
    if roofline:
        doc["roofline"] = {"memory_bandwidth_gb_s": 900, "weight_bytes_per_gpu": 8030000000, "bound_tok_s": 112.08,
                           "measured_tok_s": 48.0 * scale, "share_pct": round(4800.0 * scale / 112.08, 1)}
    return doc


INSTANCES = [{"name": "vllm", "benchmark": document(1.1, "2026-12-01T11:00:00Z"), "baseline": document()}]


def png_chunks(data):
    """(type, payload) of every chunk, checking each CRC as a PNG decoder does."""
    assert data[:8] == C.PNG_SIGNATURE
    pos, chunks = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        payload = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + payload) & 0xffffffff == crc, "bad CRC in %r" % kind
        chunks.append((kind, payload))
        pos += 12 + length
    return chunks


def test_series_draws_now_solid_and_the_baseline_dashed_with_the_roofline():
    data = C.series(INSTANCES)
    assert data["concurrency"] == [1, 8, 32]
    ttft, rate, aggregate = data["panels"]
    assert [(l["style"], l["stat"]) for l in ttft["lines"]] == [("now", "p50"), ("now", "p90"),
                                                                ("baseline", "p50"), ("baseline", "p90")]
    assert ttft["lines"][0]["points"] == [(1, pytest.approx(120 / 1.1)), (8, pytest.approx(300 / 1.1)),
                                          (32, pytest.approx(950 / 1.1))]
    assert aggregate["lines"][1]["points"] == [(1, 47.0), (8, 300.0), (32, 850.0)]
    assert rate["rooflines"] == [{"label": "vllm roofline 112.1 tok/s, measured 47 %", "colour": C.COLOURS[0],
                                  "bound_tok_s": 112.08, "share_pct": 47.1}]
    assert "baseline (2026-12-01T10:00:00Z)" in rate["lines"][1]["label"]


def test_series_skips_non_finite_and_missing_values():
    doc = document(roofline=False)
    doc["levels"][1]["ttft_s"]["p50"] = float("nan")
    doc["levels"][2]["aggregate_tok_s"] = None
    doc["levels"].append({"concurrency": True, "ttft_s": stat(1, 2)})
    data = C.series([{"name": "a", "benchmark": doc}])
    assert [c for c, _v in data["panels"][0]["lines"][0]["points"]] == [1, 32]
    assert [c for c, _v in data["panels"][2]["lines"][0]["points"]] == [1, 8]
    assert data["panels"][1]["rooflines"] == [] and len(data["panels"][0]["lines"]) == 2


@pytest.mark.parametrize("instances, message", [
    ([], "non-empty list"),
    ("vllm", "non-empty list"),
    ([3], r"instances\[0\] must be a dict"),
    ([{"name": "a"}], r"instances\[0\].benchmark is missing"),
    ([{"name": "a", "benchmark": {"levels": "x"}}], "must be a vllm_benchmark result"),
    ([{"name": "a", "benchmark": document(), "baseline": [1]}], r"instances\[0\].baseline must be"),
])
def test_series_refuses_what_is_not_a_benchmark(instances, message):
    with pytest.raises(C.ChartError, match=message):
        C.series(instances)


def test_render_is_a_valid_png_of_the_stated_size_and_the_same_each_time():
    png = C.render(C.series(INSTANCES), plt, title="gpu01")
    chunks = png_chunks(png)
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    assert C.png_size(png) == (int(C.FIGSIZE[0] * C.DPI), int(C.FIGSIZE[1] * C.DPI))
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (width, height, depth) == (1500, 480, 8) and colour in (2, 6)
    # Decompressed, the image rows have the stated size (a filter byte, then 3 or 4 bytes a pixel).
    raw = zlib.decompress(b"".join(payload for kind, payload in chunks if kind == b"IDAT"))
    assert len(raw) == height * (1 + width * (4 if colour == 6 else 3))
    # Not blank: many distinct row filters/bytes (lines, text, axes).
    assert len(set(raw)) > 50 and len(png) > 20000
    assert C.render(C.series(INSTANCES), plt, title="gpu01") == png
    assert not [kind for kind, _p in chunks if kind == b"tIME"]


def test_png_size_refuses_what_is_not_a_png():
    with pytest.raises(C.ChartError):
        C.png_size(b"GIF89a" + b"\0" * 30)


class _Exit(Exception):
    pass


def run_module(args, check_mode=False):
    def done(self, **kwargs):
        kwargs.setdefault("failed", False)
        raise _Exit(kwargs)

    def failed(self, **kwargs):
        kwargs["failed"] = True
        raise _Exit(kwargs)

    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), mock.patch.object(basic.AnsibleModule, "exit_json", done), \
            mock.patch.object(basic.AnsibleModule, "fail_json", failed):
        with pytest.raises(_Exit) as caught:
            benchmark_chart.main()
    return caught.value.args[0]


def test_module_writes_once_and_check_mode_writes_nothing(tmp_path):
    dest = tmp_path / "gpu01.png"
    args = {"dest": str(dest), "title": "gpu01", "instances": INSTANCES}
    first = run_module(args, check_mode=True)
    assert first["changed"] is True and not dest.exists()
    first = run_module(args)
    assert first["changed"] is True and first["width"] == 1500 and first["lines"] == 8
    assert dest.read_bytes()[:8] == C.PNG_SIGNATURE and oct(dest.stat().st_mode & 0o777) == "0o644"
    again = run_module(args)
    assert again["changed"] is False and again["bytes"] == dest.stat().st_size
    changed = run_module(dict(args, instances=[dict(INSTANCES[0], baseline=None)]))
    assert changed["changed"] is True and changed["lines"] == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".benchmark-chart-")]


@pytest.mark.parametrize("make, message", [
    (lambda d: {"dest": str(d / "missing" / "x.png"), "instances": INSTANCES}, "does not exist; create it first"),
    (lambda d: {"dest": str(d), "instances": INSTANCES}, "is not a regular file"),
    (lambda d: {"dest": str(d / "x.png"), "instances": [{"name": "a", "benchmark": "nan"}]},
     "instances: instances[0].benchmark must be"),
])
def test_module_refuses_bad_destinations_and_documents(tmp_path, make, message):
    result = run_module(make(tmp_path))
    assert result["failed"] is True and message in result["msg"]
