"""scripts/chart kyuubi: Kyuubi 1.12.0's own chart with podsweep's drop-in values, on the local
kube-apiserver; `--write-alerts` regenerates charts/kyuubi-values/podsweep-alerts.yaml.

Kyuubi's chart is read from Kyuubi's source release (never copied into this repository) and
rendered with charts/kyuubi-values/: the drop-in by an init container, and by an image layer."""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(__file__))
from kubeapi import Kube, KubeError, Tally, helm, load_all  # noqa: E402
from chart_pages import kyuubi_argv  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VALUES = os.path.join(ROOT, "charts", "kyuubi-values")
ALERTS = os.path.join(VALUES, "podsweep-alerts.yaml")
P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
TALLY = Tally()
ok, bad, check = TALLY.ok, TALLY.bad, TALLY.check
figures = {}


def alerts_text():
    """podsweep-alerts.yaml: the group podsweep-kyuubi of docs/alerts/podsweep-rules.yaml as
    Kyuubi's chart takes it (metrics.prometheusRule.groups)."""
    with open(os.path.join(ROOT, "docs", "alerts", "podsweep-rules.yaml")) as f:
        groups = [g for g in yaml.safe_load(f)["groups"] if g["name"] == "podsweep-kyuubi"]
    head = ("# GENERATED from docs/alerts/podsweep-rules.yaml (group podsweep-kyuubi) by `scripts/chart alerts`;\n"
            "# `scripts/chart kyuubi` fails while the two differ. Values for Apache Kyuubi 1.12.0's chart: its\n"
            "# PrometheusRule (metrics.prometheusRule) with podsweep's alerts on the drop-in's (or the patch's)\n"
            "# gauges, which Kyuubi's Prometheus reporter exposes.\n")
    body = {"metrics": {"enabled": True, "reporters": "PROMETHEUS",
                        "prometheusRule": {"enabled": True, "groups": groups}}}
    class Dumper(yaml.SafeDumper):
        pass

    # Multi-line expressions as block scalars, as docs/alerts writes them.
    Dumper.add_representer(str, lambda d, v: d.represent_scalar(
        "tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))
    return head + yaml.dump(body, Dumper=Dumper, sort_keys=False, width=100)


def podman(env, *args, check_rc=True):
    r = subprocess.run(["podman", *args], capture_output=True, text=True, env=env)
    if check_rc and r.returncode != 0:
        raise KubeError(f"podman {' '.join(args)}: {r.stderr.strip()[-1500:]}")
    return r


def kyuubi_chart(tarball, tools, into):
    """Kyuubi 1.12.0's charts/kyuubi: from the source release's tarball, else from the copy of the
    release scripts/setup kyuubi unpacked (sha256-checked) into the tool cache."""
    if os.path.exists(tarball):
        with tarfile.open(tarball) as t:
            members = [m for m in t.getmembers() if "/charts/kyuubi/" in m.name]
            t.extractall(into, members=members)
        return os.path.join(into, "apache-kyuubi-1.12.0", "charts", "kyuubi")
    cached = os.path.join(tools, "kyuubi-1.12.0", "src", "charts", "kyuubi")
    if os.path.isdir(cached):
        out = os.path.join(into, "apache-kyuubi-1.12.0", "charts", "kyuubi")
        shutil.copytree(cached, out)
        return out
    raise KubeError(f"Kyuubi 1.12.0's chart: neither {tarball} (KYUUBI_SRC_TARBALL) nor {cached} "
                    "(scripts/setup kyuubi) exists")


def default_args(h, chart, ns):
    docs = load_all(helm(h, "template", "kyuubi", chart, "-n", ns).stdout)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "kyuubi-server")["args"]


OPERATOR = {
    # An operator's own values: its file, its Role's rules, a volume and its mount. podsweep's files
    # must leave the first two as they are (they set neither), and the merge file keeps the third.
    "kyuubiConf": {"files": {"kyuubi-defaults.conf": "kyuubi.ha.addresses=zk-0.zk:2181\nkyuubi.operation.idle.timeout=PT30M\n"}},
    "rbac": {"create": True, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "delete"]},
                                       {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]},
    "volumes": [{"name": "operator-scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "operator-scratch", "mountPath": "/opt/kyuubi/work"}],
}


def check_render(docs, variant, version, image, default, operator):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    role = by_kind["Role"][0]
    if operator:
        check(role["rules"] == OPERATOR["rbac"]["rules"], f"{variant}: the operator's rbac.rules are Kyuubi's Role's, untouched")
        conf = by_kind["ConfigMap"][0]["data"]["kyuubi-defaults.conf"]
        check(conf == OPERATOR["kyuubiConf"]["files"]["kyuubi-defaults.conf"],
              f"{variant}: the operator's kyuubi-defaults.conf is Kyuubi's ConfigMap's, untouched")
    sts = by_kind["StatefulSet"][0]["spec"]["template"]["spec"]
    server = next(c for c in sts["containers"] if c["name"] == "kyuubi-server")
    argv = kyuubi_argv(server)
    tail = argv[len(default) - 1:]
    extra = tail[1::2]
    check(server["args"] == default and argv[:len(default) - 1] == default[1:] and tail[0::2] == ["--conf"] * len(extra)
          and all(e.startswith(P) for e in extra) and f"{P}kind=NONE" in extra,
          f"{variant}: Kyuubi's chart's own arguments kept; the command runs them (a stand-in bin/kyuubi) with "
          f"{', '.join(e.split('.')[-1] for e in extra)} last")
    jars = {f"podsweep-{version}-linux.jar", f"podsweep-kyuubi-dropin-{version}.jar"}
    if variant.startswith("init container"):
        check(f"{P}watch.kind=ALL" in extra, f"{variant}: podsweep's watch.kind=ALL on Kyuubi's command line")
        init = sts.get("initContainers", [])
        check(len(init) == 1 and init[0]["image"] == image and init[0]["args"] == ["copy-jars", "/podsweep-jars"],
              f"{variant}: an init container {image} runs `podsweep copy-jars /podsweep-jars`", str(init))
        mounted = {m["subPath"] for m in server.get("volumeMounts", []) if m.get("name") == "podsweep-jars"
                   and m["mountPath"] == "/opt/kyuubi/jars/" + m.get("subPath", "")}
        check(mounted == jars, f"{variant}: both jars mounted into /opt/kyuubi/jars/ (Kyuubi's class path)", str(mounted))
        if operator:
            kept = any(v["name"] == "operator-scratch" for v in sts["volumes"]) and any(
                m["mountPath"] == "/opt/kyuubi/work" for m in server["volumeMounts"])
            check(kept, f"{variant}: with the merge file last, the operator's volume and mount are there too")
    elif variant.startswith("image layer"):
        check(not sts.get("initContainers") and server["image"].endswith("podsweep-" + version),
              f"{variant}: Kyuubi's container runs the layered image {server['image']}, no init container")
        if operator:
            check(any(v["name"] == "operator-scratch" for v in sts["volumes"]),
                  f"{variant}: the operator's volume kept (the file sets no list)")
    elif variant.startswith("sidecar"):
        side = next((c for c in sts["containers"] if c["name"] == "podsweep"), None)
        check(side is not None and "readinessProbe" not in side and side["livenessProbe"]["httpGet"]["path"] == "/livez",
              f"{variant}: a podsweep container beside Kyuubi's, liveness /livez, no readiness probe", str(side))
    rules = by_kind.get("PrometheusRule", [])
    if not variant.startswith(("daemon", "sidecar")):
        with open(os.path.join(ROOT, "docs", "alerts", "podsweep-rules.yaml")) as f:
            group = [g for g in yaml.safe_load(f)["groups"] if g["name"] == "podsweep-kyuubi"]
        check(len(rules) == 1 and group and group[0] in rules[0]["spec"]["groups"],
              f"{variant}: Kyuubi's PrometheusRule carries podsweep's group podsweep-kyuubi ({len(group[0]['rules'])} alerts)")


def apply_all(kube, docs, namespace, variant):
    for dry in (True, False):
        results = [(d["kind"], d["metadata"]["name"], *kube.apply(d, dry_run=dry, namespace=namespace)) for d in docs]
        failures = [f"{k}/{n}: {c} {str(b)[:300]}" for k, n, c, b, _ in results if c >= 300]
        check(not failures, f"{variant}: server-side apply ({'dryRun=All' if dry else 'for real'}) of Kyuubi's "
              f"{len(docs)} objects ({', '.join(sorted({d['kind'] for d in docs}))}) into {namespace}", "; ".join(failures))
    figures.setdefault("applied", {})[variant] = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)


def copy_jars_for_real(env, version, image, work):
    """The init container's step, run as Kubernetes would run it: the jars land in the volume."""
    out = os.path.join(work, "podsweep-jars")
    os.makedirs(out)
    os.chmod(out, 0o777)
    r = podman(env, "run", "--rm", "--read-only", "--cap-drop", "all", "--user", "65532:65532", "--network", "none",
               "-v", f"{out}:/podsweep-jars", image, "copy-jars", "/podsweep-jars")
    got = sorted(os.listdir(out))
    want = sorted([f"podsweep-{version}-linux.jar", f"podsweep-kyuubi-dropin-{version}.jar"])
    same = all(hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()
               == hashlib.sha256(open(os.path.join(ROOT, "target", "image", "rootfs-amd64", "opt", "podsweep", "jars", n),
                                      "rb").read()).hexdigest() for n in got if n in want)
    check(got == want and same, f"init container: `podsweep copy-jars` wrote {', '.join(got)} into the volume, byte for byte the image's",
          r.stdout + r.stderr)


def layer_image(env, version, image, tools, work):
    """container/Containerfile.kyuubi on a stand-in for Kyuubi's image (no registry here): a base
    holding Kyuubi's server jar in /opt/kyuubi/jars, then the two COPY steps."""
    base_ctx = os.path.join(work, "standin")
    os.makedirs(os.path.join(base_ctx, "opt", "kyuubi", "jars"))
    server_jar = os.path.join(tools, "kyuubi-1.12.0", "kyuubi-server.jar")
    if not os.path.isfile(server_jar):
        raise KubeError(f"no {server_jar} (scripts/kyuubi)")
    with open(server_jar, "rb") as src, open(os.path.join(base_ctx, "opt", "kyuubi", "jars", "kyuubi-server_2.12-1.12.0.jar"), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(base_ctx, "Containerfile"), "w") as f:
        f.write("FROM scratch\nCOPY opt/ /opt/\n")
    base, layered = "localhost/kyuubi-standin:1.12.0", f"localhost/kyuubi-podsweep-check:1.12.0-podsweep-{version}"
    try:
        podman(env, "build", "-q", "-t", base, base_ctx)
        podman(env, "build", "-q", "-f", os.path.join(ROOT, "container", "Containerfile.kyuubi"),
               "--build-arg", f"KYUUBI_IMAGE={base}", "--build-arg", f"PODSWEEP_IMAGE={image}", "-t", layered, ROOT)
        cid = podman(env, "create", layered, "x").stdout.strip()
        try:
            listing = subprocess.run(f"podman export {cid} | tar -t", shell=True, capture_output=True, text=True, env=env).stdout
        finally:
            podman(env, "rm", cid, check_rc=False)
        jars = sorted(l.rsplit("/", 1)[-1] for l in listing.splitlines() if l.startswith("opt/kyuubi/jars/") and l.endswith(".jar"))
        want = sorted(["kyuubi-server_2.12-1.12.0.jar", f"podsweep-{version}-linux.jar", f"podsweep-kyuubi-dropin-{version}.jar"])
        check(jars == want, f"image layer: container/Containerfile.kyuubi on a stand-in Kyuubi base: /opt/kyuubi/jars holds {', '.join(jars)}")
    finally:
        podman(env, "rmi", "-f", layered, base, check_rc=False)


def main():
    if sys.argv[1:2] == ["--extract-chart"]:
        os.makedirs(sys.argv[2], exist_ok=True)
        print(kyuubi_chart(os.environ["PODSWEEP_KYUUBI_TARBALL"], os.environ["PODSWEEP_TOOLS"], sys.argv[2]))
        return
    if sys.argv[1:] == ["--write-alerts"]:
        with open(ALERTS, "w") as f:
            f.write(alerts_text())
        print(f"wrote {ALERTS}")
        return
    env = dict(os.environ)
    version, h = env["PODSWEEP_VERSION"], env["PODSWEEP_HELM"]
    image = f"localhost/podsweep:{version}"
    kube = Kube.from_dir(env["PODSWEEP_KUBE_DIR"])
    work = tempfile.mkdtemp(prefix="podsweep-kyuubi-chart-")
    try:
        with open(ALERTS) as f:
            check(f.read() == alerts_text(), "charts/kyuubi-values/podsweep-alerts.yaml = docs/alerts' group podsweep-kyuubi",
                  "stale: run scripts/chart alerts")
        chart = kyuubi_chart(env["PODSWEEP_KYUUBI_TARBALL"], env["PODSWEEP_TOOLS"], work)
        sys.path.insert(0, os.path.dirname(__file__))
        from chart_test import install_monitoring_crds
        install_monitoring_crds(kube)
        operator = os.path.join(work, "operator-values.yaml")
        with open(operator, "w") as f:
            yaml.safe_dump(OPERATOR, f)
        merge = os.path.join(work, "podsweep-merge.yaml")
        with open(merge, "w") as f:
            yaml.safe_dump({"volumes": OPERATOR["volumes"] + [{"name": "podsweep-jars", "emptyDir": {}}],
                            "volumeMounts": OPERATOR["volumeMounts"] + [
                                {"name": "podsweep-jars", "mountPath": f"/opt/kyuubi/jars/{j}", "subPath": j, "readOnly": True}
                                for j in (f"podsweep-{version}-linux.jar", f"podsweep-kyuubi-dropin-{version}.jar")]}, f)
        rbac_docs = load_all(open(os.path.join(VALUES, "podsweep-rbac.yaml")).read())
        for variant, files, ns, mine in (
                ("init container", ["podsweep-dropin.yaml", ALERTS], "kyuubi-init", False),
                ("init container, over the operator's values", ["podsweep-dropin.yaml", ALERTS, merge], "kyuubi-init-op", True),
                ("image layer", ["podsweep-image-layer.yaml", ALERTS], "kyuubi-layer", False),
                ("image layer, over the operator's values", ["podsweep-image-layer.yaml", ALERTS], "kyuubi-layer-op", True),
                ("daemon beside", ["podsweep-daemon.yaml"], "kyuubi-daemon", True),
                ("sidecar", ["podsweep-sidecar.yaml"], "kyuubi-sidecar", True)):
            fs = [x if os.path.isabs(x) else os.path.join(VALUES, x) for x in files]
            fargs = [a for x in ([operator] if mine else []) + fs for a in ("-f", x)]
            args = ["template", "kyuubi", chart, "-n", ns, *fargs]
            r = helm(h, "lint", chart, *args[3:], check=False)
            check(r.returncode == 0, f"{variant}: helm lint of Kyuubi's chart with {', '.join(os.path.basename(x) for x in fs)}",
                  r.stdout + r.stderr)
            docs = load_all(helm(h, *args).stdout)
            check_render(docs, variant, version, image, default_args(h, chart, ns), mine)
            kube.namespace(ns)
            apply_all(kube, docs, ns, variant)
            rb = [dict(d, metadata={**d["metadata"], "namespace": ns}) for d in rbac_docs]
            rb[1]["subjects"][0]["namespace"] = ns
            apply_all(kube, rb, ns, variant + ": podsweep-rbac.yaml")
            sa = f"system:serviceaccount:{ns}:kyuubi"
            check(kube.can_soon(sa, "watch", "pods", ns) and kube.can_soon(sa, "get", "configmaps", ns, name="kube-root-ca.crt")
                  and kube.can_soon(sa, "create", "pods", ns),
                  f"{variant}: Kyuubi's ServiceAccount may watch pods and get kube-root-ca.crt (podsweep-rbac.yaml) and "
                  "create pods (Kyuubi's own Role)")
        copy_jars_for_real(env, version, image, work)
        layer_image(env, version, image, env["PODSWEEP_TOOLS"], work)
    except Exception as e:
        bad(f"{type(e).__name__}: {e}")
    finally:
        subprocess.run(["rm", "-rf", work])
    TALLY.end("chart kyuubi", figures, "kyuubi-1.12.0", env)


if __name__ == "__main__":
    main()
