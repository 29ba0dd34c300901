"""A real run for the dashboard's picture (docs/dashboards/): the podsweep daemon, alone
(--single-server), on a kube-apiserver that `scripts/kube up DIR` started, with terminated Kyuubi
driver pods created for a few minutes, and its /metrics scraped every few seconds.

Three namespaces: dash-ok (a driver pod terminates every 3 s), dash-burst (a burst of pods at once,
drained at rateLimit.qps) and dash-forbidden (the daemon's account may not delete there: every
DELETE answers 403). Writes OUT/scrapes.jsonl (one line per scrape: {"t": unix seconds, "text":
the exposition}) and OUT/run.json (the run's facts). Standard library plus PyYAML (kubeapi).

Usage: python3 scripts/lib/dashboard_run.py KUBE_DIR DAEMON OUT [--seconds S] [--every S] [--burst N]
                                            [--restart-api] [--daemon-commit C]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kubeapi import Kube, wait  # noqa: E402

P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
SYSTEM_NS = "dash-system"
SA = "podsweep-dash"
NS = {"ok": "dash-ok", "burst": "dash-burst", "forbidden": "dash-forbidden"}


def iso(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role(ns, name, delete):
    verbs = ["get", "list", "watch"] + (["delete"] if delete else [])
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": ns},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs},
                   {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kube-root-ca.crt"],
                    "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": SYSTEM_NS}]},
    ]


def terminated_driver(kube, ns, name, finished):
    """An unscheduled Kyuubi Spark driver pod whose driver container terminated at `finished`."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"kyuubi-unique-tag": f"tag-{name}",
                                                  "spark-app-selector": f"spark-{name}",
                                                  "spark-role": "driver"}},
           "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark:test"}]}}
    kube.ok("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    at = iso(finished)
    status = {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "spark-kubernetes-driver", "image": "spark:test", "imageID": "", "ready": False,
        "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                    "startedAt": at, "finishedAt": at}}}]}}
    kube.ok("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", status,
            ctype="application/merge-patch+json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kube_dir")
    ap.add_argument("daemon")
    ap.add_argument("out")
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--every", type=float, default=3.0)
    ap.add_argument("--burst", type=int, default=150)
    ap.add_argument("--daemon-commit", default="unknown", help="the commit the daemon binary was built from")
    ap.add_argument("--restart-api", action="store_true",
                    help="restart the kube-apiserver (scripts/kube restart) at two thirds of the run")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    kube = Kube.from_dir(a.kube_dir)
    version = subprocess.run([a.daemon, "--version"], capture_output=True, text=True).stdout.strip()

    kube.namespace(SYSTEM_NS)
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": SYSTEM_NS}})
    for key, ns in NS.items():
        kube.namespace(ns)
        for obj in role(ns, "podsweep-dash", delete=key != "forbidden"):
            kube.apply(obj)
    token_file = os.path.join(a.out, "token")
    with open(token_file, "w") as f:
        f.write(kube.sa_token(SYSTEM_NS, SA, seconds=3600))
    conf_file = os.path.join(a.out, "kyuubi-defaults.conf")
    conf = {
        "kyuubi.kubernetes.master.address": kube.server,
        "kyuubi.kubernetes.authenticate.caCertFile": kube.ca,
        "kyuubi.kubernetes.authenticate.oauthTokenFile": token_file,
        "kyuubi.kubernetes.client.initialize.list": ",".join(":" + n for n in sorted(NS.values())),
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod": "2000",
        P + "kind": "ALL",
        P + "rateLimit.qps": "5",
        P + "rateLimit.burst": "5",
        P + "forbidden.retryInterval": "PT20S",
    }
    with open(conf_file, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in conf.items())

    # Pods that terminate as the daemon starts in the forbidden namespace: every DELETE of them is refused.
    for i in range(4):
        terminated_driver(kube, NS["forbidden"], f"driver-forbidden-{i}", time.time())

    port = free_port()
    log = open(os.path.join(a.out, "daemon.log"), "w")
    daemon = subprocess.Popen([a.daemon, "--config", conf_file, "--single-server", "--server-id", "dash-1",
                               "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape():
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()

    def ready():
        try:
            return "podsweep_leader" in scrape()
        except OSError:
            return False

    stop = threading.Event()
    made = {"ok": 0, "burst": 0}

    def trickle():
        while not stop.is_set():
            try:
                terminated_driver(kube, NS["ok"], f"driver-ok-{made['ok']:04d}", time.time())
                made["ok"] += 1
            except OSError:  # the API server restarting
                pass
            stop.wait(3)

    def burst():
        for i in range(a.burst):
            if stop.is_set():
                return
            terminated_driver(kube, NS["burst"], f"driver-burst-{i:04d}", time.time())
            made["burst"] += 1

    started = time.time()
    try:
        wait("the daemon's /metrics", 30, ready)
        threading.Thread(target=trickle, daemon=True).start()
        burst_at = started + a.seconds / 3
        burst_thread = None
        restart_at = started + 2 * a.seconds / 3 if a.restart_api else None
        restarted = None
        with open(os.path.join(a.out, "scrapes.jsonl"), "w") as out:
            nxt = time.time()
            while time.time() - started < a.seconds:
                if burst_thread is None and time.time() >= burst_at:
                    burst_thread = threading.Thread(target=burst, daemon=True)
                    burst_thread.start()
                if restart_at is not None and restarted is None and time.time() >= restart_at:
                    restarted = time.time()
                    kube_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube")
                    threading.Thread(target=subprocess.run, daemon=True, kwargs={
                        "args": [kube_script, "restart", a.kube_dir, "kube-apiserver"],
                        "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}).start()
                t = time.time()
                out.write(json.dumps({"t": round(t, 3), "text": scrape()}) + "\n")
                out.flush()
                nxt += a.every
                time.sleep(max(0.0, nxt - time.time()))
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
    deletes = {ns: len(kube.pod_deletes(ns)) for ns in NS.values()}
    facts = {"started": iso(started), "ended": iso(time.time()), "daemon": version, "daemon_commit": a.daemon_commit,
             "api_server": f"kube-apiserver-{os.environ.get('PODSWEEP_KUBE_VERSION', '1.34.4')}",
             "scrape_every_s": a.every, "api_restarted": iso(restarted) if restarted else None,
             "burst_at": iso(burst_at), "pods_created": {NS[k]: v for k, v in made.items()},
             "forbidden_pods": 4, "audit_deletes": deletes, "conf": {k: v for k, v in conf.items()
                                                                     if k.startswith(P) or "Retain" in k}}
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(facts, f, indent=1)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
