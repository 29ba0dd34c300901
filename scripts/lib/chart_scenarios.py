"""What `scripts/chart test` checks around the blocks of each operator's page (chart_pages.py runs
the blocks): the state each block should leave, from the API server, its audit log and the
daemons' own endpoints."""

import json
import os
import re
import subprocess
import time

from chart_pages import (KYUUBI_NS, P, SPARK, Page, deletes, exists, http, kyuubi_argv, kyuubi_default_args,
                         make_pods, secret_text, sts_container)
from kubeapi import helm, load_all, wait

SA = f"system:serviceaccount:{KYUUBI_NS}:podsweep"


def running(page, n, deployment="podsweep"):
    return wait(f"{n} {deployment} pod(s) running", 90, lambda: len(page.daemons(deployment)) == n and page.daemons(deployment))


def one_leader(page, ns, deployment="podsweep"):
    return wait(f"one leader of {ns}", 90, lambda: page.leader(ns, deployment))


# ---- docs/rollout.md -----------------------------------------------------------------------------------
def rollout(page: Page):
    t, f, kube, env = page.tally, page.page_figures, page.kube, page.env
    text = page.install_kyuubi()
    t.check("kyuubi.kubernetes.namespace" not in text,
            "Kyuubi 1.12.0's chart made its ConfigMap `kyuubi` from the operator's values: no kyuubi.kubernetes.namespace "
            "in it (the chart passes it on Kyuubi's command line)", text)
    s = {}

    def cleaner_off(p, *_):
        server = sts_container(p, "kyuubi-server")
        default = kyuubi_default_args(env)
        argv = kyuubi_argv(server)
        t.check(server["args"] == default and argv[-2:] == ["--conf", f"{P}kind=NONE"],
                "podsweep-daemon.yaml: Kyuubi's container keeps its chart's own arguments and its command runs them "
                f"with --conf ...kind=NONE last (a stand-in bin/kyuubi got {len(argv)} arguments)", f"{argv}")
        sts = p.kube.ok("GET", f"/apis/apps/v1/namespaces/{KYUUBI_NS}/statefulsets/kyuubi")
        role = p.kube.ok("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{KYUUBI_NS}/roles/kyuubi")
        cm = p.kube.ok("GET", f"/api/v1/namespaces/{KYUUBI_NS}/configmaps/kyuubi")["data"]["kyuubi-defaults.conf"]
        kept = (cm == p.kyuubi_conf and any(r["resources"] == ["services"] for r in role["rules"])
                and any(v["name"] == "operator-scratch" for v in sts["spec"]["template"]["spec"]["volumes"]))
        t.check(kept, "the operator's kyuubiConf.files, rbac.rules and volumes kept through podsweep-daemon.yaml")

    def dry_run(p, *_):
        running(p, 2)
        s["leader"] = one_leader(p, KYUUBI_NS)
        s["names"] = make_pods(kube, KYUUBI_NS, "dry", 12)
        wait("a dry-run DELETE per pod", 90,
             lambda: {r["name"] for r in deletes(kube, KYUUBI_NS, s["names"], dry=True)} == set(s["names"]))
        args = p.kube.ok("GET", f"/apis/apps/v1/namespaces/{KYUUBI_NS}/deployments/podsweep")["spec"]["template"]["spec"]["containers"][0]["args"]
        t.check(f"kyuubi.kubernetes.client.initialize.list=:{KYUUBI_NS}" in args,
                f"the chart told the daemons the namespace of its Role: --conf kyuubi.kubernetes.client.initialize.list=:{KYUUBI_NS} "
                "(Kyuubi's ConfigMap names none)", str(args))

    def verify(p, code, out, err):
        s["status_table"] = out
        t.check("participants  2" in out and "leads  podsweep-" in out and "waits  podsweep-" in out,
                "helm test: `podsweep check` passed and `podsweep status` shows one leader and 2 participants", out)

    def status_pod(p, code, out, err):
        t.check("participants  2" in out, "the in-cluster `podsweep status` pod (patch and drop-in users) prints the "
                "table: 2 participants", out)
        f["status_pod"] = out
        # The same from the image with --json, for the page's sample of the schema.
        conf = os.path.join(p.work, "status-conf")
        os.makedirs(conf, exist_ok=True)
        os.chmod(conf, 0o755)
        with open(os.path.join(conf, "kyuubi-defaults.conf"), "w") as fh:
            fh.write(p.kyuubi_conf)
        os.chmod(os.path.join(conf, "kyuubi-defaults.conf"), 0o644)
        r = subprocess.run(["podman", "run", "--rm", "--network", "host", "--read-only", "--cap-drop", "all",
                            "--user", "65532:65532", "-v", f"{conf}:/etc/kyuubi/conf:ro", f"localhost/podsweep:{env['VERSION']}",
                            "status", "--json", "--config", "/etc/kyuubi/conf/kyuubi-defaults.conf"],
                           capture_output=True, text=True, env=p.kubelet.env, timeout=60)
        try:
            f["status_json"] = json.loads(r.stdout)
        except ValueError:
            f["status_json"] = r.stdout + r.stderr
        # Each namespace has two elections (layout 1, which every 0.2 server wins first, and
        # layout 2, which only that winner joins); both daemons run.
        sj = f["status_json"]
        t.check(isinstance(sj, dict)
                and [len(e["participants"]) for e in sj["scopes"] if e.get("layout") == 1] == [2]
                and [len(e["participants"]) for e in sj["scopes"] if e.get("layout") == 2] == [1]
                and len(sj.get("servers", [])) == 2,
                "podsweep status --json (the image): layout 1 with 2 participants, layout 2 with its "
                "leader, 2 servers running", r.stdout + r.stderr)

    def go_no_go(p, code, out, err):
        names = s["names"]
        dry = deletes(kube, KYUUBI_NS, names, dry=True)
        real = deletes(kube, KYUUBI_NS, names + ["dry-running", "dry-no-selector"])
        leader_logs = p.logs_of(s["leader"])
        others = [n for n in p.daemons() if n != s["leader"]]
        lines = out.strip().splitlines()
        counts = [int(l.rsplit(" ", 1)[1]) for l in lines]
        f["dry_run"] = {"pods": len(names), "dry_run_deletes": len(dry), "real_deletes": len(real),
                        "would_delete_leader": leader_logs.count("Would delete"),
                        "would_delete_others": sum(p.logs_of(o).count("Would delete") for o in others),
                        "block_output": lines}
        t.check(counts == [len(names), len(names)] and not real and all(exists(kube, KYUUBI_NS, n) for n in names)
                and f["dry_run"]["would_delete_others"] == 0,
                f"go / no-go: {lines[0].strip()} and {lines[1].strip()}; {len(dry)} dry-run DELETEs, 0 real in the audit "
                f"log, every pod still there, 0 'Would delete' lines from the other daemon", f"{f['dry_run']}")

    def on(p, *_):
        names = s["names"]
        wait("every driver pod deleted", 90, lambda: not any(exists(kube, KYUUBI_NS, n) for n in names))
        real = deletes(kube, KYUUBI_NS, names)
        per_pod = {n: sum(1 for r in real if r["name"] == n) for n in names}
        decoys = [n for n in ("dry-running", "dry-no-selector") if not exists(kube, KYUUBI_NS, n)]
        f["on"] = {"pods": len(names), "deletes": len(real), "per_pod_max": max(per_pod.values())}
        t.check(all(c == 1 for c in per_pod.values()) and all(r["code"] == 200 for r in real) and not decoys
                and all(r["user"] == SA for r in real),
                f"then on: {len(real)} DELETEs for {len(names)} pods by the audit log, one each, all 200, all by {SA}; "
                "the running driver and the pod without spark-app-selector kept", f"{per_pod} {decoys}")
        s["pods_on"] = set(p.daemons())

    def stop(p, *_):
        role = p.kube.ok("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{KYUUBI_NS}/roles/podsweep")
        t.check("delete" not in role["rules"][0]["verbs"], "emergency stop: the Role has no delete")
        s["stop"] = make_pods(kube, KYUUBI_NS, "stop", 4, decoys=False)
        wait("403s for the held pods", 90,
             lambda: {r["name"] for r in kube.pod_deletes(KYUUBI_NS) if r["code"] == 403} >= set(s["stop"]))
        kept = all(exists(kube, KYUUBI_NS, n) for n in s["stop"])
        leader = one_leader(p, KYUUBI_NS)
        metrics = http(p.daemons()[leader], "/metrics")[1]
        forbidden = [l for l in metrics.splitlines() if 'outcome="forbidden"' in l and l.startswith("podsweep_delete_outcomes_total")]
        same = set(p.daemons()) == s["pods_on"]
        f["emergency_stop"] = {"pods": len(s["stop"]), "forbidden_metric": forbidden, "daemons_restarted": not same}
        t.check(kept and forbidden and same, f"while stopped: every DELETE answered 403, the {len(s['stop'])} pods kept; "
                f"{forbidden[:1]}; no daemon restarted ({len(s['pods_on'])} pods, the same)", f"{f['emergency_stop']}")

    def resume(p, *_):
        t0 = time.time()
        wait("the held pods deleted once delete is granted again", 90,
             lambda: not any(exists(kube, KYUUBI_NS, n) for n in s["stop"]))
        f["resume_seconds"] = round(time.time() - t0, 1)
        t.check(set(p.daemons()) == s["pods_on"], f"resumed without a restart: the held pods deleted "
                f"{f['resume_seconds']} s after the Roles had delete again (forbidden.retryInterval PT2S here)")

    def uninstall_kyuubi(p, *_):
        server = sts_container(p, "kyuubi-server")
        t.check(server["args"] == kyuubi_default_args(env) and not server.get("command")
                and not any("kind=NONE" in a for a in kyuubi_argv(server)),
                "uninstall: Kyuubi runs as its chart runs it again (no kind=NONE: the operator's file's kind=ALL applies)")

    def uninstall_chart(p, *_):
        wait("the daemons gone", 60, lambda: not p.daemons())
        logs = [p.logs_of(n) for n in s["pods_on"]]
        t.check(all("SIGTERM received" in l and "podsweep stopped" in l for l in logs),
                f"helm uninstall: each daemon got SIGTERM, released its leadership and stopped ({len(logs)} daemons)")

    def uninstall_ha(p, code, out, err):
        removed = next((line for line in out.splitlines() if line.startswith("removed ")), "")
        t.check(removed.startswith(f"removed /{p.ha_namespace}-podsweep"), f"podsweep uninstall in the cluster: {removed}",
                out + err)
        f["uninstall"] = removed

    page.run_blocks({
        "rollout-kyuubi-cleaner-off": (None, cleaner_off),
        "rollout-dry-run": (None, dry_run),
        "rollout-verify": (None, verify),
        "rollout-status-pod": (None, status_pod),
        "rollout-go-no-go": (None, go_no_go),
        "rollout-on": (None, on),
        "rollout-stop": (None, stop),
        "rollout-resume": (None, resume),
        "rollout-uninstall-kyuubi": (None, uninstall_kyuubi),
        "rollout-uninstall-chart": (None, uninstall_chart),
        "rollout-uninstall-ha": (None, uninstall_ha),
    })


# ---- docs/daemon.md ------------------------------------------------------------------------------------
def daemon(page: Page):
    t, kube = page.tally, page.kube
    page.install_kyuubi()

    def cleans(p, deployment, prefix):
        running(p, 2, deployment)
        one_leader(p, SPARK, deployment)
        names = make_pods(kube, SPARK, prefix, 3, decoys=False)
        wait(f"{prefix} pods deleted", 90, lambda: not any(exists(kube, SPARK, n) for n in names))
        per = [sum(1 for r in deletes(kube, SPARK, [n]) if r["code"] == 200) for n in names]
        t.check(per == [1, 1, 1], f"{deployment} in {KYUUBI_NS} cleans {SPARK}: 3 terminated driver pods, one DELETE each")

    def install(p, code, out, err):
        t.check("participants  2" in out, "daemon.md's install: helm test shows 2 participants", out)
        cleans(p, "podsweep", "chart")

    def by_hand(p, *_):
        cleans(p, "podsweep", "byhand")

    def sidecar(p, *_):
        c = sts_container(p, "podsweep")
        server = sts_container(p, "kyuubi-server")
        t.check(c is not None and "readinessProbe" not in c and c["livenessProbe"]["httpGet"]["path"] == "/livez"
                and f"kyuubi.kubernetes.namespace={KYUUBI_NS}" in c["args"]
                and kyuubi_argv(server)[-1] == f"{P}kind=NONE",
                "sidecar: Kyuubi's pod gets podsweep beside kyuubi-server, liveness /livez, no readiness probe (Kyuubi's "
                "Service never waits on cleanup health), told the namespace; Kyuubi's own cleaner off", str(c))
        role = p.kube.request("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{KYUUBI_NS}/roles/kyuubi-podsweep")[0]
        t.check(role == 200 and p.kube.can_soon(f"system:serviceaccount:{KYUUBI_NS}:kyuubi", "watch", "pods", KYUUBI_NS),
                "podsweep-rbac.yaml: Kyuubi's ServiceAccount may watch pods, in a Role of its own")

    page.run_blocks({"daemon-install": (None, install), "daemon-by-hand": (None, by_hand),
                     "daemon-sidecar": (None, sidecar)})


# ---- charts/podsweep/README.md -------------------------------------------------------------------------
def chart_readme(page: Page):
    t, kube = page.tally, page.kube
    page.install_kyuubi()

    def deployment(p):
        return p.kube.ok("GET", f"/apis/apps/v1/namespaces/{KYUUBI_NS}/deployments/podsweep")

    def install(p, *_):
        running(p, 2)
        one_leader(p, KYUUBI_NS)
        ok("readme install: 2 daemons, one leader of kyuubi")

    def ok(text):
        t.ok(text)

    def test_(p, code, out, err):
        t.check("participants  2" in out, "readme: helm test shows 2 participants", out)

    def typo(p, code, out, err):
        t.check("replicaCont" in err and "additional" in err.lower(), "values.schema.json refuses replicaCont", err[-400:])

    def one_daemon(p, code, out, err):
        t.check("replicaCount must be 2 or more with coordination ha" in err, "one daemon with coordination ha refused", err[-400:])
        t.check(deployment(p)["spec"]["replicas"] == 2, "the release as it was (2 replicas)")

    def secret(p, *_):
        vol = deployment(p)["spec"]["template"]["spec"]["volumes"][0]
        t.check(vol.get("secret", {}).get("secretName") == "kyuubi-conf"
                and "auth.digest" in secret_text(kube, KYUUBI_NS, "kyuubi-conf", "kyuubi-defaults.conf"),
                "kyuubiConf.secret: the daemons mount the Secret")
        running(p, 2)
        one_leader(p, KYUUBI_NS)
        t.ok("the daemons rolled onto the Secret's file and elect again")
        ann = deployment(p)["spec"]["template"]["metadata"].get("annotations") or {}
        t.check("checksum/kyuubi-conf" in ann, "helm upgrade looked the Secret up: its checksum is on the pod template, "
                "so the next upgrade after a change of the file rolls the daemons", str(ann))

    def single(p, *_):
        d = deployment(p)
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        t.check(d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
                and f"{P}ha.singleServer=true" in args,
                "coordination single: 1 replica, strategy Recreate, ...ha.singleServer=true passed")
        running(p, 1)

    def events(p, code, out, err):
        last = out.strip().splitlines()[-1] if out.strip() else ""
        t.check(last == "yes", f"events.enabled: the daemons' account may create events.k8s.io events: kubectl auth can-i says {last}")

    def uninstall(p, *_):
        wait("the daemons gone", 60, lambda: not p.daemons())
        t.ok("readme uninstall: the daemons stopped")

    page.run_blocks({"readme-install": (None, install), "readme-test": (None, test_),
                     "readme-typo-fails": (None, typo), "readme-one-daemon-fails": (None, one_daemon),
                     "readme-secret": (None, secret), "readme-single": (None, single),
                     "readme-events": (None, events), "readme-uninstall": (None, uninstall)})
    values_blocks(page)


def values_blocks(page):
    """Each ```yaml values-... block of the chart's README: rendered with the chart, admitted by
    the API server (dryRun=All)."""
    with open(os.path.join(page.env["ROOT"], "charts", "podsweep", "README.md")) as f:
        text = f.read()
    ns = "values-check"
    page.kube.namespace(ns, {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")})
    for name, body in re.findall(r"```yaml (values-[\w-]+)\n(.*?)```", text, re.S):
        path = os.path.join(page.work, name + ".yaml")
        with open(path, "w") as out:
            out.write(body)
        docs = load_all(helm(page.env["HELM"], "template", "podsweep", os.path.join(page.env["ROOT"], "charts", "podsweep"),
                             "-n", ns, "-f", path).stdout)
        bad = [f"{d['kind']}/{d['metadata']['name']}: {c} {str(o)[:200]}" for d in docs
               for c, o, _ in [page.kube.apply(d, dry_run=True, namespace=ns)] if c >= 300]
        page.tally.check(not bad, f"charts/podsweep/README.md {name}: rendered, {len(docs)} objects admitted (dryRun=All) "
                         f"into {ns} (Pod Security restricted)",
                         "; ".join(bad))


# ---- charts/kyuubi-values/README.md ----------------------------------------------------------------------
def kyuubi_values_readme(page: Page):
    t = page.tally
    page.install_kyuubi()

    def check_merged(p, *_):
        sts = p.kube.ok("GET", f"/apis/apps/v1/namespaces/{KYUUBI_NS}/statefulsets/kyuubi")["spec"]["template"]["spec"]
        vols = {v["name"] for v in sts["volumes"]}
        server = next(c for c in sts["containers"] if c["name"] == "kyuubi-server")
        mounts = {m["mountPath"] for m in server["volumeMounts"]}
        inits = [c["name"] for c in sts.get("initContainers", [])]
        t.check({"operator-scratch", "podsweep-jars"} <= vols and "/opt/kyuubi/work" in mounts
                and any(m.endswith("-linux.jar") for m in mounts) and inits == ["podsweep-jars"],
                "the drop-in merged into values that already set volumes and volumeMounts: the operator's volume and "
                "podsweep's both rendered, the init container there", f"{vols} {mounts} {inits}")
        cm = p.kube.ok("GET", f"/api/v1/namespaces/{KYUUBI_NS}/configmaps/kyuubi")["data"]["kyuubi-defaults.conf"]
        t.check(cm == p.kyuubi_conf and f"{P}kind=NONE" in kyuubi_argv(server),
                "the operator's kyuubi-defaults.conf kept; podsweep's keys on Kyuubi's command line")

    page.run_blocks({"kyuubi-values-merged": (None, check_merged)})


SCENARIOS = {"docs/rollout.md": rollout, "docs/daemon.md": daemon, "charts/podsweep/README.md": chart_readme,
             "charts/kyuubi-values/README.md": kyuubi_values_readme}
