#!/usr/bin/env python3
"""docs/compatibility.md from the matrix's committed JSON lines (docs/matrix/*.jsonl).

Usage:
  compat_page.py cells            the documented full matrix, one cell a line: KUBE KYUUBI MODE HA
  compat_page.py page [--check]   writes docs/compatibility.md; --check: exit 1 when the committed
                                  page differs from the generated one (scripts/test runs it)

Input lines (scripts/matrix writes them, scripts/stamp stamps them):
  {"matrix": "cell", "kube", "kyuubi", "mode", "ha", "ran", "pass", "why"?, figures..., "stamp"}
  {"matrix": "tool", "tool", "version", "path", "seconds", "mb", "stamp"?}
For each cell of the full matrix the newest line (by its stamp's date) is the one shown; a cell
with no line is "not run". Lines of cells outside the full matrix are shown as extra cells.

# Guarantees
- The page is a function of the committed lines and of the cell list below: the same lines give
  the same bytes, so `--check` catches a hand edit or a line committed without its page.

# Caveats
- A version's status is only as good as its cells: "passed" means every cell of it that ran passed.
"""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "compatibility.md")
LINES = os.path.join(ROOT, "docs", "matrix")

KUBE = ["1.32.13", "1.33.13", "1.34.4", "1.35.4", "1.36.3", "1.37.2"]
KYUUBI = ["1.10.3", "1.11.1", "1.12.0"]
HA = ["zookeeper-3.4", "zookeeper-3.8", "zookeeper-3.9", "etcd-3.4", "etcd-3.6"]
# The cell every axis varies from: one component changed at a time.
BASE = ("1.34.4", "1.12.0", "patch", "zookeeper-3.8")


def full_cells():
    """The documented full matrix: each axis varied from BASE, with the Kyuubi modes each version has."""
    cells = [BASE]
    for k in KUBE:
        cells.append((k, BASE[1], BASE[2], BASE[3]))
    for y in KYUUBI:
        for m in ("drop-in", "daemon", "patch"):
            cells.append((BASE[0], y, m, BASE[3]))
    for h in HA:
        cells.append((BASE[0], BASE[1], BASE[2], h))
    seen, out = set(), []
    for c in cells:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def key(line):
    return (line.get("kube", ""), line.get("kyuubi", ""), line.get("mode", ""), line.get("ha", ""))


# Every run of each cell that ran, oldest first: a cell that failed once is reported failed even when a
# later run passed (a flaky failure is a failure).
RUNS = {}


def read_lines():
    cells, tools = {}, {}
    RUNS.clear()
    for path in sorted(glob.glob(os.path.join(LINES, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError as e:
                    sys.exit(f"compat_page: {os.path.relpath(path, ROOT)}:{n}: not JSON: {e}")
                line["_file"] = os.path.relpath(path, ROOT)
                kind = line.get("matrix")
                date = line.get("stamp", {}).get("date", "")
                if kind == "cell":
                    k = key(line)
                    if line.get("ran"):
                        RUNS.setdefault(k, []).append(line)
                    if k not in cells or cells[k].get("stamp", {}).get("date", "") <= date:
                        cells[k] = line
                elif kind == "tool":
                    t = line.get("tool", "")
                    if t not in tools or line.get("seconds", -1) >= 0:
                        tools[t] = line
    return cells, tools


def runs_of(line):
    return sorted(RUNS.get(key(line), []), key=lambda l: l.get("stamp", {}).get("date", ""))


def result(line):
    """passed / FAILED / not run, from every run of the line's cell (its newest line says which ran)."""
    if line is None:
        return "not run"
    runs = runs_of(line)
    if not runs:
        return "not run"
    failed = [l for l in runs if not l.get("pass")]
    if not failed:
        return "passed" if len(runs) == 1 else f"passed ({len(runs)} runs)"
    if len(runs) == 1:
        return "FAILED"
    since = passed_since(runs)
    after = f"; the {since} newest passed, from commit {commit(runs[-since])}" if since > 0 else ""
    return f"FAILED ({len(failed)} of {len(runs)} runs{after})"


def passed_since(runs):
    """How many of a cell's runs (oldest first) passed after its last failed one. A failure stays
    on the page for good; the runs after the last one say whether it came back."""
    failed_at = [i for i, l in enumerate(runs) if not l.get("pass")]
    return len(runs) - 1 - max(failed_at) if failed_at else len(runs)


def commit(line):
    return line.get("stamp", {}).get("commit", "?")[:12]


def day(line):
    return line.get("stamp", {}).get("date", "?")[:10]


def cell_name(c):
    return f"Kubernetes {c[0]}, Kyuubi {c[1]} {c[2]}, {c[3]}"


def status_of(cells, pred):
    """passed / FAILED / not run for the cells matching pred, with dates and commits."""
    ran = [r for c, l in cells.items() if pred(c) and l is not None for r in runs_of(l)]
    if not ran:
        return "not run"
    failed = [l for l in ran if not l.get("pass")]
    dates = sorted({day(l) for l in ran})
    commits = sorted({commit(l) for l in ran})
    def cells_n(n):
        return f"{n} run" if n == 1 else f"{n} runs"
    word = f"FAILED ({len(failed)} of {cells_n(len(ran))}{newest_of(cells, pred)})" if failed \
        else f"passed ({cells_n(len(ran))})"
    return f"{word}, {', '.join(dates)}, commit {', '.join(commits)}"


def newest_of(cells, pred):
    """For a summary row with failed runs: whether each failing cell's newest runs passed since."""
    ran = [(c, runs_of(l)) for c, l in sorted(cells.items()) if pred(c) and l is not None]
    failing = [(c, runs) for c, runs in ran if any(not r.get("pass") for r in runs)]
    still = [cell_name(c) for c, runs in failing if passed_since(runs) == 0]
    if still:
        return f"; the newest run failed: {', '.join(still)}"
    if len(failing) == 1:
        runs = failing[0][1]
        n = passed_since(runs)
        return f"; the {n} newest passed, from commit {commit(runs[-n])}"
    return "; each failing cell's newest runs passed since (the cells below say from which commit)"


def fmt_failover(l):
    f = l.get("failover") or {}
    if not f:
        return "none"
    lead = f.get("successor_leading_ms")
    if not f.get("successor"):
        return (f"{f.get('stopped_server')} stopped ({f.get('how')}), but no server was leading the first scope "
                "at that moment: no failover")
    return f"{f.get('stopped_server')} stopped ({f.get('how')}); {f.get('successor')} led after {lead} ms"


def render():
    lines, tools = read_lines()
    full = full_cells()
    cells = {c: lines.get(c) for c in full}
    extra = sorted(k for k in lines if k not in cells)
    out = []
    w = out.append
    w("# Compatibility")
    w("")
    w("<!-- Generated by `scripts/matrix page` from docs/matrix/*.jsonl; do not edit by hand: scripts/test")
    w("     checks that this page equals the generated one. -->")
    w("")
    w("Which versions podsweep works with, from the compatibility matrix (`scripts/matrix`). Each cell runs")
    w("podsweep in one mode with one Kyuubi version, electing through one HA server, on one Kubernetes")
    w("version's control plane on loopback, and is judged on five counts: every terminated Spark driver")
    w("pod deleted by exactly one accepted DELETE; no other DELETE but a 404 from a scope's successor")
    w("right after the failover (its watch had not yet delivered the DELETE event of a pod its")
    w("predecessor had just deleted: [safety.md](safety.md), guarantee 4; counted in the 404 column);")
    w("none leaked; no wrongful DELETE (of a decoy, or before its retain period); and one failover (the")
    w("first scope's leader stopped mid-drain, a successor leading). Every DELETE is counted from the")
    w("API server's audit log; the cluster's own (kwok finishing a graceful delete) apart. Only what a committed line")
    w("says is claimed here: a cell with no line is *not run*, and so are the versions only it covers.")
    w("")
    w("## Supported versions")
    w("")
    w("| component | version | status (runs of its cells, dates, commits) |")
    w("|---|---|---|")
    # Each axis is judged on its own cells: the other three components as in BASE.
    for k in KUBE:
        w(f"| Kubernetes (kube-apiserver) | {k} | {status_of(cells, lambda c, k=k: c == (k,) + BASE[1:])} |")
    for y in KYUUBI:
        for m in ("patch", "drop-in", "daemon"):
            w(f"| Kyuubi, {m} | {y} | {status_of(cells, lambda c, y=y, m=m: c == (BASE[0], y, m, BASE[3]))} |")
    for h in HA:
        w(f"| HA server | {h} | {status_of(cells, lambda c, h=h: c == BASE[:3] + (h,))} |")
    w("")
    w(f"Each row is judged on the cells that vary that component alone from the base cell ({cell_name(BASE)}).")
    w("A version is supported where its cells passed; versions outside the table, and those whose cells")
    w("did not run, are untested.")
    w("")
    w("## Cells")
    w("")
    w("| cell | result | DELETEs / pods | 404s | leaked | wrongful | failover | HA server | date | commit |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for c in full + extra:
        l = lines.get(c)
        r = result(l)
        if r == "not run":
            w(f"| {cell_name(c)} | {r} | | | | | | | {day(l) if l else ''} | {commit(l) if l else ''} |")
            continue
        l = runs_of(l)[-1]
        w(f"| {cell_name(c)} | {r} | {l.get('delete_requests')} / {l.get('pods')} | {l.get('deletes_404')} "
          f"| {l.get('leaked')} | {l.get('wrongful_deletes')} | {fmt_failover(l)} "
          f"| {l.get('ha_kind')} {l.get('ha_version')} | {day(l)} | {commit(l)} |")
    w("")
    failed = [(c, l) for c in full + extra if lines.get(c) is not None
              for l in runs_of(lines.get(c)) if not l.get("pass")]
    if failed:
        w("## Failed")
        w("")
        w("Every failed run of a cell, also when a later run of it passed:")
        w("")
        for c, l in failed:
            bad = ", ".join(k for k, v in sorted((l.get("checks") or {}).items()) if not v)
            w(f"- {cell_name(c)}: {bad or 'a check'} failed ({l.get('delete_requests')} DELETEs for {l.get('pods')} pods: "
              f"{l.get('deletes_accepted')} accepted, {l.get('deletes_404')} answered 404, of which "
              f"{l.get('successor_late_404s')} from a successor after the failover; leaked {l.get('leaked')}, "
              f"wrongful {l.get('wrongful_deletes')}; {day(l)}, commit {commit(l)}, {l.get('_file')})")
        w("")
    not_run = [(c, lines.get(c)) for c in full + extra if result(lines.get(c)) == "not run"]
    # A cell whose newest line did not run but an earlier one did is shown by its runs, not here.
    w("## Not run")
    w("")
    if not not_run:
        w("Every cell of the matrix ran.")
    for c, l in not_run:
        why = l.get("why") if l else "no line is committed for this cell (it was not run before the commit)"
        if why.startswith("Kubernetes ") and " is not built" in why:
            why += "; each version is a cold Go build of three programs (the tools table below)"
        w(f"- {cell_name(c)}: {why}")
    w("")
    w("## How each cell was run")
    w("")
    ran = [l for l in lines.values() if l.get("ran")]
    if ran:
        l = max(ran, key=lambda x: x.get("stamp", {}).get("date", ""))
        w(f"Newest cell: {l.get('servers')} servers, {l.get('scopes')} scopes (namespaces), {l.get('pods')} "
          f"terminated driver pods in two waves plus {l.get('decoys')} decoys, retain period {l.get('retain_ms')} ms; "
          f"API server: {l.get('stamp', {}).get('api_server', '?')}.")
        builds = sorted({f"{(x.get('components') or {}).get('podsweep_build', '?')} build of "
                         f"{str((x.get('components') or {}).get('podsweep', '?'))[:12]}" for x in ran})
        w(f"podsweep under test (libpodsweep.so, the daemon): {'; '.join(builds)}.")
        withs = sorted({x["with"] for x in ran if x.get("with")})
        for wi in withs:
            n = sum(1 for x in ran if x.get("with") == wi)
            w(f"{n} cell runs had {wi}.")
        w("")
    w("- patch: Kyuubi's own `KubernetesApplicationOperation` with java/kyuubi's patch, one JVM per server;")
    w("  drop-in: stock Kyuubi (its cleaner off) with podsweep's drop-in provider; daemon: the podsweep")
    w("  daemon, one process per server, next to that Kyuubi version's stock servers with their cleaner")
    w("  off (`cleanupTerminatedDriverPod.kind=NONE`; their DELETEs, if any, would be counted).")
    w("- HA servers: ZooKeeper 3.4 is Kyuubi's embedded server (the 3.4.14 server relocated into")
    w("  `kyuubi-relocated-zookeeper-34`, the jar Kyuubi 1.12.0's `EmbeddedZookeeper` runs); 3.8 is Debian's")
    w("  `zookeeper` package; 3.9 is `org.apache.zookeeper:zookeeper` from the Maven registry; etcd 3.4 is")
    w("  Debian's `etcd-server`; etcd 3.6 is built from `go.etcd.io/etcd/server/v3`. Each runs alone on a")
    w("  loopback port, started and stopped by `scripts/matrix` (scripts/lib/matrix-ha.bash).")
    w("")
    w("## What one version needs that another does not")
    w("")
    notes = [f"- {t}: {tools[t]['note']}" for t in sorted(tools) if tools[t].get("note")]
    for n in notes:
        w(n)
    w("- Kubernetes: every version is built the same way by `scripts/kube build --cluster` (a scratch")
    w("  module requiring `k8s.io/kubernetes`, each staging module replaced by its published twin); a twin")
    w("  the module proxy does not serve is replaced by the newest one of the same minor below it (the")
    w("  tool notes above say which). The API server's own storage is Debian's etcd 3.4 for every version.")
    w("- Kyuubi: the patch is java/kyuubi's diff for 1.12.0; for 1.11.1 and 1.10.3 it is the same diff ported")
    w("  by `KYUUBI_VERSION=<v> scripts/kyuubi port`. The drop-in is compiled against each release's own")
    w("  jars. The daemon loads no Kyuubi class: it reads Kyuubi's cleanup keys, whose names and defaults")
    w("  are the same in the three releases, so its cells differ only in the Kyuubi servers beside it.")
    w("  A line whose `with` field names another branch ran with that branch merged into the tree.")
    w("- HA servers: the same `kyuubi.ha.*` keys for every ZooKeeper version (session 6 s asked) and for")
    w("  every etcd version (lease 2 s). ZooKeeper 3.4 has no container or TTL nodes: podsweep's election")
    w("  creates persistent parents and its lock's ephemeral sequential nodes only (src/election/zookeeper),")
    w("  and Kyuubi's own client is ZooKeeper 3.4.14's (kyuubi-relocated-zookeeper-34).")
    w("")
    w("## Tools: build times and sizes (this 2-core machine)")
    w("")
    if tools:
        w("| tool | version | seconds to fetch or build | MB | date | what was built, notes |")
        w("|---|---|---|---|---|---|")
        for t in sorted(tools, key=lambda t: (t.split("-")[0], [int(x) if x.isdigit() else 0 for x in t.replace("-", ".").split(".")[1:]])):
            l = tools[t]
            secs = l.get("seconds")
            w(f"| {t} | {l.get('version')} | {secs if secs is not None and secs >= 0 else 'already there'} "
              f"| {l.get('mb')} | {l.get('stamp', {}).get('date', l.get('date', '?'))[:10]} "
              f"| {'; '.join(x for x in (l.get('parts', ''), l.get('note', '')) if x)} |")
    else:
        w("No tool line is committed.")
    w("")
    w("## Running it")
    w("")
    w("```")
    w("scripts/matrix tools                 # HA servers: fetch or build, each skipped when present")
    w("scripts/matrix tools kube-1.35.4     # a Kubernetes version (scripts/kube build --cluster)")
    w("scripts/matrix --kube 1.35.4 --kyuubi 1.12.0 --mode patch --ha etcd-3.6   # one cell")
    w("scripts/matrix --smoke               # CI's cell (scripts/test)")
    w("scripts/matrix --full --out docs/matrix/<date>-<commit>.jsonl             # every cell above")
    w("scripts/matrix page                  # this page, from docs/matrix/*.jsonl")
    w("```")
    return "\n".join(out) + "\n"


def main(argv):
    if argv[:1] == ["cells"]:
        for c in full_cells():
            print(" ".join(c))
        return 0
    if argv[:1] == ["page"]:
        text = render()
        if "--check" in argv[1:]:
            try:
                with open(PAGE, encoding="utf-8") as f:
                    have = f.read()
            except FileNotFoundError:
                have = ""
            if have != text:
                print("docs/compatibility.md differs from what scripts/matrix page generates from docs/matrix/*.jsonl; "
                      "run scripts/matrix page", file=sys.stderr)
                return 1
            print("docs/compatibility.md matches docs/matrix/*.jsonl")
            return 0
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.relpath(PAGE, ROOT)}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
