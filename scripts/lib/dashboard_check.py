"""Checks docs/dashboards/podsweep.json (the Grafana dashboard) against promtool and real scrapes.

Every query of the dashboard (each panel target's `expr` and each template variable's
`label_values(SELECTOR, LABEL)`) must:
- parse: Grafana's variables are replaced (`$__rate_interval` by 5m, a dashboard variable by its
  "All" value) and every query is written as a recording rule into a temporary file that
  `promtool check rules` must accept;
- name only series that exist in the real captures of docs/alerts/captures/ (scrapes of the daemon
  and of a patched Kyuubi on a real kube-apiserver, written by AlertRulesSuite): a panel under a
  row whose title starts with "Daemon" is checked against daemon-*.prom, one under a "Kyuubi" row
  against kyuubi-*.prom. Each selector must name its metric (by name or an `__name__` matcher);
  the name must be captured; a `__name__` regex must match a captured name, and each alternative
  of a group of plain words in it (`_deletes_(?:accepted|forbidden)`) must match one on its own;
  each label it matches on must be a label of those series (but `job` and `instance`, which
  Prometheus adds), and each value it compares with (`outcome="accepted"`, each word of
  `outcome=~"forbidden|throttled"`, `!~` too) a captured value; each label of a `by (...)`
  / `on (...)` clause a captured label or one that `label_replace` makes.
A query without any selector fails, and so does a dashboard with no daemon or no Kyuubi query.

Usage: python3 scripts/lib/dashboard_check.py [--promtool PATH] [DASHBOARD.json]
Prints one line per failure and a summary; exit 1 on any failure. Standard library only."""

import glob
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CAPTURES = os.path.join(ROOT, "docs", "alerts", "captures")
SCRAPER_LABELS = {"job", "instance"}
GRAFANA_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
PREFIX = {"daemon": "podsweep_", "kyuubi": "kyuubi_"}
AGGREGATORS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
               "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(r'''\s+|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)'''
                   r'''|(?P<num>[0-9.][0-9a-zA-Z.]*)|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)'''
                   r'''|(?P<op>=~|!~|!=|==|<=|>=|[{}()\[\],=<>+\-*/%^@:])''')
SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
WORDS = re.compile(r'\((?:\?:)?([A-Za-z0-9_]+(?:\|[A-Za-z0-9_]+)+)\)')


def captures():
    """{source: {metric name: {label: set of values}}} from docs/alerts/captures/<source>-*.prom."""
    out = {"daemon": {}, "kyuubi": {}}
    for path in sorted(glob.glob(os.path.join(CAPTURES, "*.prom"))):
        source = os.path.basename(path).split("-", 1)[0]
        if source not in out:
            continue
        with open(path) as f:
            for line in f:
                m = SERIES.match(line)
                if not m or line.startswith("#"):
                    continue
                labels = out[source].setdefault(m.group(1), {})
                for k, v in LABEL.findall(m.group(2) or ""):
                    labels.setdefault(k, set()).add(v)
    return out


def tokens(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind:
            text = m.group(kind)
            if kind == "str":
                text = bytes(text[1:-1], "utf-8").decode("unicode_escape") if text[0] != "`" else text[1:-1]
            out.append((kind, text))
    return out


def analyse(expr):
    """(selectors [(name or None, [(label, op, value)])], grouping labels, label_replace targets)."""
    toks = tokens(expr)
    selectors, grouping, made = [], set(), set()
    depth, replace_depths = 0, []
    i = 0

    def matchers(j):
        """Label matchers from toks[j] == '{'; returns (list, index after '}')."""
        out = []
        j += 1
        while toks[j] != ("op", "}"):
            if toks[j] == ("op", ","):
                j += 1
                continue
            label, op, value = toks[j][1], toks[j + 1][1], toks[j + 2][1]
            out.append((label, op, value))
            j += 3
        return out, j + 1

    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "ident" and text in GROUPING:
            i += 1
            if toks[i] == ("op", "("):
                i += 1
                while toks[i] != ("op", ")"):
                    if toks[i][0] == "ident":
                        grouping.add(toks[i][1])
                    i += 1
                i += 1
            continue
        if kind == "ident" and (nxt == ("op", "(") or text in AGGREGATORS or text in KEYWORDS):
            if text == "label_replace":
                replace_depths.append([depth + 1, False])
            i += 1
            continue
        if kind == "ident":
            if nxt == ("op", "{"):
                ms, i = matchers(i + 1)
            else:
                ms, i = [], i + 1
            selectors.append((text, ms))
            continue
        if (kind, text) == ("op", "{"):
            ms, i = matchers(i)
            selectors.append((None, ms))
            continue
        if (kind, text) == ("op", "["):
            while toks[i] != ("op", "]"):
                i += 1
            i += 1
            continue
        if (kind, text) == ("op", "("):
            depth += 1
        elif (kind, text) == ("op", ")"):
            if replace_depths and replace_depths[-1][0] == depth:
                replace_depths.pop()
            depth -= 1
        elif kind == "str" and replace_depths and replace_depths[-1][0] == depth and not replace_depths[-1][1] \
                and toks[i - 1] == ("op", ","):
            # label_replace(v, "dst", "replacement", "src", "regex"): the first string argument is dst.
            made.add(text)
            replace_depths[-1][1] = True
        i += 1
    return selectors, grouping, made


def expansions(regex):
    """The regex with each group of plain words `(?:a|b)` (or a whole `a|b`) taken one word at a time."""
    if re.fullmatch(r"[A-Za-z0-9_]+(?:\|[A-Za-z0-9_]+)+", regex):
        return regex.split("|")
    groups = WORDS.findall(regex)
    if not groups:
        return [regex]
    parts = WORDS.split(regex)  # text, words, text, words, ..., text
    texts, choices = parts[0::2], [g.split("|") for g in parts[1::2]]
    out = []
    for pick in itertools.product(*choices):
        s = texts[0]
        for word, text in zip(pick, texts[1:]):
            s += re.escape(word) + text
        out.append(s)
    return out


def check_selector(name, ms, series, source):
    """Problems of one selector against the captured series of its source."""
    problems = []
    names = [n for n in series if n.startswith(PREFIX[source])]
    if name is not None:
        cand = [name] if name in series else []
        if not cand:
            problems.append(f"{name} is in no {source} capture")
    else:
        cand = None
    for label, op, value in ms:
        if label != "__name__":
            continue
        if op == "=":
            found = [value] if value in names else []
            if not found:
                problems.append(f'__name__="{value}" is in no {source} capture')
        elif op == "=~":
            found = [n for n in names if re.fullmatch(value, n)]
            for alt in expansions(value):
                if not any(re.fullmatch(alt, n) for n in names):
                    problems.append(f'__name__=~"{alt}" matches no {source} capture')
        else:
            problems.append(f"__name__{op} cannot name a metric")
            found = []
        cand = found if cand is None else [n for n in cand if n in found]
    if cand is None:
        return [f"a selector without a metric name: {{{ms}}}"]
    if not cand:
        return problems or ["the selector matches no captured series"]
    labels = {}
    for n in cand:
        for k, vs in series[n].items():
            labels.setdefault(k, set()).update(vs)
    for label, op, value in ms:
        if label == "__name__" or label in SCRAPER_LABELS:
            continue
        if label not in labels:
            problems.append(f"{cand[0]}: no label {label} in the captures")
            continue
        values = labels[label]
        alts = [value] if op in ("=", "!=") else expansions(value)
        for alt in alts:
            if not any((v == alt) if op in ("=", "!=") else re.fullmatch(alt, v) for v in values):
                problems.append(f'{cand[0]}: {label}{op}"{alt}" matches no captured value')
    return problems


def substitute(expr, variables):
    def repl(m):
        var = m.group(1) or m.group(2) or m.group(3)
        if var in GRAFANA_DURATIONS:
            return GRAFANA_DURATIONS[var]
        if var not in variables:
            raise ValueError(f"unknown variable ${var}")
        return variables[var]
    return re.sub(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]", repl, expr)


def queries(dash):
    """[(where, source, expr)] of the panels' targets and the variables' label_values selectors."""
    variables = {v["name"]: v.get("allValue") or ".*" for v in dash.get("templating", {}).get("list", [])
                 if v.get("type") == "query"}
    out = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_]\w*)\)\s*", q, re.S)
        if not m:
            out.append((f"variable {v['name']}", None, q))
            continue
        source = "kyuubi" if v["name"].startswith("kyuubi") else "daemon"
        out.append((f"variable {v['name']}", source, substitute(m.group(1), variables)))
    source = None
    flat = []
    for p in dash.get("panels", []):
        flat.append(p)
        flat.extend(p.get("panels", []))
    for p in flat:
        if p.get("type") == "row":
            title = p.get("title", "")
            source = "daemon" if title.startswith("Daemon") else "kyuubi" if title.startswith("Kyuubi") else None
            continue
        for t in p.get("targets", []):
            where = f"panel {p.get('id')} {p.get('title')!r} target {t.get('refId')}"
            out.append((where, source, substitute(t.get("expr", ""), variables)))
    return out


def promtool_problems(promtool, qs):
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, (_, _, expr) in enumerate(qs)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump({"groups": [{"name": "podsweep-dashboard", "rules": rules}]}, f, indent=1)
        path = f.name
    try:
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if r.returncode == 0:
        return []
    text = (r.stdout + r.stderr).strip()
    bad = []
    for m in re.finditer(r"group \"podsweep-dashboard\", rule (\d+), \"[^\"]*\": (.*)", text):
        where = qs[int(m.group(1)) - 1][0]
        bad.append(f"{where}: promtool: {m.group(2)}")
    return bad or [f"promtool check rules failed: {text[-600:]}"]


def main():
    args = sys.argv[1:]
    promtool = os.path.expanduser("~/.cache/podsweep-tools/promtool")
    if args[:1] == ["--promtool"]:
        promtool, args = args[1], args[2:]
    path = args[0] if args else os.path.join(ROOT, "docs", "dashboards", "podsweep.json")
    with open(path) as f:
        dash = json.load(f)
    series = captures()
    problems = []
    qs = queries(dash)
    counted = {"daemon": 0, "kyuubi": 0}
    for where, source, expr in qs:
        if source is None:
            problems.append(f"{where}: not under a 'Daemon' or 'Kyuubi' row (or not a label_values query)")
            continue
        try:
            selectors, grouping, made = analyse(expr)
        except (ValueError, IndexError) as e:
            problems.append(f"{where}: cannot read {expr!r}: {e}")
            continue
        if not selectors:
            problems.append(f"{where}: names no series: {expr}")
        known = set(SCRAPER_LABELS) | made
        for name, ms in selectors:
            for p in check_selector(name, ms, series[source], source):
                problems.append(f"{where} ({source}): {p}")
            for n in series[source]:
                if n == name or any(lb == "__name__" and re.fullmatch(v, n) for lb, _, v in ms):
                    known.update(series[source][n])
        for label in sorted(grouping - known):
            problems.append(f"{where} ({source}): by/on label {label} is on none of its series nor made by label_replace")
        counted[source] += 1
    for source, n in counted.items():
        if n == 0:
            problems.append(f"no {source} query in {path}")
    problems += promtool_problems(promtool, qs)
    for p in problems:
        print("FAIL  " + p)
    print(f"dashboard check: {len(qs)} queries ({counted['daemon']} daemon, {counted['kyuubi']} Kyuubi) of "
          f"{os.path.relpath(path, ROOT)} against {len(series['daemon'])} daemon and {len(series['kyuubi'])} "
          f"Kyuubi series names captured: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
