"""scripts/chart test: charts/podsweep, the daemon's image and the operator's pages on the local
kube-apiserver.

Run by scripts/chart (which starts an API server and ZooKeeper and passes their addresses);
prints `ok` / `FAIL` lines and ends with "chart test: N passed, M failed" and one JSON line of
figures (commit, date, API server). Steps:
  1. helm lint and helm template: the kinds, the PrometheusRule = docs/alerts' group (promtool),
     and what the chart makes of an operator's values or refuses (chart_checks.py).
  2. Server-side apply of the chart (dryRun=All, then for real) into a namespace whose Pod Security
     admission enforces `restricted`; a Pod made from the Deployment's template is admitted there,
     a privileged one is refused (so the check is real).
  3. SubjectAccessReviews of the chart's ServiceAccount: what it needs, and what it must not do.
  4. The ConfigMap Kyuubi 1.12.0's own chart makes: the image refuses it alone (no namespace key)
     and accepts it with the chart's arguments.
  5. The operator's pages, each on a fresh API server with Kyuubi installed by its chart and a
     kubelet stand-in: every `bash` block run as written (chart_pages.py, chart_scenarios.py).
PODSWEEP_CHART_PAGES=docs/rollout.md,... runs only those pages.
"""

import json
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from kubeapi import Kube, KubeError, Tally, helm, load_all, wait  # noqa: E402
import chart_checks  # noqa: E402
import chart_pages  # noqa: E402
import chart_scenarios  # noqa: E402

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
    every = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
             "--set", "kyuubiConf.inline=kyuubi.ha.addresses=zk:2181", "--set", "events.enabled=true",
             "--set", "apf.enabled=true"]
    r = helm(h, "lint", "--strict", CHART, *every, check=False)
    check(r.returncode == 0, "helm lint --strict with every optional object", r.stdout + r.stderr)
    docs = load_all(helm(h, "template", "podsweep", CHART, "-n", NS, *every).stdout)
    kinds = sorted(d["kind"] for d in docs)
    want = sorted(["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service",
                   "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "Pod", "FlowSchema",
                   "PriorityLevelConfiguration"])
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
    chart_checks.all_checks(env, TALLY)
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
               "--set", "metrics.prometheusRule.enabled=true", "--set", "apf.enabled=true",
               "--set", f"image.tag={env['VERSION']}", *extra).stdout
    # The helm test hook's Pod is not part of the release's objects.
    return [d for d in load_all(out) if d["kind"] != "Pod"], conf


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
        ("create", "events", SPARK, False, "events.k8s.io"),
        ("get", "configmaps/kube-root-ca.crt", SPARK, True), ("get", "configmaps/other", SPARK, False),
        ("list", "configmaps", SPARK, False),
    ]
    answers = []
    for verb, res, ns, expected, *g in want:
        group = g[0] if g else ("coordination.k8s.io" if res == "leases" else "")
        res_, _, name = res.partition("/")
        # A yes may take a moment to come (can_soon); the first ones asked are yeses, so by the
        # time a no is asked the chart's Roles have reached the authorizer.
        got = (kube.can_soon if expected else kube.can)(SA, verb, res_, ns, group=group, name=name)
        answers.append(f"{verb} {res}{' (' + group + ')' if group else ''} in {ns or 'every namespace'}: {'yes' if got else 'no'}")
        if got != expected:
            bad(f"SubjectAccessReview {SA} {verb} {res} in {ns or 'every namespace'}: {got}, expected {expected}")
            return
    figures["subject_access_reviews"] = answers
    ok(f"SubjectAccessReview of {SA}: " + "; ".join(answers))


def kyuubi_chart_configmap(env, kube, work):
    """Issue 33 §1: Kyuubi 1.12.0's own chart makes its ConfigMap without kyuubi.kubernetes.namespace
    (it passes it on Kyuubi's command line). The daemon given that file alone refuses to start,
    naming the key (it used to clean `default`); with the chart's --conf it takes the namespace of
    its Roles."""
    values = os.path.join(work, "kyuubi-values.yaml")
    with open(values, "w") as f:
        yaml.safe_dump(chart_pages.kyuubi_values(env["PODSWEEP_ZK"], "kyuubi-cm-check"), f)
    docs = load_all(helm(env["HELM"], "template", "kyuubi", env["KYUUBI_CHART"], "-n", "kyuubi", "-f", values).stdout)
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kyuubi")
    text = cm["data"]["kyuubi-defaults.conf"]
    conf_dir = os.path.join(work, "kyuubi-cm")
    os.makedirs(conf_dir)
    os.chmod(conf_dir, 0o755)
    with open(os.path.join(conf_dir, "kyuubi-defaults.conf"), "w") as f:
        f.write(text)
    os.chmod(os.path.join(conf_dir, "kyuubi-defaults.conf"), 0o644)
    image = f"localhost/podsweep:{env['VERSION']}"
    base = ["podman", "run", "--rm", "--network", "none", "--read-only", "--cap-drop", "all", "--user", "65532:65532",
            "-v", f"{conf_dir}:/etc/kyuubi/conf:ro", image]
    denv = {**os.environ, "CONTAINERS_CONF": env["CONTAINERS_CONF"]}
    r = run(*base, "--config", "/etc/kyuubi/conf/kyuubi-defaults.conf", "--listen", "127.0.0.1:0",
            "--conf", P + "watch.kind=ALL", check_rc=False, env=denv, timeout=60)
    refused_line = r.stderr.strip()
    check(r.returncode == 2 and "kyuubi.kubernetes.namespace: not set" in r.stderr,
          "Kyuubi's chart-made ConfigMap alone: the daemon (the image) refuses to start, exit 2, naming "
          f"kyuubi.kubernetes.namespace instead of cleaning default: {r.stderr.strip()[:140]}", r.stdout + r.stderr)
    chart_docs = load_all(helm(env["HELM"], "template", "podsweep", CHART, "-n", "kyuubi").stdout)
    args = next(d for d in chart_docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    confs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--conf"]
    conf_args = [x for c in confs for x in ("--conf", c)]
    r = run(*base, "check", "--config", "/etc/kyuubi/conf/kyuubi-defaults.conf", *conf_args, check_rc=False, env=denv, timeout=60)
    check(r.returncode == 0 and "scopes         :kyuubi" in r.stdout,
          "the same file with the chart's --conf arguments: `podsweep check` accepts it, scope :kyuubi (the Role's)",
          r.stdout + r.stderr)
    figures["kyuubi_chart_configmap"] = {"alone": refused_line, "with_chart_args": r.stdout.splitlines()[:5]}


def main():
    env = dict(os.environ)
    env["VERSION"] = env["PODSWEEP_VERSION"]
    env["HELM"], env["PROMTOOL"] = env["PODSWEEP_HELM"], env["PODSWEEP_PROMTOOL"]
    env["ZK"], env["ROOT"] = env["PODSWEEP_ZK"], ROOT
    env["KYUUBI_CHART"] = env["PODSWEEP_KYUUBI_CHART"]
    kube = Kube.from_dir(env["PODSWEEP_KUBE_DIR"])
    zk = env["PODSWEEP_ZK"]
    work = tempfile.mkdtemp(prefix="podsweep-chart-")
    only = [p for p in env.get("PODSWEEP_CHART_PAGES", "").split(",") if p]
    try:
        lint_and_template(env)
        for name, labels in ((NS, {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}),
                             (SPARK, {}), (OTHER, {})):
            kube.namespace(name, labels)
        install_monitoring_crds(kube)
        docs, conf = render(env, zk)
        apply_chart(kube, docs)
        sar_checks(kube)
        kyuubi_chart_configmap(env, kube, work)
    except Exception as e:  # a step that cannot run fails the test
        bad(f"{type(e).__name__}: {e}")
    for rel in chart_pages.PAGES:
        if only and rel not in only:
            continue
        page = None
        try:
            print(f"---- {rel}", flush=True)
            page = chart_pages.Page(env, TALLY, figures, rel)
            chart_scenarios.SCENARIOS[rel](page)
        except Exception as e:
            bad(f"{rel}: {type(e).__name__}: {e}")
            if page:
                for n in list(page.daemons()):
                    print(f"---- the last lines of {n}'s log:\n" + "\n".join(page.logs_of(n).splitlines()[-12:]), flush=True)
                for line in page.kubelet.errors[:5]:
                    print(f"---- kubelet stand-in: {line}", flush=True)
        finally:
            if page:
                page.close()
    subprocess.run(["rm", "-rf", work])
    TALLY.end("chart test", figures, "podsweep", env)


if __name__ == "__main__":
    main()
