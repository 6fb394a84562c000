# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.benchmark_chart module instead.
"""The benchmark chart of one host: from vllm_benchmark's result documents (this run's and each
instance's baseline), three panels against concurrency -

1. time to first token, p50 (line) and p90 (dotted), in milliseconds;
2. output tokens/s of one request (p50: the decode speed), with the roofline's bound - memory
   bandwidth / weight bytes per GPU - as a horizontal line and the measured share of it at
   concurrency 1;
3. aggregate output tokens/s of all requests at once.

This run is drawn solid, the baseline dashed in the same colour. series() is pure (what is drawn,
checked by the unit tests); render() draws it with the matplotlib it is given (the Agg backend,
no display) and returns the PNG's bytes. PNG output carries no date, so the same figures give the
same bytes.

What a vllm_benchmark result cannot hold is refused with ChartError naming the field, before any
drawing: more than MAX_LEVELS levels in a document, a concurrency above MAX_CONCURRENCY (the
module's own bounds), more than MAX_INSTANCES instances, and a figure whose size, in the unit drawn
(ms, tokens/s), is beyond MAX_FIGURE (it would overflow to infinity once converted or scaled for
the axis). Text (title, instance names, dates) is drawn as written: a '$' is escaped, so matplotlib
never reads it as TeX mathtext, and long text is cut to MAX_TEXT characters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import math

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._bench import MAX_CONCURRENCY, MAX_LEVELS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Figure size (inches) and resolution: 1500 x 480 pixels.
FIGSIZE = (15.0, 4.8)
DPI = 100
COLOURS = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83")
# The most instances one chart draws (one per GPU of a host at most), the largest figure drawn
# (ms or tokens/s: about 30 years, or far beyond any GPU) and the longest text kept.
MAX_INSTANCES = 16
MAX_FIGURE = 1e12
MAX_TEXT = 200


class ChartError(Exception):
    """Input the chart cannot be drawn from (the message names the field)."""


def _finite(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _drawable(value, where, unit, scale=1.0):
    """``value`` x ``scale`` when it is a finite number; None when it is missing or not a number (left
    out, NaN and infinities too); ChartError naming ``where`` when it is too large to draw (beyond
    MAX_FIGURE ``unit`` once scaled)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        return None
    if abs(value) > MAX_FIGURE / scale:
        raise ChartError("%s is %s; the chart draws figures of at most %g %s: the document is damaged, benchmark "
                         "again" % (where, "%g" % value if isinstance(value, float) or abs(value) < 1e300 else
                                    "an integer of %d bits" % value.bit_length(), MAX_FIGURE, unit))
    return float(value) * scale


def plain_text(text):
    """``text`` as matplotlib draws it literally: every '$' escaped (no TeX mathtext), at most MAX_TEXT characters."""
    text = str(text)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT - 3] + "..."
    return text.replace("$", "\\$")


def _points(document, metric, stat, where, unit, scale=1.0):
    """[(concurrency, value)] of one metric's statistic over the document's levels (missing values left out)."""
    points = []
    for index, level in enumerate(document["levels"]):
        if not isinstance(level, dict):
            continue
        conc = level.get("concurrency")
        value = _drawable(level[metric].get(stat), "%s.levels[%d].%s.%s" % (where, index, metric, stat), unit,
                          scale) if isinstance(level.get(metric), dict) else None
        if isinstance(conc, int) and not isinstance(conc, bool) and conc > 0 and value is not None:
            points.append((conc, value))
    return sorted(points)


def _check_document(document, where):
    if document is None:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("levels"), list):
        raise ChartError("%s must be a vllm_benchmark result (a dict with levels), got %s"
                         % (where, type(document).__name__))
    if len(document["levels"]) > MAX_LEVELS:
        raise ChartError("%s.levels has %d entries; a vllm_benchmark result has at most %d concurrency levels: "
                         "chart a result of at most %d" % (where, len(document["levels"]), MAX_LEVELS, MAX_LEVELS))
    for index, level in enumerate(document["levels"]):
        conc = level.get("concurrency") if isinstance(level, dict) else None
        if isinstance(conc, int) and not isinstance(conc, bool) and conc > MAX_CONCURRENCY:
            raise ChartError("%s.levels[%d].concurrency must be an integer from 1 to %d (vllm_benchmark's "
                             "concurrency), got %s" % (where, index, MAX_CONCURRENCY,
                                                       conc if conc < 10 ** 30 else "one of %d bits" % conc.bit_length()))
    return document


def series(instances):
    """What the chart draws: {"panels": [ttft, request_tok_s, aggregate_tok_s], "concurrency": sorted
    levels}. Each panel holds lines {label, colour, style ("now"/"baseline"), stat, points}; the second
    panel also ``rooflines`` [{label, colour, bound_tok_s, share_pct}]."""
    if not isinstance(instances, list) or not instances:
        raise ChartError("instances must be a non-empty list of {name, benchmark, baseline}")
    if len(instances) > MAX_INSTANCES:
        raise ChartError("instances has %d entries; the chart draws at most %d (one per GPU of a host): chart "
                         "fewer instances" % (len(instances), MAX_INSTANCES))
    panels = [
        {"key": "ttft", "title": "Time to first token", "ylabel": "ms", "lines": []},
        {"key": "request_tok_s", "title": "Output tokens/s per request (decode)", "ylabel": "tokens/s",
         "lines": [], "rooflines": []},
        {"key": "aggregate_tok_s", "title": "Aggregate output tokens/s", "ylabel": "tokens/s", "lines": []},
    ]
    levels = set()
    for index, item in enumerate(instances):
        if not isinstance(item, dict):
            raise ChartError("instances[%d] must be a dict {name, benchmark, baseline}" % index)
        name = plain_text(item.get("name") or "instance %d" % (index + 1))
        colour = COLOURS[index % len(COLOURS)]
        now = _check_document(item.get("benchmark"), "instances[%d].benchmark" % index)
        if now is None:
            raise ChartError("instances[%d].benchmark is missing" % index)
        base = _check_document(item.get("baseline") or None, "instances[%d].baseline" % index)
        for document, style in ((now, "now"), (base, "baseline")):
            if document is not None:
                part = "benchmark" if style == "now" else "baseline"
                levels.update(_add_lines(panels, document, "instances[%d].%s" % (index, part), name, colour, style))
        roof = _roofline(now.get("roofline"), "instances[%d].benchmark.roofline" % index, name, colour)
        if roof:
            panels[1]["rooflines"].append(roof)
    return {"panels": panels, "concurrency": sorted(levels)}


def _add_lines(panels, document, where, name, colour, style):
    """Add one document's lines to the three panels; returns the concurrency levels of its TTFT line."""
    when = plain_text(document.get("measured_at") or "")
    label = "%s %s%s" % (name, "now" if style == "now" else "baseline", " (%s)" % when if when else "")
    ttft = _points(document, "ttft_s", "p50", where, "ms", 1000.0)
    panels[0]["lines"].append({"label": label + " p50", "colour": colour, "style": style, "stat": "p50",
                               "points": ttft})
    panels[0]["lines"].append({"label": label + " p90", "colour": colour, "style": style, "stat": "p90",
                               "points": _points(document, "ttft_s", "p90", where, "ms", 1000.0)})
    panels[1]["lines"].append({"label": label, "colour": colour, "style": style, "stat": "p50",
                               "points": _points(document, "request_tok_s", "p50", where, "tokens/s")})
    panels[2]["lines"].append({"label": label, "colour": colour, "style": style, "stat": "level",
                               "points": _points(document, "aggregate_tok_s", "level", where, "tokens/s")})
    return [c for c, _v in ttft]


def _roofline(roof, where, name, colour):
    """The roofline entry of one instance's result, or None without a bound."""
    roof = roof if isinstance(roof, dict) else {}
    bound = _drawable(roof.get("bound_tok_s"), where + ".bound_tok_s", "tokens/s")
    if not bound:
        return None
    share = _finite(roof.get("share_pct"))
    share = share if share is not None and abs(share) <= MAX_FIGURE else None
    return {"label": "%s roofline %.1f tok/s%s" % (name, bound, ", measured %.0f %%" % share if share is not None
                                                   else ""),
            "colour": colour, "bound_tok_s": bound, "share_pct": share}


def render(data, plt, title=""):
    """The PNG bytes of series() ``data``, drawn with matplotlib.pyplot ``plt`` (Agg backend)."""
    with plt.rc_context({"text.usetex": False}):
        return _draw(data, plt, title)


def _draw(data, plt, title):
    figure, axes = plt.subplots(1, 3, figsize=FIGSIZE, dpi=DPI)
    try:
        ticks = data["concurrency"]
        for ax, panel in zip(axes, data["panels"]):
            for line in panel["lines"]:
                if not line["points"]:
                    continue
                xs = [p[0] for p in line["points"]]
                ys = [p[1] for p in line["points"]]
                dash = "-" if line["style"] == "now" else "--"
                if line["stat"] == "p90":
                    dash = ":" if line["style"] == "now" else (0, (1, 3))
                ax.plot(xs, ys, linestyle=dash, marker="o" if line["stat"] != "p90" else None, color=line["colour"],
                        alpha=1.0 if line["style"] == "now" else 0.55, label=line["label"])
            for roof in panel.get("rooflines", []):
                ax.axhline(roof["bound_tok_s"], color=roof["colour"], linestyle="-.", linewidth=1.0,
                           label=roof["label"])
            if ticks:
                ax.set_xscale("log", base=2)
                ax.set_xticks(ticks)
                ax.set_xticklabels([str(t) for t in ticks])
            ax.set_xlabel("concurrency (requests at once)")
            ax.set_ylabel(panel["ylabel"])
            ax.set_title(panel["title"])
            # Room above the highest line or roofline, so neither sits on the frame under the legend.
            highest = [p[1] for line in panel["lines"] for p in line["points"]]
            highest += [roof["bound_tok_s"] for roof in panel.get("rooflines", [])]
            ax.set_ylim(bottom=0, top=max(highest) * 1.25 if highest and max(highest) > 0 else None)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
        if title:
            figure.suptitle(plain_text(title))
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png", metadata={"Software": None})
        return out.getvalue()
    finally:
        plt.close(figure)


def png_size(data):
    """(width, height) from a PNG's IHDR chunk; ChartError when ``data`` is not a PNG."""
    if not isinstance(data, bytes) or len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ChartError("not a PNG image")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
