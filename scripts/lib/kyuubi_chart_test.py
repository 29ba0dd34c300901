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
        out = os.path.join(into, "kyuubi")
        shutil.copytree(cached, out)
        return out
    raise KubeError(f"Kyuubi 1.12.0's chart: neither {tarball} (KYUUBI_SRC_TARBALL) nor {cached} "
                    "(scripts/setup kyuubi) exists")


def check_render(docs, variant, version, image):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    role = by_kind["Role"][0]
    pod_rule = next(r for r in role["rules"] if "pods" in r["resources"])
    check(set(pod_rule["verbs"]) >= {"list", "watch", "delete"}, f"{variant}: Kyuubi's Role grants pods {pod_rule['verbs']} (watch added)")
    cm_rule = [r for r in role["rules"] if "configmaps" in r["resources"]]
    check(len(cm_rule) == 1 and cm_rule[0].get("resourceNames") == ["kube-root-ca.crt"] and cm_rule[0]["verbs"] == ["get"],
          f"{variant}: Kyuubi's Role grants get on the one ConfigMap kube-root-ca.crt (the namespace's identity)")
    conf = by_kind["ConfigMap"][0]["data"]["kyuubi-defaults.conf"]
    check(f"{P}kind=NONE" in conf and f"{P}watch.kind=ALL" in conf,
          f"{variant}: kyuubi-defaults.conf has Kyuubi's cleaner at NONE and podsweep's watch.kind=ALL")
    sts = by_kind["StatefulSet"][0]["spec"]["template"]["spec"]
    server = next(c for c in sts["containers"] if c["name"] == "kyuubi-server")
    jars = {f"podsweep-{version}-linux.jar", f"podsweep-kyuubi-dropin-{version}.jar"}
    if variant == "init container":
        init = sts.get("initContainers", [])
        check(len(init) == 1 and init[0]["image"] == image and init[0]["args"] == ["copy-jars", "/podsweep-jars"],
              f"{variant}: an init container {image} runs `podsweep copy-jars /podsweep-jars`", str(init))
        mounted = {m["subPath"] for m in server.get("volumeMounts", []) if m.get("name") == "podsweep-jars"
                   and m["mountPath"] == "/opt/kyuubi/jars/" + m.get("subPath", "")}
        check(mounted == jars, f"{variant}: both jars mounted into /opt/kyuubi/jars/ (Kyuubi's class path)", str(mounted))
    else:
        check(not sts.get("initContainers") and server["image"].endswith("podsweep-" + version),
              f"{variant}: Kyuubi's container runs the layered image {server['image']}, no init container")
    rules = by_kind.get("PrometheusRule", [])
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
        for variant, values, ns in (("init container", "podsweep-dropin.yaml", "kyuubi-init"),
                                    ("image layer", "podsweep-image-layer.yaml", "kyuubi-layer")):
            args = ["template", "kyuubi", chart, "-n", ns, "-f", os.path.join(VALUES, values), "-f", ALERTS]
            r = helm(h, "lint", chart, *args[3:], check=False)
            check(r.returncode == 0, f"{variant}: helm lint of Kyuubi's chart with {values}", r.stdout + r.stderr)
            docs = load_all(helm(h, *args).stdout)
            check_render(docs, variant, version, image)
            kube.namespace(ns)
            apply_all(kube, docs, ns, variant)
        copy_jars_for_real(env, version, image, work)
        layer_image(env, version, image, env["PODSWEEP_TOOLS"], work)
    except Exception as e:
        bad(f"{type(e).__name__}: {e}")
    finally:
        subprocess.run(["rm", "-rf", work])
    TALLY.end("chart kyuubi", figures, "kyuubi-1.12.0", env)


if __name__ == "__main__":
    main()
