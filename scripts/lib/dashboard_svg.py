"""The dashboard's main daemon panels drawn from a real run's scrapes (dashboard_run.py) as one SVG.

Each panel is one of docs/dashboards/podsweep.json (its title is read from there, so a panel
renamed or dropped there fails here) and is computed from the scraped samples with the arithmetic
of its query: `sum by`/`max by`/`min by` over the series, `rate(...[$__rate_interval])` as the
increase over the last four scrapes (what $__rate_interval is at this scrape interval) divided by
their time span, `increase(...[5m])` as the increase since the sample 5 minutes earlier (or the
first one). Not Prometheus itself: its extrapolation at a window's edges is left out.

Usage: python3 scripts/lib/dashboard_svg.py RUN_DIR DASHBOARD.json OUT.svg | scripts/stamp > OUT.jsonl
  (RUN_DIR holds scrapes.jsonl and run.json; the picture and the JSON line name the commit it is
  rendered at, the daemon's build, the run's dates and the API server.) Standard library only."""

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from xml.sax.saxutils import escape

SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
FAIL = {"forbidden", "throttled", "server_error", "transport", "other"}
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f"]
W, PW, PH, GAP, TOP = 1260, 600, 270, 20, 92


def parse(text):
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SERIES.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def group(samples, name, by, where=lambda lb: True, how=sum):
    acc = {}
    for n, lb, v in samples:
        if n == name and where(lb):
            acc.setdefault(tuple(lb.get(k, "") for k in by), []).append(v)
    return {k: how(vs) for k, vs in acc.items()}


def series_over(scrapes, f):
    """{key: [(t, value)]} from f(samples) -> {key: value} at each scrape."""
    out = {}
    for t, samples in scrapes:
        for k, v in f(samples).items():
            out.setdefault(k, []).append((t, v))
    return out


def windowed(scrapes, name, by, where, back, per_second):
    """Per scrape: the increase of the counters (name, where) over `back` scrapes, summed by `by`."""
    out = {}
    for i, (t, samples) in enumerate(scrapes):
        j = max(0, i - back)
        if j == i:
            continue
        t0, old = scrapes[j]
        before = {(n, tuple(sorted(lb.items()))): v for n, lb, v in old if n == name and where(lb)}
        acc = {}
        for n, lb, v in samples:
            if n != name or not where(lb):
                continue
            prev = before.get((n, tuple(sorted(lb.items()))), 0.0)
            inc = v - prev if v >= prev else v  # a counter reset
            key = tuple(lb.get(k, "") for k in by)
            acc[key] = acc.get(key, 0.0) + inc
        for k, v in acc.items():
            out.setdefault(k, []).append((t, v / (t - t0) if per_second else v))
    return out


def nice(v):
    if v <= 0:
        return 1.0
    for e in range(-3, 7):
        for m in (1, 2, 4, 6, 8):
            c = m * 10 ** e
            if c >= v:
                return c
    return v


def panel_svg(x, y, title, lines, t0, t1, unit, kind="lines"):
    """lines: [(label, [(t, v)])]."""
    out = [f'<g transform="translate({x},{y})">',
           f'<rect width="{PW}" height="{PH}" rx="4" fill="#181b1f" stroke="#2c3235"/>',
           f'<text x="10" y="20" class="t">{escape(title)}</text>']
    lx, ly, lw, lh = 52, 34, PW - 62, PH - 34 - 80
    if kind == "state":
        rows = lines
        rh = min(26, lh / max(1, len(rows)))
        for r, (label, pts) in enumerate(rows):
            yy = ly + r * rh
            for k, (t, v) in enumerate(pts):
                tn = pts[k + 1][0] if k + 1 < len(pts) else t1
                xx = lx + (t - t0) / (t1 - t0) * lw
                ww = max(0.5, (tn - t) / (t1 - t0) * lw)
                out.append(f'<rect x="{xx:.1f}" y="{yy + 2:.1f}" width="{ww:.1f}" height="{rh - 4:.1f}" '
                           f'fill="{"#37872d" if v >= 1 else "#c4162a"}"/>')
            out.append(f'<text x="{lx + 4}" y="{yy + rh / 2 + 4:.1f}" class="s">{escape(label)}</text>')
    else:
        vmax = nice(max([v for _, pts in lines for _, v in pts] + [0]) * 1.05)
        for k in range(5):
            v = vmax * k / 4
            yy = ly + lh - lh * k / 4
            out.append(f'<line x1="{lx}" x2="{lx + lw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#2c3235"/>')
            txt = f"{v:g}" if v < 1000 else f"{v / 1000:g}k"
            out.append(f'<text x="{lx - 4}" y="{yy + 4:.1f}" class="a" text-anchor="end">{txt}</text>')
        out.append(f'<text x="10" y="{ly + lh / 2:.0f}" class="a" transform="rotate(-90 10 {ly + lh / 2:.0f})" '
                   f'text-anchor="middle">{escape(unit)}</text>')
        for i, (label, pts) in enumerate(lines):
            col = PALETTE[i % len(PALETTE)]
            path = " ".join(f"{lx + (t - t0) / (t1 - t0) * lw:.1f},{ly + lh - v / vmax * lh:.1f}" for t, v in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{col}" stroke-width="1.6"/>')
    span = t1 - t0
    step = 30 if span <= 300 else 60
    for s in range(0, int(span) + 1, step):
        xx = lx + s / span * lw
        out.append(f'<text x="{xx:.1f}" y="{ly + lh + 14}" class="a" text-anchor="middle">{s // 60}:{s % 60:02d}</text>')
    if kind != "state":
        lxp, lyp = lx, ly + lh + 30
        for i, (label, pts) in enumerate(lines):
            col = PALETTE[i % len(PALETTE)]
            last = pts[-1][1] if pts else 0
            peak = max((v for _, v in pts), default=0)
            txt = f"{label} (max {peak:.3g}, last {last:.3g})"
            width = 6 * len(txt) + 22
            if lxp + width > PW - 4:
                lxp, lyp = lx, lyp + 13
            out.append(f'<rect x="{lxp}" y="{lyp - 8}" width="10" height="3" fill="{col}"/>')
            out.append(f'<text x="{lxp + 14}" y="{lyp - 3}" class="s">{escape(txt)}</text>')
            lxp += width
    out.append("</g>")
    return out


def main():
    run_dir, dash_path, svg_path = sys.argv[1:4]
    with open(f"{run_dir}/run.json") as f:
        run = json.load(f)
    with open(dash_path) as f:
        dash = json.load(f)
    titles = {p["title"] for p in dash["panels"]}
    scrapes = []
    with open(f"{run_dir}/scrapes.jsonl") as f:
        for line in f:
            d = json.loads(line)
            scrapes.append((d["t"], parse(d["text"])))
    t_start = scrapes[0][0]
    scrapes = [(t - t_start, s) for t, s in scrapes]
    t0, t1 = 0.0, scrapes[-1][0]
    rate_back = 4  # $__rate_interval: four scrape intervals
    fiveminutes = max(1, round(300 / run["scrape_every_s"]))
    ns = lambda k: k[-1] if k[-1] else "?"  # noqa: E731

    def lab(d, f=lambda k: "/".join(x for x in k if x) or "all"):
        return sorted(((f(k), pts) for k, pts in d.items()), key=lambda x: x[0])

    panels = [
        ("Leaders per scope", "leaders", lab(series_over(scrapes, lambda s: group(s, "podsweep_leader", ("context", "namespace")))), "lines"),
        ("Health per scope", "", lab(series_over(scrapes, lambda s: group(s, "podsweep_healthy", ("context", "namespace"), how=min))), "state"),
        ("DELETE outcomes by class", "DELETEs/s", lab(windowed(scrapes, "podsweep_delete_outcomes_total", ("outcome",),
                                                               lambda lb: True, rate_back, True)), "lines"),
        ("Drain rate (accepted DELETEs per second)", "DELETEs/s",
         lab(windowed(scrapes, "podsweep_delete_outcomes_total", ("context", "namespace"),
                      lambda lb: lb.get("outcome") == "accepted", rate_back, True)), "lines"),
        ("Due / backlog", "pods",
         [(f"due {ns(k)}", p) for k, p in sorted(series_over(scrapes, lambda s: group(s, "podsweep_due_pods", ("context", "namespace"))).items())]
         + [(f"in flight {ns(k)}", p) for k, p in sorted(series_over(scrapes, lambda s: group(s, "podsweep_inflight_deletes", ("context", "namespace"))).items())
            if any(v for _, v in p)], "lines"),
        ("Oldest overdue pod", "seconds",
         [(ns(k), p) for k, p in sorted(series_over(scrapes, lambda s: group(s, "podsweep_oldest_overdue_seconds", ("context", "namespace"), how=max)).items())], "lines"),
        ("Pauses with cause", "seconds",
         [(f"{k[2]} {ns(k[:2])}", p) for k, p in sorted(series_over(scrapes, lambda s: group(
             s, "podsweep_pause_seconds", ("context", "namespace", "reason"), how=max)).items())
          if any(v > 0 for _, v in p)], "lines"),
        ("Failures by class", "per 5 min",
         [(f"{k[2]} {ns(k[:2])}", p) for k, p in sorted(windowed(scrapes, "podsweep_delete_outcomes_total", ("context", "namespace", "outcome"),
                                                                  lambda lb: lb.get("outcome") in FAIL, fiveminutes, False).items())
          if any(v > 0 for _, v in p)]
         + [(f"watch errors {ns(k)}", p) for k, p in sorted(windowed(scrapes, "podsweep_watch_errors_total", ("context", "namespace"),
                                                                      lambda lb: True, fiveminutes, False).items())
            if any(v > 0 for _, v in p)]
         + [(f"restarts {ns(k)}", p) for k, p in sorted(windowed(scrapes, "podsweep_restarts_total", ("context", "namespace"),
                                                                  lambda lb: True, fiveminutes, False).items())
            if any(v > 0 for _, v in p)], "lines"),
    ]
    missing = [p[0] for p in panels if p[0] not in titles]
    if missing:
        sys.exit(f"dashboard_svg: panels not in {dash_path}: {missing}")
    commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short=12", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    rows = (len(panels) + 1) // 2
    height = TOP + rows * (PH + GAP) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" '
           'font-family="DejaVu Sans, Arial, sans-serif">',
           '<style>.t{fill:#d8d9da;font-size:14px;font-weight:bold}.s{fill:#c7d0d9;font-size:10px}'
           '.a{fill:#8e8e8e;font-size:10px}.h{fill:#d8d9da;font-size:18px;font-weight:bold}</style>',
           f'<rect width="{W}" height="{height}" fill="#111217"/>',
           '<text x="20" y="30" class="h">podsweep dashboard: the daemon\'s main panels, from a real run</text>',
           f'<text x="20" y="52" class="s">{escape(run["daemon"])} (build of commit {escape(run.get("daemon_commit", "?"))}), '
           f'--single-server, on {escape(run["api_server"])} (real, loopback); run {escape(run["started"])} to '
           f'{escape(run["ended"])}; /metrics scraped every {run["scrape_every_s"]:g} s; rendered at commit {escape(commit)}</text>',
           f'<text x="20" y="70" class="s">dash-ok: a driver pod terminates every 3 s; dash-burst: '
           f'{run["pods_created"]["dash-burst"]} pods at {escape(run["burst_at"][11:19])} (rateLimit.qps 5); dash-forbidden: '
           f'{run["forbidden_pods"]} pods, no RBAC delete (403); kube-apiserver restarted at '
           f'{escape((run.get("api_restarted") or "-")[11:19])}. Time axis: m:ss since the first scrape.</text>']
    for i, (title, unit, lines, kind) in enumerate(panels):
        x = 20 + (i % 2) * (PW + GAP)
        y = TOP + (i // 2) * (PH + GAP)
        out += panel_svg(x, y, title, lines, t0, t1, unit, kind)
    out.append("</svg>")
    with open(svg_path, "w") as f:
        f.write("\n".join(out) + "\n")
    def at(t):
        return round(t, 1)

    series = {}
    for title, _, lines, kind in panels:
        series[title] = {}
        for label, pts in lines:
            nonzero = [t for t, v in pts if v > 0]
            row = {"max": round(max((v for _, v in pts), default=0), 3), "last": round(pts[-1][1], 3) if pts else 0}
            if kind == "state":
                row["unhealthy_from_s"] = next((at(t) for t, v in pts if v < 1), None)
            elif nonzero:
                row.update({"first_nonzero_s": at(nonzero[0]), "last_nonzero_s": at(nonzero[-1]),
                            "max_at_s": at(max(pts, key=lambda p: p[1])[0])})
            series[title][label] = row

    def since(iso_time):
        if not iso_time:
            return None
        ts = datetime.strptime(iso_time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        return at(ts - t_start)

    conf = run.get("conf", {})
    line = {"what": "dashboard picture", "svg": os.path.basename(svg_path), "commit": commit,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "api_server": run["api_server"], "daemon": run["daemon"], "daemon_commit": run.get("daemon_commit"),
            "run_started": run["started"], "run_ended": run["ended"], "scrapes": len(scrapes),
            "scrape_every_s": run["scrape_every_s"], "pods_created": run["pods_created"],
            "audit_deletes": run["audit_deletes"], "forbidden_pods": run["forbidden_pods"],
            "burst_at_s": since(run.get("burst_at")), "api_restarted_s": since(run.get("api_restarted")),
            "rate_limit_qps": float(conf.get("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps", "nan")),
            "forbidden_retry_interval": conf.get("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.forbidden.retryInterval"),
            "panels": series}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
