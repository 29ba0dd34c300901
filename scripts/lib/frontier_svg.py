"""The drain bench's frontier as one SVG: drain rate (x) against the neighbour reader's p99 (y).

Reads the JSON lines of `scripts/bench drain` (one per contender and the summary line,
`"system": "frontier"`): the raw client's points, joined in order of rate from the curve's origin
(rate 0 at the raw runs' median idle p99), are the API server's curve; the band above it is the
summary's tolerance (1.1 x the curve); podsweep's runs and stock Kyuubi are marked points.
With a second file (`--before`), its curve and its judged point are drawn too, in grey:
the same bench at another commit.

Usage: python3 scripts/lib/frontier_svg.py OUT.svg RUN.jsonl [--before BEFORE.jsonl]
Standard library only."""

import json
import sys
from xml.sax.saxutils import escape

W, H = 960, 600
LX, LY, LW, LH = 90, 96, 600, 420  # the plot area
INK, GREY, BAND = "#222222", "#9a9a9a", "#d6e4f5"
MARKS = {"podsweep-daemon": "#d62728", "podsweep-default": "#d62728", "stock": "#2ca02c"}
OTHER = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#ff7f0e"]


def load(path):
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                o = json.loads(line)
                if o.get("bench") == "drain":
                    lines.append(o)
    summary = [o for o in lines if o.get("system") == "frontier"]
    if not summary:
        sys.exit(f"frontier_svg: no summary line (\"system\": \"frontier\") in {path}")
    s = summary[-1]
    raw = sorted(((c["deletes_per_s"], c["reader_p99_ms"], c["in_flight"]) for c in s["curve"]
                  if c.get("deletes_per_s") is not None and c.get("reader_p99_ms") is not None))
    return {"summary": s, "raw": raw, "origin": s.get("curve_origin_p99_ms"),
            "contenders": [c for c in s.get("contenders", []) if c.get("deletes_per_s") is not None],
            "stamp": s.get("stamp", {}), "pods": s.get("pods")}


def nice(v):
    for e in range(-1, 6):
        for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
            c = m * 10 ** e
            if c >= v:
                return c
    return v


def curve_points(run):
    pts = [(r, p) for r, p, _ in run["raw"]]
    return ([(0.0, run["origin"])] if run["origin"] is not None else []) + pts


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--before"):
        sys.exit(__doc__)
    out, run = argv[1], load(argv[2])
    before = load(argv[4]) if len(argv) == 5 else None
    runs = [run] + ([before] if before else [])
    xs = [r for x in runs for r, _ in curve_points(x)] + [c["deletes_per_s"] for x in runs for c in x["contenders"]]
    ys = [p for x in runs for _, p in curve_points(x)] + [c["reader_p99_ms"] for x in runs for c in x["contenders"]]
    xmax, ymax = nice(max(xs) * 1.05), nice(max(ys) * 1.1 * 1.05)

    def px(r):
        return LX + r / xmax * LW

    def py(p):
        return LY + LH - p / ymax * LH

    svg = [f'<?xml version="1.0" encoding="UTF-8"?>',
           f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
           f'<rect width="{W}" height="{H}" fill="#ffffff"/>']

    def text(x, y, s, size=12, fill=INK, anchor="start", weight="normal"):
        svg.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
                   f'font-weight="{weight}">{escape(str(s))}</text>')

    s, st = run["summary"], run["stamp"]
    text(20, 30, "The API server's frontier: drain rate against a neighbour's p99", 18, weight="bold")
    text(20, 52, f"scripts/bench drain, {run['pods']} overdue pods per contender, a fresh API server each; "
                 f"commit {st.get('commit', '?')[:7]}, {st.get('date', '?')}, load {st.get('load', {}).get('start', '?')}", 12, "#666666")
    text(20, 70, f"{st.get('api_server', s.get('api_server', '?'))}"[:150], 11, "#666666")
    text(20, 86, s.get("verdict", ""), 12, "#c4162a" if not s.get("pass") else "#37872d")

    # Axes and grid.
    for k in range(6):
        x = xmax * k / 5
        svg.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{LY}" y2="{LY + LH}" stroke="#eeeeee"/>')
        text(px(x), LY + LH + 18, f"{x:g}", 11, anchor="middle")
        y = ymax * k / 5
        svg.append(f'<line x1="{LX}" x2="{LX + LW}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eeeeee"/>')
        text(LX - 6, py(y) + 4, f"{y:g}", 11, anchor="end")
    svg.append(f'<rect x="{LX}" y="{LY}" width="{LW}" height="{LH}" fill="none" stroke="{INK}"/>')
    text(LX + LW / 2, LY + LH + 40, "drain rate: pods deleted per second (audit log)", 12, anchor="middle")
    svg.append(f'<text x="24" y="{LY + LH / 2:.0f}" font-size="12" fill="{INK}" text-anchor="middle" '
               f'transform="rotate(-90 24 {LY + LH / 2:.0f})">neighbour reader GET p99, ms</text>')

    def poly(pts, colour, width=2.0, dash=None, fill=None):
        d = " ".join(f"{px(r):.1f},{py(p):.1f}" for r, p in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        if fill:
            svg.append(f'<polygon points="{d}" fill="{fill}" stroke="none"/>')
        else:
            svg.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="{width}"{extra}/>')

    # The tolerance band of the run: from the curve to 1.1 x the curve.
    cur = curve_points(run)
    tol = s.get("judged_p99_over_curve_max", 1.1)
    band = cur + [(r, p * tol) for r, p in reversed(cur)]
    poly(band, None, fill=BAND)
    if before:
        poly(curve_points(before), GREY, 1.5, "5,4")
        for r, p, n in before["raw"]:
            svg.append(f'<circle cx="{px(r):.1f}" cy="{py(p):.1f}" r="3" fill="{GREY}"/>')
    poly(cur, "#1f77b4", 2.0)
    for r, p, n in run["raw"]:
        svg.append(f'<circle cx="{px(r):.1f}" cy="{py(p):.1f}" r="4" fill="#1f77b4"/>')
        text(px(r) + 6, py(p) - 6, f"{n}", 11, "#1f77b4")

    def mark(c, colour, hollow=False, suffix=""):
        x, y = px(c["deletes_per_s"]), py(c["reader_p99_ms"])
        fill = "#ffffff" if hollow else colour
        if c["label"] == "stock":
            svg.append(f'<rect x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" height="12" fill="{fill}" stroke="{colour}" stroke-width="2"/>')
        else:
            svg.append(f'<path d="M {x:.1f} {y - 8:.1f} L {x + 8:.1f} {y:.1f} L {x:.1f} {y + 8:.1f} L {x - 8:.1f} {y:.1f} Z" '
                       f'fill="{fill}" stroke="{colour}" stroke-width="2"/>')
        text(x + 11, y + 4, f"{c['label']}{suffix}", 11, colour)

    if before:
        for c in before["contenders"]:
            if c["label"] == before["summary"].get("judged", "podsweep-default"):
                mark(c, GREY, hollow=True, suffix=f" before ({before['stamp'].get('commit', '?')[:7]})")
    others = 0
    for c in run["contenders"]:
        colour = MARKS.get(c["label"])
        if colour is None:
            colour = OTHER[others % len(OTHER)]
            others += 1
        mark(c, colour)

    # Legend and the figures the verdict rests on.
    lx, ly = LX + LW + 24, LY + 8
    rows = [("#1f77b4", "raw client, N DELETEs in flight"), (BAND, f"within {tol:g} x the curve")]
    if before:
        rows.append((GREY, f"before: curve and podsweep ({before['stamp'].get('commit', '?')[:7]})"))
    for i, (col, label) in enumerate(rows):
        svg.append(f'<rect x="{lx}" y="{ly + i * 20 - 10}" width="14" height="12" fill="{col}" stroke="{GREY}" stroke-width="0.5"/>')
        text(lx + 20, ly + i * 20, label, 11)
    y0 = ly + len(rows) * 20 + 14
    facts = [("raw best", f"{s.get('raw_best_deletes_per_s') or 0:.1f}/s at {s.get('raw_best_in_flight')} in flight")]
    for c in run["contenders"]:
        ratio = c.get("p99_over_curve")
        facts.append((c["label"], f"{c['deletes_per_s']:.1f}/s, p99 {c['reader_p99_ms']:.1f} ms"
                      + (f" = {ratio:.2f} x curve" if ratio is not None else "")))
    for i, (k, v) in enumerate(facts):
        text(lx, y0 + i * 34, k, 11, weight="bold")
        text(lx, y0 + i * 34 + 15, v, 11)
    svg.append("</svg>")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main(sys.argv)
