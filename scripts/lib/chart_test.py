"""scripts/chart test: charts/podsweep and the daemon's image on the local kube-apiserver.

Run by scripts/chart (which starts the API server and ZooKeeper and passes their addresses);
prints `ok` / `FAIL` lines and ends with "chart test: N passed, M failed" and one JSON line of
figures (commit, date, API server). Steps:
  1. helm lint and helm template (the kinds, the PrometheusRule = docs/alerts' group, promtool).
  2. Server-side apply of the chart (dryRun=All, then for real) into a namespace whose Pod Security
     admission enforces `restricted`; a Pod made from the Deployment's template is admitted there,
     a privileged one is refused (so the check is real).
  3. SubjectAccessReviews of the chart's ServiceAccount: what it needs, and what it must not do.
  4. The image, run by podman on the host network as two replicas with the chart's ServiceAccount
     token where Kubernetes mounts it: dryRun=true first (one dry-run DELETE per pod, none real),
     then on (one DELETE per pod, by the audit log), probes, `podsweep status`.
  5. Emergency stop without a restart (the Role without `delete`), and back.
  6. Uninstall: the daemons stop (SIGTERM, exit 0), `podsweep uninstall` removes the HA nodes.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from kubeapi import Kube, KubeError, Tally, helm, load_all, wait  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(ROOT, "charts", "podsweep")
NS, SPARK, OTHER = "podsweep", "spark-jobs", "other-team"
SA = f"system:serviceaccount:{NS}:podsweep"
P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
TALLY = Tally()
ok, bad, check = TALLY.ok, TALLY.bad, TALLY.check
figures = {}


def run(*cmd, check_rc=True, **kw):
    r = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check_rc and r.returncode != 0:
        raise KubeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r


# ---- 1. lint and template ------------------------------------------------------------------------
def lint_and_template(env):
    h = env["HELM"]
    r = helm(h, "lint", "--strict", CHART, check=False)
    check(r.returncode == 0, "helm lint --strict charts/podsweep", r.stdout + r.stderr)
    every = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true",
             "--set", "metrics.prometheusRule.enabled=true", "--set", "kyuubiConf.inline=kyuubi.ha.addresses=zk:2181"]
    r = helm(h, "lint", "--strict", CHART, *every, check=False)
    check(r.returncode == 0, "helm lint --strict with every optional object", r.stdout + r.stderr)
    docs = load_all(helm(h, "template", "podsweep", CHART, "-n", NS, *every).stdout)
    kinds = sorted(d["kind"] for d in docs)
    want = sorted(["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service",
                   "PodDisruptionBudget", "ServiceMonitor", "PodMonitor", "PrometheusRule"])
    check(kinds == want, f"helm template: {', '.join(kinds)}", f"expected {want}")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    import yaml
    with open(os.path.join(ROOT, "docs", "alerts", "podsweep-rules.yaml")) as f:
        source = yaml.safe_load(f)
    daemon_group = [g for g in source["groups"] if g["name"] == "podsweep-daemon"]
    check(rule["spec"]["groups"] == daemon_group,
          f"PrometheusRule = docs/alerts/podsweep-rules.yaml's group podsweep-daemon ({len(daemon_group[0]['rules'])} rules, one source)")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as t:
        yaml.safe_dump({"groups": rule["spec"]["groups"]}, t)
    r = run(env["PROMTOOL"], "check", "rules", t.name, check_rc=False)
    check(r.returncode == 0, "promtool check rules on the rendered PrometheusRule", r.stdout + r.stderr)
    os.unlink(t.name)
    r = helm(h, "template", "x", CHART, "--set", "replicaCount=1", check=False)
    check(r.returncode != 0 and "replicaCount must be 2 or more" in r.stderr, "replicaCount=1 is refused, saying why")
    r = helm(h, "template", "x", CHART, "--set", "kyuubiConf.inline=kyuubi.kubernetes.namespace=x", check=False)
    check(r.returncode != 0 and "kyuubi.ha.addresses" in r.stderr, "an inline file without kyuubi.ha.addresses is refused")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    check(c["readinessProbe"]["httpGet"]["path"] == "/healthz" and c["livenessProbe"]["httpGet"]["path"] == "/livez",
          "readiness /healthz (every scope healthy) and liveness /livez (the process answers): distinct conditions")


# ---- 2. server-side apply under restricted ---------------------------------------------------------
def render(env, zk, extra=()):
    conf = "\n".join([
        f"kyuubi.ha.addresses={zk}",
        "kyuubi.ha.namespace=kyuubi-chart",
        f"kyuubi.kubernetes.namespace={SPARK}",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod=PT2S",
        f"{P}kind=NONE",
        f"{P}forbidden.retryInterval=PT2S",
        f"{P}forbidden.summaryInterval=PT5S",
        f"{P}status.logInterval=PT5S",
        "kyuubi.ha.zookeeper.session.timeout=6000",
    ]) + "\n"
    out = helm(env["HELM"], "template", "podsweep", CHART, "-n", NS, "--set", f"rbac.namespaces={{{SPARK}}}",
               "--set-string", f"kyuubiConf.inline={conf}", "--set", "metrics.serviceMonitor.enabled=true",
               "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
               "--set", f"image.tag={env['VERSION']}", *extra).stdout
    return load_all(out), conf


def install_monitoring_crds(kube):
    """Stand-ins for the Prometheus Operator's CRDs (structural, any spec): the API server then
    serves the kinds, so the chart's monitoring objects can be applied."""
    for kind, plural in (("ServiceMonitor", "servicemonitors"), ("PodMonitor", "podmonitors"),
                         ("PrometheusRule", "prometheusrules")):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.monitoring.coreos.com"},
               "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                        "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
                        "versions": [{"name": "v1", "served": True, "storage": True,
                                      "schema": {"openAPIV3Schema": {"type": "object",
                                                                     "x-kubernetes-preserve-unknown-fields": True}}}]}}
        code, out, _ = kube.apply(crd)
        if code >= 300:
            raise KubeError(f"CRD {plural}: {code} {out}")
    wait("the monitoring CRDs served", 30, lambda: kube.request("GET", "/apis/monitoring.coreos.com/v1")[0] == 200)


def apply_chart(kube, docs):
    for dry in (True, False):
        results = [(d["kind"], d["metadata"]["name"], *kube.apply(d, dry_run=dry, namespace=NS)) for d in docs]
        bad_ones = [f"{k}/{n}: {c} {b}" for k, n, c, b, _ in results if c >= 300]
        warnings = [f"{k}/{n}: {w}" for k, n, _, _, ws in results for w in ws]
        label = "dryRun=All" if dry else "for real"
        check(not bad_ones and not warnings,
              f"server-side apply ({label}) of {len(docs)} objects into namespace {NS} (Pod Security enforce=restricted): "
              f"every one accepted, no warning", "; ".join(bad_ones + warnings))
    for d in docs:
        code, _, _ = kube.request("GET", kube.path_of(d, NS))
        if code != 200:
            bad(f"GET {d['kind']}/{d['metadata']['name']} after the apply: {code}")
            return
    ok("every applied object reads back")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "podsweep-template-check", "namespace": NS,
                                                           "labels": dep["spec"]["template"]["metadata"]["labels"]},
           "spec": dep["spec"]["template"]["spec"]}
    for dry in (True, False):
        code, out, warns = kube.apply(pod, dry_run=dry)
        check(code in (200, 201) and not warns,
              f"a Pod of the Deployment's template is admitted under restricted ({'dryRun=All' if dry else 'created'})",
              f"{code} {out} {warns}")
    figures["restricted_pod_admitted"] = True
    # The same Pod without the chart's security contexts is fine for `baseline` but not for
    # `restricted`: its refusal shows the admission really enforces.
    loose = json.loads(json.dumps(pod))
    loose["metadata"]["name"] = "podsweep-unrestricted-check"
    loose["spec"]["containers"][0]["securityContext"] = {}
    loose["spec"]["securityContext"] = {}
    code, out, _ = kube.apply(loose, dry_run=True)
    msg = out.get("message", "") if isinstance(out, dict) else str(out)
    check(code == 403 and 'violates PodSecurity "restricted' in msg,
          "the same Pod without the chart's securityContext is refused there (Pod Security admission enforces "
          "restricted): " + msg[msg.find("violates"):][:300], f"{code} {msg[:300]}")


def sar_checks(kube):
    want = [
        ("get", "pods", SPARK, True), ("list", "pods", SPARK, True), ("watch", "pods", SPARK, True),
        ("delete", "pods", SPARK, True),
        ("create", "pods", SPARK, False), ("patch", "pods", SPARK, False), ("update", "pods", SPARK, False),
        ("get", "secrets", SPARK, False), ("list", "secrets", SPARK, False), ("get", "secrets", NS, False),
        ("list", "secrets", "", False), ("list", "pods", OTHER, False), ("delete", "pods", OTHER, False),
        ("list", "pods", "", False), ("delete", "pods", "", False), ("create", "events", SPARK, False),
        ("get", "configmaps", NS, False), ("create", "leases", NS, False),
        ("get", "configmaps/kube-root-ca.crt", SPARK, True), ("get", "configmaps/other", SPARK, False),
        ("list", "configmaps", SPARK, False),
    ]
    answers = []
    for verb, res, ns, expected in want:
        group = "coordination.k8s.io" if res == "leases" else ""
        res_, _, name = res.partition("/")
        got = kube.can(SA, verb, res_, ns, group=group, name=name)
        answers.append(f"{verb} {res} in {ns or 'every namespace'}: {'yes' if got else 'no'}")
        if got != expected:
            bad(f"SubjectAccessReview {SA} {verb} {res} in {ns or 'every namespace'}: {got}, expected {expected}")
            return
    figures["subject_access_reviews"] = answers
    ok(f"SubjectAccessReview of {SA}: " + "; ".join(answers))


# ---- 4. the image with the chart's ServiceAccount token ---------------------------------------------
def driver_pod(name, app_selector=True):
    labels = {"kyuubi-unique-tag": name + "-tag", "spark-role": "driver"}
    if app_selector:
        labels["spark-app-selector"] = "spark-" + name.replace("-", "")[:32].ljust(32, "0")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": SPARK, "labels": labels},
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:test"}]}}


def terminate(kube, name, ago_s=3600):
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s - 60))
    patch = {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "spark-kubernetes-driver", "ready": False, "restartCount": 0, "image": "spark:test", "imageID": "",
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start, "finishedAt": at}}}]}}
    kube.ok("PATCH", f"/api/v1/namespaces/{SPARK}/pods/{name}/status", patch, ctype="application/merge-patch+json")


def make_pods(kube, prefix, n):
    """n terminated driver pods, plus a running driver and a terminated non-driver (decoys)."""
    names = [f"{prefix}-{i:02d}" for i in range(n)]
    for name in names:
        kube.ok("POST", f"/api/v1/namespaces/{SPARK}/pods", driver_pod(name))
        terminate(kube, name)
    kube.ok("POST", f"/api/v1/namespaces/{SPARK}/pods", driver_pod(prefix + "-running"))
    kube.ok("POST", f"/api/v1/namespaces/{SPARK}/pods", driver_pod(prefix + "-no-selector", app_selector=False))
    terminate(kube, prefix + "-no-selector")
    return names


def exists(kube, name):
    return kube.request("GET", f"/api/v1/namespaces/{SPARK}/pods/{name}")[0] == 200


class Fleet:
    """Two replicas of the image, as the Deployment runs them: podman on the host network, the
    chart's ServiceAccount token, CA and namespace where Kubernetes mounts them, the config read
    only, a read-only root, no capability, the numeric user of the image."""

    def __init__(self, env, kube, conf_text, work):
        self.env, self.kube, self.work = env, kube, work
        self.image = f"localhost/podsweep:{env['VERSION']}"
        self.ids = {}
        self.cleaned = []
        sa_dir = os.path.join(work, "serviceaccount")
        os.makedirs(sa_dir, exist_ok=True)
        with open(os.path.join(sa_dir, "token"), "w") as f:
            f.write(kube.sa_token(NS, "podsweep"))
        with open(kube.ca) as src, open(os.path.join(sa_dir, "ca.crt"), "w") as dst:
            dst.write(src.read())
        with open(os.path.join(sa_dir, "namespace"), "w") as f:
            f.write(NS)
        conf_dir = os.path.join(work, "conf")
        os.makedirs(conf_dir, exist_ok=True)
        with open(os.path.join(conf_dir, "kyuubi-defaults.conf"), "w") as f:
            f.write(conf_text)
        for d in (sa_dir, conf_dir):
            os.chmod(d, 0o755)
            for n in os.listdir(d):
                os.chmod(os.path.join(d, n), 0o644)
        self.sa_dir, self.conf_dir = sa_dir, conf_dir
        host, port = kube.server.removeprefix("https://").rsplit(":", 1)
        self.api_host, self.api_port = host, port

    def podman(self, *args, check_rc=True):
        return run("podman", *args, check_rc=check_rc, env={**os.environ, "CONTAINERS_CONF": self.env["CONTAINERS_CONF"]})

    def start(self, name, port, extra_conf=()):
        args = ["run", "-d", "--replace", "--name", name, "--hostname", name, "--network", "host", "--read-only",
                "--cap-drop", "all", "--security-opt", "no-new-privileges", "--user", "65532:65532",
                "-e", f"KUBERNETES_SERVICE_HOST={self.api_host}", "-e", f"KUBERNETES_SERVICE_PORT={self.api_port}",
                "-v", f"{self.sa_dir}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
                "-v", f"{self.conf_dir}:/etc/kyuubi/conf:ro", self.image,
                "--config", "/etc/kyuubi/conf/kyuubi-defaults.conf", "--listen", f"127.0.0.1:{port}",
                "--conf", P + "watch.kind=ALL"]
        for c in extra_conf:
            args += ["--conf", c]
        self.ids[name] = (self.podman(*args).stdout.strip(), port)
        wait(f"{name} answers /livez", 30, lambda: http(port, "/livez")[0] == 200)

    def stop(self, name):
        cid, _ = self.ids.pop(name)
        self.podman("stop", "-t", "15", cid)
        code = self.podman("inspect", "-f", "{{.State.ExitCode}}", cid).stdout.strip()
        logs = self.podman("logs", cid, check_rc=False).stderr
        self.podman("rm", cid, check_rc=False)
        return code, logs

    def logs(self, name):
        return self.podman("logs", self.ids[name][0], check_rc=False).stderr

    def cli(self, *args):
        """A one-off `podsweep <verb>` from the image (no shell needed)."""
        return self.podman("run", "--rm", "--network", "host", "--read-only", "--cap-drop", "all", "--user", "65532:65532",
                           "-v", f"{self.conf_dir}:/etc/kyuubi/conf:ro", self.image, *args,
                           "--config", "/etc/kyuubi/conf/kyuubi-defaults.conf", check_rc=False)

    def close(self):
        for name in list(self.ids):
            try:
                self.stop(name)
            except Exception:
                pass


def http(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def leader_of(fleet):
    leads = [n for n, (_, port) in fleet.ids.items()
             if f'podsweep_leader{{context="",namespace="{SPARK}"}} 1' in http(port, "/metrics")[1]]
    return leads[0] if len(leads) == 1 else None


def rollout(env, kube, fleet):
    names = make_pods(kube, "dry", 12)
    # (a) dryRun=true: every server elects, classifies and says what it would delete; nothing goes.
    for i, name in enumerate(("podsweep-0", "podsweep-1")):
        fleet.start(name, env["PORTS"][i], [P + "dryRun=true"])
    leader = wait("one leader", 60, lambda: leader_of(fleet))
    def dry_runs():
        d = [r for r in kube.pod_deletes(SPARK) if r["dry_run"] and r["name"] in names]
        return d if {r["name"] for r in d} == set(names) else None
    dry = wait("a dry-run DELETE per pod", 60, dry_runs)
    # The audit log is written before each answer (blocking mode): what it holds now is complete.
    real = [r for r in kube.pod_deletes(SPARK) if not r["dry_run"]]
    would = fleet.logs(leader).count("Would delete")
    follower = next(n for n in fleet.ids if n != leader)
    check(not real and all(exists(kube, n) for n in names) and would >= len(names)
          and fleet.logs(follower).count("Would delete") == 0,
          f"dryRun=true: {len(dry)} dry-run DELETEs for {len(names)} pods, 0 real DELETEs in the audit log from every "
          f"server, every pod still there; {would} 'Would delete' lines from the leader {leader}, 0 from {follower}",
          f"real {real}, would {would}")
    metrics = http(fleet.ids[leader][1], "/metrics")[1]
    figures["dry_run"] = {"pods": len(names), "dry_run_deletes": len(dry), "real_deletes": len(real),
                          "would_delete_lines": would}
    check(f'podsweep_tracked_pods{{context="",namespace="{SPARK}"}}' in metrics, "dryRun=true: the leader's metrics track the pods")
    # (b) on: the same fleet without dryRun, one replica at a time (a rolling update).
    for i, name in enumerate(("podsweep-0", "podsweep-1")):
        code, _ = fleet.stop(name)
        check(code == "0", f"{name} stopped by SIGTERM, exit {code}")
        fleet.start(name, env["PORTS"][i])
    wait("every driver pod deleted", 60, lambda: not any(exists(kube, n) for n in names))
    real = [r for r in kube.pod_deletes(SPARK) if not r["dry_run"] and r["name"] in names]
    per_pod = {n: sum(1 for r in real if r["name"] == n) for n in names}
    decoys = [n for n in ("dry-running", "dry-no-selector") if not exists(kube, n)]
    check(all(c == 1 for c in per_pod.values()) and all(r["code"] == 200 for r in real) and not decoys
          and all(r["user"] == SA for r in real),
          f"then on: {len(real)} DELETEs for {len(names)} pods by the audit log, one each, all 200, all by {SA}; "
          f"the running driver and the pod without spark-app-selector kept", f"{per_pod} {decoys}")
    figures["on"] = {"pods": len(names), "deletes": len(real), "per_pod_max": max(per_pod.values())}
    leader = wait("one leader", 60, lambda: leader_of(fleet))
    port = fleet.ids[leader][1]
    fleet.cleaned = names
    for path, want in (("/livez", "ok\n"), ("/healthz", "ok\n")):
        code, body = http(port, path)
        check(code == 200 and body.startswith(want.strip()), f"probe {path}: {code} {body.strip()[:40]}")
    return leader


def emergency_stop(env, kube, fleet, zk):
    docs, _ = render(env, zk, ("--set", "rbac.delete=false"))
    role = next(d for d in docs if d["kind"] == "Role")
    code, out, _ = kube.apply(role)
    check(code == 200 and "delete" not in role["rules"][0]["verbs"], "emergency stop: the Role applied without delete (no restart)",
          f"{code} {out}")
    names = make_pods(kube, "stop", 4)
    wait("403s for the held pods", 60,
         lambda: {r["name"] for r in kube.pod_deletes(SPARK) if r["code"] == 403} >= set(names))
    kept = all(exists(kube, n) for n in names)
    leader = leader_of(fleet)
    metrics = http(fleet.ids[leader][1], "/metrics")[1] if leader else ""
    forbidden = [l for l in metrics.splitlines() if 'outcome="forbidden"' in l and "total" in l]
    check(kept and forbidden, f"while stopped: every DELETE answered 403, the {len(names)} pods kept; {forbidden[:1]}")
    docs, _ = render(env, zk)
    role = next(d for d in docs if d["kind"] == "Role")
    kube.apply(role)
    wait("the held pods deleted once delete is granted again", 60, lambda: not any(exists(kube, n) for n in names))
    ok("resumed: the Role with delete applied again, the held pods deleted at their next retry (forbidden.retryInterval)")


def status_and_uninstall(kube, fleet):
    # Much later (the emergency stop came between): still one DELETE per pod of the rollout.
    later = [r for r in kube.pod_deletes(SPARK) if not r["dry_run"] and r["name"] in fleet.cleaned]
    check(len(later) == len(fleet.cleaned), f"after the emergency stop too: {len(later)} DELETEs for the "
          f"{len(fleet.cleaned)} pods of the rollout, no second one")
    r = fleet.cli("status")
    print(r.stdout, flush=True)
    figures["podsweep_status"] = r.stdout
    check(r.returncode == 0 and "participants  2" in r.stdout and "leads  podsweep-" in r.stdout,
          "podsweep status (from the image): the scope's leader and 2 participants", r.stderr)
    r = fleet.cli("uninstall")
    check(r.returncode == 1 and "still campaign" in r.stderr, "podsweep uninstall refuses while the daemons run", r.stderr)
    for name in list(fleet.ids):
        code, logs = fleet.stop(name)
        check(code == "0" and "SIGTERM received" in logs, f"{name}: SIGTERM, leadership released, exit 0", logs[-500:])
    r = fleet.cli("uninstall")
    check(r.returncode == 0 and r.stdout.startswith("removed /kyuubi-chart-podsweep"), f"podsweep uninstall: {r.stdout.strip()}", r.stderr)
    r = fleet.cli("status", "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["scopes"] == [], "nothing of podsweep left in ZooKeeper", r.stdout)


def main():
    env = dict(os.environ)
    env["PORTS"] = [int(p) for p in env["PODSWEEP_CHART_PORTS"].split(",")]
    env["VERSION"] = env["PODSWEEP_VERSION"]
    env["HELM"], env["PROMTOOL"] = env["PODSWEEP_HELM"], env["PODSWEEP_PROMTOOL"]
    kube = Kube.from_dir(env["PODSWEEP_KUBE_DIR"])
    zk = env["PODSWEEP_ZK"]
    work = tempfile.mkdtemp(prefix="podsweep-chart-")
    fleet = None
    try:
        lint_and_template(env)
        for name, labels in ((NS, {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}),
                             (SPARK, {}), (OTHER, {})):
            kube.namespace(name, labels)
        install_monitoring_crds(kube)
        docs, conf = render(env, zk)
        apply_chart(kube, docs)
        sar_checks(kube)
        fleet = Fleet(env, kube, conf, work)
        rollout(env, kube, fleet)
        emergency_stop(env, kube, fleet, zk)
        status_and_uninstall(kube, fleet)
    except Exception as e:  # a step that cannot run fails the test
        bad(f"{type(e).__name__}: {e}")
        for name in list(fleet.ids) if fleet else []:
            print(f"---- the last lines of {name}'s log:\n" + "\n".join(fleet.logs(name).splitlines()[-15:]), flush=True)
    finally:
        if fleet:
            fleet.close()
    TALLY.end("chart test", figures, "podsweep", env)


if __name__ == "__main__":
    main()
