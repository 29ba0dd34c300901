"""charts/podsweep rendered and refused: what `helm template` must make of the values an operator
gives, and what it must refuse, saying why (scripts/chart test, step 1)."""

import os
import re

import yaml

import chart_readme
from kubeapi import helm, load_all

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(ROOT, "charts", "podsweep")
P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
INIT = "kyuubi.kubernetes.client.initialize.list"


def template(env, *args, ns="kyuubi", check=True):
    return helm(env["HELM"], "template", "podsweep", CHART, "-n", ns, *args, check=check)


def objects(env, *args, ns="kyuubi"):
    return load_all(template(env, *args, ns=ns).stdout)


def args_of(docs):
    dep = next(d for d in docs if d["kind"] == "Deployment")
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


def roles(docs):
    return {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}


def refused(env, why_part, *args):
    r = template(env, *args, check=False)
    return r.returncode != 0 and why_part in r.stderr, r.stderr.strip()[-300:]


def scopes_and_coordination(env, t):
    # §1: the daemons are told the namespaces of the Roles.
    docs = objects(env)
    t.check(f"{INIT}=:kyuubi" in args_of(docs) and list(roles(docs)) == ["kyuubi"],
            "default: the Role in the release namespace, and the daemons told it (--conf ...initialize.list=:kyuubi)")
    docs = objects(env, "--set", "rbac.namespaces={spark-a,spark-b}")
    t.check(f"{INIT}=:spark-a,:spark-b" in args_of(docs) and sorted(roles(docs)) == ["spark-a", "spark-b"],
            "rbac.namespaces={spark-a,spark-b}: a Role in each, and --conf ...initialize.list=:spark-a,:spark-b")
    docs = objects(env, "--set-string", f"conf.{INIT.replace('.', chr(92) + '.')}=:x\\,prod:y")
    a = args_of(docs)
    t.check(not any(x.startswith(INIT + "=:kyuubi") for x in a) and list(roles(docs)) == ["x"],
            "scopes set in conf: taken as they are, the Roles follow them (x; prod:y names a context, another cluster's RBAC)",
            f"{a} {list(roles(docs))}")
    inline = "kyuubi.ha.addresses=zk:2181\nkyuubi.kubernetes.namespace=spark-jobs\n"
    docs = objects(env, "--set-string", f"kyuubiConf.inline={inline}")
    t.check(list(roles(docs)) == ["spark-jobs"] and not any(x.startswith(INIT) for x in args_of(docs)),
            "an inline file naming kyuubi.kubernetes.namespace: the Role follows it, nothing passed over it")
    ok, why = refused(env, "differ", "--set-string", f"kyuubiConf.inline={inline}", "--set", "rbac.namespaces={other}")
    t.check(ok, f"rbac.namespaces and the inline file's namespace differ: refused ({why[-120:]})")
    ok, why = refused(env, "names no namespace", "--set-string", f"conf.{INIT.replace('.', chr(92) + '.')}=prod")
    t.check(ok, f"a conf scope without a namespace: refused ({why[-120:]})")
    # Issue 32 §3: every way the chart gets its config, every HA key the daemon accepts.
    ok, why = refused(env, "kyuubi.ha.zookeeper.quorum", "--set-string", "kyuubiConf.inline=kyuubi.kubernetes.namespace=x")
    t.check(ok, "coordination ha: an inline file without kyuubi.ha.addresses or kyuubi.ha.zookeeper.quorum is refused")
    for key in ("kyuubi.ha.addresses", "kyuubi.ha.zookeeper.quorum"):
        r = template(env, "--set-string", f"kyuubiConf.inline={key}=zk:2181\nkyuubi.kubernetes.namespace=x", check=False)
        t.check(r.returncode == 0, f"coordination ha: an inline file with {key} is accepted", r.stderr[-300:])
    r = template(env, "--set-string", "kyuubiConf.inline=kyuubi.kubernetes.namespace=x",
                 "--set-string", "conf.kyuubi\\.ha\\.addresses=zk:2181", check=False)
    t.check(r.returncode == 0, "coordination ha: the HA key in conf (over an inline file without it) is accepted", r.stderr[-300:])
    r = template(env, "--set", "kyuubiConf.secret=kyuubi-conf", check=False)
    t.check(r.returncode == 0 and "secretName: kyuubi-conf" in r.stdout,
            "a Secret source: mounted, not checked at render time (the daemon's own refusal covers it)", r.stderr[-300:])
    ok, why = refused(env, "replicaCount must be 2 or more", "--set", "replicaCount=1")
    t.check(ok, "coordination ha with replicaCount=1: refused, saying why")
    ok, why = refused(env, "replicaCount must be 1", "--set", "coordination=single")
    t.check(ok, "coordination single with 2 replicas: refused, saying why")
    docs = objects(env, "--set", "coordination=single", "--set", "replicaCount=1",
                   "--set-string", "kyuubiConf.inline=kyuubi.kubernetes.namespace=x")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    t.check(f"{P}ha.singleServer=true" in args_of(docs) and dep["spec"]["strategy"]["type"] == "Recreate",
            "coordination single: an inline file without an HA key is accepted, ...ha.singleServer=true passed, strategy Recreate")
    ok, why = refused(env, "single", "--set-string", f"conf.{(P + 'ha.singleServer').replace('.', chr(92) + '.')}=true")
    t.check(ok, "coordination ha with ...ha.singleServer=true in conf: refused")


def rest(env, t):
    ok, why = refused(env, "replicaCont", "--set", "replicaCont=3")
    t.check(ok, f"values.schema.json: a typo fails ({why[-150:]})")
    ok, why = refused(env, "logFormat", "--set", "logFormat=xml")
    t.check(ok, "values.schema.json: logFormat must be text or json")
    ok, why = refused(env, "both enabled", "--set", "metrics.serviceMonitor.enabled=true",
                      "--set", "metrics.podMonitor.enabled=true")
    t.check(ok, "ServiceMonitor and PodMonitor at once: refused")
    kinds = [d["kind"] for d in objects(env, "--set", "metrics.podMonitor.enabled=true")]
    t.check("PodMonitor" in kinds and "ServiceMonitor" not in kinds, "metrics.podMonitor alone: a PodMonitor, no ServiceMonitor")
    docs = objects(env, "--set", "events.enabled=true")
    rules = roles(docs)["kyuubi"]["rules"]
    t.check(any(r["apiGroups"] == ["events.k8s.io"] and r["verbs"] == ["create", "patch"] for r in rules)
            and f"{P}events.enabled=true" in args_of(docs),
            "events.enabled: the Role grants create, patch on events.k8s.io events and the daemons get the key")
    t.check(not any("events.k8s.io" in r["apiGroups"] for r in roles(objects(env))["kyuubi"]["rules"]),
            "events off (the default): no Events grant")
    docs = objects(env, "--set", "priorityClassName=critical", "--set", "logFormat=json",
                   "--set", "extraEnv[0].name=RUST_LOG", "--set", "extraEnv[0].value=podsweep=debug",
                   "--set", "envFrom[0].secretRef.name=zk-auth",
                   "--set", "extraVolumes[0].name=tls", "--set", "extraVolumes[0].secret.secretName=etcd-tls",
                   "--set", "extraVolumeMounts[0].name=tls", "--set", "extraVolumeMounts[0].mountPath=/tls",
                   "--set", "topologySpreadConstraints[0].maxSkew=1",
                   "--set", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                   "--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway")
    spec = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    c = spec["containers"][0]
    tsc = spec["topologySpreadConstraints"][0]
    t.check(spec["priorityClassName"] == "critical" and c["env"][0]["name"] == "RUST_LOG" and c["envFrom"][0]["secretRef"]
            and any(v["name"] == "tls" for v in spec["volumes"]) and c["volumeMounts"][1]["mountPath"] == "/tls"
            and tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "podsweep"
            and c["args"][c["args"].index("--log-format") + 1] == "json",
            "priorityClassName, extraEnv, envFrom, extraVolumes/Mounts, topologySpreadConstraints (labelSelector filled in), logFormat")
    test_pod = next(d for d in objects(env) if d["kind"] == "Pod")
    t.check(test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
            and test_pod["spec"]["initContainers"][0]["args"][0] == "check" and test_pod["spec"]["containers"][0]["args"][0] == "status",
            "a helm test hook: `podsweep check`, then `podsweep status`, with the daemons' --config and --conf")
    pdb = next(d for d in objects(env) if d["kind"] == "PodDisruptionBudget")
    t.check(pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow",
            "PodDisruptionBudget: not-ready daemons may always be evicted (a node drain during an emergency stop)")
    problems = chart_readme.check()
    t.check(not problems, "charts/podsweep/README.md's values table is values.yaml's, every value described and in "
            "values.schema.json", "; ".join(problems))
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    t.check(chart["version"] == env["VERSION"] and chart["appVersion"] == env["VERSION"],
            f"Chart.yaml version and appVersion {chart['appVersion']} = the crate's {env['VERSION']}")


def runbooks(env, t):
    """Every alert of docs/alerts/podsweep-rules.yaml has a runbook_url into a heading of
    docs/operations.md; the chart prefixes runbookBaseUrl."""
    with open(os.path.join(ROOT, "docs", "alerts", "podsweep-rules.yaml")) as f:
        groups = yaml.safe_load(f)["groups"]
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        anchors = {slug(m) for m in re.findall(r"^#+ (.+)$", f.read(), re.M)}
    bad = []
    for g in groups:
        for r in g["rules"]:
            url = (r.get("annotations") or {}).get("runbook_url", "")
            page, _, anchor = url.partition("#")
            if page != "docs/operations.md" or anchor not in anchors:
                bad.append(f"{r['alert']}: {url!r}")
    n = sum(len(g["rules"]) for g in groups)
    t.check(not bad, f"runbook_url on every alert ({n}), each a heading of docs/operations.md", "; ".join(bad))
    docs = objects(env, "--set", "metrics.prometheusRule.enabled=true",
                   "--set", "metrics.prometheusRule.runbookBaseUrl=https://docs.example/podsweep/v1/")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]]
    t.check(urls and all(u.startswith("https://docs.example/podsweep/v1/docs/operations.md#") for u in urls),
            f"metrics.prometheusRule.runbookBaseUrl prefixes each runbook_url ({urls[0] if urls else ''})")


def dashboard(env, t):
    """metrics.grafanaDashboard: a ConfigMap holding docs/dashboards/podsweep.json as it is (the chart's
    files/ links to it), labelled for the Grafana sidecar; none by default."""
    t.check(not any(d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard")
                    for d in objects(env)), "metrics.grafanaDashboard off (the default): no dashboard ConfigMap")
    docs = objects(env, "--set", "metrics.grafanaDashboard.enabled=true",
                   "--set", "metrics.grafanaDashboard.namespace=monitoring",
                   "--set", "metrics.grafanaDashboard.annotations.grafana_folder=Kyuubi")
    cms = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    with open(os.path.join(ROOT, "docs", "dashboards", "podsweep.json")) as f:
        source = f.read().strip()
    cm = cms[0] if len(cms) == 1 else {"metadata": {}, "data": {}}
    t.check(cm["data"].get("podsweep.json") == source and cm["metadata"].get("namespace") == "monitoring"
            and cm["metadata"].get("annotations") == {"grafana_folder": "Kyuubi"},
            "metrics.grafanaDashboard: one ConfigMap labelled grafana_dashboard=\"1\" in its namespace, with its "
            "annotations, holding docs/dashboards/podsweep.json unchanged")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")



def apf(env, t):
    """Issue 35 §2: API Priority and Fairness, opt-in: a FlowSchema that takes the daemons' requests
    on the pods of the namespaces cleaned (and only those) to a limited level with queues."""
    kinds = [d["kind"] for d in objects(env)]
    t.check("FlowSchema" not in kinds and "PriorityLevelConfiguration" not in kinds,
            "apf off (the default): no FlowSchema, no PriorityLevelConfiguration (cluster-scoped objects)")
    docs = objects(env, "--set", "apf.enabled=true", "--set", "rbac.namespaces={spark-a,spark-b}")
    fs = next(d for d in docs if d["kind"] == "FlowSchema")
    pl = next(d for d in docs if d["kind"] == "PriorityLevelConfiguration")
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    spec, lim = fs["spec"], pl["spec"]["limited"]
    rule = spec["rules"][0]
    t.check(fs["apiVersion"] == pl["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
            and spec["priorityLevelConfiguration"]["name"] == pl["metadata"]["name"]
            and spec["matchingPrecedence"] < 9000 and spec["distinguisherMethod"]["type"] == "ByNamespace"
            and len(spec["rules"]) == 1
            and rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {
                "name": sa["metadata"]["name"], "namespace": "kyuubi"}}]
            and rule["resourceRules"] == [{"apiGroups": [""], "resources": ["pods"],
                                           "verbs": ["delete", "get", "list", "watch"],
                                           "namespaces": ["spark-a", "spark-b"]}]
            and not rule.get("nonResourceRules"),
            f"apf.enabled: a FlowSchema (precedence {spec['matchingPrecedence']}, before the built-in service-accounts' "
            f"9000) of the daemons' ServiceAccount, its delete/get/list/watch of pods in the namespaces cleaned only",
            json_dump(fs))
    t.check(pl["spec"]["type"] == "Limited" and lim["nominalConcurrencyShares"] < 20
            and lim["borrowingLimitPercent"] == 0 and lim["limitResponse"]["type"] == "Queue"
            and lim["limitResponse"]["queuing"]["handSize"] <= lim["limitResponse"]["queuing"]["queues"],
            f"apf.enabled: a Limited level below interactive traffic ({lim['nominalConcurrencyShares']} shares against "
            "global-default's 20, no borrowing), with queues", json_dump(pl))
    docs = objects(env, "--set", "apf.enabled=true", "--set", "apf.extraServiceAccounts[0].name=kyuubi",
                   "--set", "apf.extraServiceAccounts[0].namespace=kyuubi")
    rules = next(d for d in docs if d["kind"] == "FlowSchema")["spec"]["rules"]
    t.check(len(rules) == 2 and rules[1]["resourceRules"][0]["verbs"] == ["delete"]
            and rules[1]["subjects"][0]["serviceAccount"] == {"name": "kyuubi", "namespace": "kyuubi"},
            "apf.extraServiceAccounts (Kyuubi servers with the patch or the drop-in): their DELETEs only")
    docs = objects(env, "--set", "apf.enabled=true", "--set", "apf.priorityLevel.create=false",
                   "--set", "apf.priorityLevel.name=batch")
    t.check([d["kind"] for d in docs].count("PriorityLevelConfiguration") == 0
            and next(d for d in docs if d["kind"] == "FlowSchema")["spec"]["priorityLevelConfiguration"]["name"] == "batch",
            "apf.priorityLevel.create=false with a name: the FlowSchema points at that level, none created")
    ok, why = refused(env, "apf.priorityLevel.name must name", "--set", "apf.enabled=true",
                      "--set", "apf.priorityLevel.create=false")
    t.check(ok, f"apf.priorityLevel.create=false without a name: refused ({why.split(chr(10))[0][-100:]})")
    ok, why = refused(env, "must not exceed", "--set", "apf.enabled=true", "--set", "apf.priorityLevel.handSize=20")
    t.check(ok, f"apf handSize above queues: refused, as the API server would ({why.split(chr(10))[0][-100:]})")
    ok, why = refused(env, "apf", "--set", "apf.enabled=true", "--set", "apf.verbs={create}")
    t.check(ok, "values.schema.json: apf.verbs only among delete, get, list, watch")


def json_dump(obj):
    import json
    return json.dumps(obj, sort_keys=True)[:600]


def all_checks(env, t):
    apf(env, t)
    scopes_and_coordination(env, t)
    rest(env, t)
    runbooks(env, t)
    dashboard(env, t)
