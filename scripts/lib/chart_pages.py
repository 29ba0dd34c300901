"""The operator's pages, run: every `bash` block of docs/rollout.md, docs/daemon.md (sections 4
and 5), charts/podsweep/README.md and charts/kyuubi-values/README.md, as written, in order, each
page on a fresh kube-apiserver with Kyuubi installed by Kyuubi 1.12.0's own chart and the kubelet
stand-in running the pods. The steps around the blocks (driver pods made, the audit log read) are
the test's; what the blocks print is checked against what the pages say."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import yaml

from doc_blocks import blocks, run
from kubeapi import Kube, helm, load_all
from kubelet import Kubelet

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
KYUUBI_NS, SPARK = "kyuubi", "spark-jobs"
PAGES = ["docs/rollout.md", "docs/daemon.md", "charts/podsweep/README.md", "charts/kyuubi-values/README.md"]


def kyuubi_values(zk, ha_namespace):
    """The operator's own values for Kyuubi's chart: its HA backend, Kyuubi's own cleaner on (as
    before podsweep), short periods for the test."""
    conf = "\n".join([
        f"kyuubi.ha.addresses={zk}",
        f"kyuubi.ha.namespace={ha_namespace}",
        "kyuubi.ha.zookeeper.session.timeout=6000",
        f"{P}kind=ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod=PT2S",
        f"{P}forbidden.retryInterval=PT2S",
        f"{P}failures.summaryInterval=PT5S",
        f"{P}status.logInterval=PT5S",
        # The operator's own volume, rule and files, which podsweep's values must leave alone.
        "kyuubi.operation.idle.timeout=PT30M",
    ]) + "\n"
    return {"kyuubiConf": {"files": {"kyuubi-defaults.conf": conf}},
            "rbac": {"create": True, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "delete"]},
                                               {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]},
            "volumes": [{"name": "operator-scratch", "emptyDir": {}}],
            "volumeMounts": [{"name": "operator-scratch", "mountPath": "/opt/kyuubi/work"}]}


def http(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


class Page:
    """One page's run: its API server, its working directory, the stand-in, its blocks."""

    def __init__(self, env, tally, figures, rel):
        self.env, self.tally, self.figures, self.rel = env, tally, figures, rel
        self.page_figures = figures.setdefault("pages", {}).setdefault(rel, {})
        self.work = tempfile.mkdtemp(prefix="podsweep-page-")
        os.chmod(self.work, 0o755)
        self.kube_dir = os.path.join(self.work, "kube")
        subprocess.run([os.path.join(ROOT, "scripts", "kube"), "up", self.kube_dir, "--owner-pid", str(os.getpid())],
                       check=True, capture_output=True)
        self.kube = Kube.from_dir(self.kube_dir)
        self.cwd = os.path.join(self.work, "operator")
        os.makedirs(self.cwd)
        os.symlink(os.path.join(ROOT, "charts"), os.path.join(self.cwd, "charts"))
        os.symlink(os.path.dirname(os.path.dirname(env["KYUUBI_CHART"])), os.path.join(self.cwd, "apache-kyuubi-1.12.0"))
        bin_dir = os.path.join(self.work, "bin")
        os.makedirs(bin_dir)
        os.symlink(env["HELM"], os.path.join(bin_dir, "helm"))
        self.shell_env = {**os.environ, "PATH": bin_dir + ":" + os.environ["PATH"],
                          "KUBECONFIG": os.path.join(self.kube_dir, "kubeconfig"),
                          "HELM_CACHE_HOME": os.path.join(self.work, "helm-cache"),
                          "HELM_CONFIG_HOME": os.path.join(self.work, "helm-config"),
                          "HELM_DATA_HOME": os.path.join(self.work, "helm-data")}
        for name, labels in ((KYUUBI_NS, {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn", "audit")}),
                             (SPARK, {})):
            self.kube.namespace(name, labels)
        self.kubelet = Kubelet(self.kube, [KYUUBI_NS], env["VERSION"], self.work, env["CONTAINERS_CONF"])
        self.kubelet.start()
        self.ha_namespace = "kyuubi-" + rel.replace("/", "-").replace(".md", "").lower()
        with open(os.path.join(self.cwd, "kyuubi-values.yaml"), "w") as f:
            yaml.safe_dump(kyuubi_values(env["ZK"], self.ha_namespace), f, sort_keys=False)
        self.results = {}

    def sh(self, text, timeout=120):
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=self.cwd, env=self.shell_env,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{text.strip()}: exit {r.returncode}: {r.stderr.strip()[-1500:]}")
        return r.stdout

    def install_kyuubi(self):
        """Kyuubi as its own chart installs it, from the operator's values: its ConfigMap `kyuubi`."""
        self.sh(f"helm install kyuubi apache-kyuubi-1.12.0/charts/kyuubi -n {KYUUBI_NS} -f kyuubi-values.yaml")
        cm = self.kube.ok("GET", f"/api/v1/namespaces/{KYUUBI_NS}/configmaps/kyuubi")
        text = cm["data"]["kyuubi-defaults.conf"]
        self.kyuubi_conf = text
        return text

    def daemons(self, deployment="podsweep"):
        """{pod name: its /metrics port} of the Deployment's running pods."""
        with self.kubelet.lock:
            return {st["name"]: st["ports"].get("podsweep") for st in self.kubelet.pods.values()
                    if st["ns"] == KYUUBI_NS and st["name"].startswith(deployment + "-") and st["ports"].get("podsweep")}

    def leader(self, namespace, deployment="podsweep"):
        leads = [n for n, port in self.daemons(deployment).items()
                 if f'podsweep_leader{{context="",namespace="{namespace}"}} 1' in http(port, "/metrics")[1]]
        return leads[0] if len(leads) == 1 else None

    def logs_of(self, pod):
        st = self.kubelet.containers_of(KYUUBI_NS, pod)
        if not st:
            return ""
        r = subprocess.run(["podman", "logs", st["containers"]["podsweep"]], capture_output=True, text=True,
                           env=self.kubelet.env)
        return r.stdout + r.stderr

    def run_blocks(self, hooks):
        page_blocks = blocks(os.path.join(ROOT, self.rel), self.rel)
        ran = skipped = 0
        for b in page_blocks:
            if b.not_run:
                skipped += 1
                self.tally.ok(f"{b.where()}: not run, as the page says: {b.not_run}")
                continue
            before, after = hooks.get(b.name, (None, None))
            if before:
                before(self)
            code, out, err, secs = run(b, self.cwd, self.shell_env)
            self.results[b.name] = (code, out, err)
            want_fail = (b.name or "").endswith("-fails")
            ok_exit = (code != 0) if want_fail else (code == 0)
            lines = (out.strip() or err.strip()).splitlines()
            errors = [x for x in err.splitlines() if x.startswith("Error")]
            first = errors[:1] if want_fail and errors else [x for x in lines if "found symbolic link" not in x][:1]
            if not self.tally.check(ok_exit, f"{b.where()}: ran as written, exit {code} in {secs:.1f} s"
                                    + (f": {first[0][:160]}" if first else ""),
                                    f"stdout {out[-1500:]!r} stderr {err[-1500:]!r}"):
                self.pods_report()
                return False
            ran += 1
            if after:
                after(self, code, out, err)
        self.page_figures["blocks_run"], self.page_figures["blocks_not_run"] = ran, skipped
        missing = [k for k in hooks if k not in {b.name for b in page_blocks}]
        self.tally.check(not missing, f"{self.rel}: {ran} blocks ran, {skipped} marked not run; every step the test "
                                      f"hooks is a block of the page", f"hooks without a block: {missing}")
        return True

    def pods_report(self):
        """After a failed block: each pod the kubelet stand-in ran, with its phase and the tail of
        each container's log (what a `kubectl logs` would have shown the operator)."""
        with self.kubelet.lock:
            states = list(self.kubelet.pods.values()) + list(self.kubelet.gone.values())
        for st in states:
            code, pod, _ = self.kube.request("GET", f"/api/v1/namespaces/{st['ns']}/pods/{st['name']}")
            phase = pod.get("status", {}).get("phase") if code == 200 and isinstance(pod, dict) else f"HTTP {code}"
            print(f"      pod {st['ns']}/{st['name']}: {phase}")
            for cname, cid in st["containers"].items():
                r = subprocess.run(["podman", "logs", "--tail", "15", cid], capture_output=True, text=True,
                                   env=self.kubelet.env)
                for line in (r.stdout + r.stderr).strip().splitlines():
                    print(f"        {cname}: {line[:300]}")

    def close(self):
        try:
            self.kubelet.stop()
            if self.kubelet.errors:
                print(f"      (kubelet stand-in: {len(self.kubelet.errors)} errors, first: {self.kubelet.errors[0]})")
            self.kubelet.cleanup()
        finally:
            subprocess.run([os.path.join(ROOT, "scripts", "kube"), "down", self.kube_dir], capture_output=True)
            shutil.rmtree(self.work, ignore_errors=True)


# ---- driver pods ------------------------------------------------------------------------------------
def driver_pod(ns, name, app_selector=True):
    labels = {"kyuubi-unique-tag": name + "-tag", "spark-role": "driver"}
    if app_selector:
        labels["spark-app-selector"] = "spark-" + name.replace("-", "")[:32].ljust(32, "0")
    sc = {"runAsNonRoot": True, "runAsUser": 185, "seccompProfile": {"type": "RuntimeDefault"}}
    csc = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"securityContext": sc,
                     "containers": [{"name": "spark-kubernetes-driver", "image": "spark:test", "securityContext": csc}]}}


def terminate(kube, ns, name, ago_s=3600):
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s - 60))
    patch = {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "spark-kubernetes-driver", "ready": False, "restartCount": 0, "image": "spark:test", "imageID": "",
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start, "finishedAt": at}}}]}}
    kube.ok("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", patch, ctype="application/merge-patch+json")


def make_pods(kube, ns, prefix, n, decoys=True):
    """n terminated driver pods, and (decoys) a running driver and a terminated non-driver."""
    names = [f"{prefix}-{i:02d}" for i in range(n)]
    for name in names:
        kube.ok("POST", f"/api/v1/namespaces/{ns}/pods", driver_pod(ns, name))
        terminate(kube, ns, name)
    if decoys:
        kube.ok("POST", f"/api/v1/namespaces/{ns}/pods", driver_pod(ns, prefix + "-running"))
        kube.ok("POST", f"/api/v1/namespaces/{ns}/pods", driver_pod(ns, prefix + "-no-selector", app_selector=False))
        terminate(kube, ns, prefix + "-no-selector")
    return names


def exists(kube, ns, name):
    return kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[0] == 200


def deletes(kube, ns, names, dry=False):
    return [r for r in kube.pod_deletes(ns) if r["dry_run"] == dry and r["name"] in names]


def sts_container(page, name):
    sts = page.kube.ok("GET", f"/apis/apps/v1/namespaces/{KYUUBI_NS}/statefulsets/kyuubi")
    return next((c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == name), None)


def kyuubi_default_args(env, ns=KYUUBI_NS):
    """Kyuubi 1.12.0's chart's own arguments for its server, rendered without any values."""
    docs = load_all(helm(env["HELM"], "template", "kyuubi", env["KYUUBI_CHART"], "-n", ns).stdout)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "kyuubi-server")["args"]


def kyuubi_argv(container):
    """What Kyuubi's server would be started with: the container's command and args run for real
    (bash, as in Kyuubi's image) on a stand-in `./bin/kyuubi` that prints its arguments."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "bin"))
        stub = os.path.join(d, "bin", "kyuubi")
        with open(stub, "w") as f:
            f.write('#!/bin/bash\nprintf "%s\\n" "$@"\n')
        os.chmod(stub, 0o755)
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        if not argv:
            argv = ["./bin/kyuubi", "run"]
        r = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr}")
        return r.stdout.splitlines()


def secret_text(kube, ns, name, key):
    return base64.b64decode(kube.ok("GET", f"/api/v1/namespaces/{ns}/secrets/{name}")["data"][key]).decode()


def json_dump(v):
    return json.dumps(v, sort_keys=True)
