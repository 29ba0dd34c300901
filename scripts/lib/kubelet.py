"""A kubelet stand-in for `scripts/chart test`: the local kube-apiserver has no scheduler, no
controllers and no kubelet, so nothing would run what the operator's pages install. This runs it.

What it does, in the namespaces it is given, polling the API server every 0.3 s:
  * Deployments: keeps `spec.replicas` Pods of the current template (one at a time on a change,
    or all stopped first for `Recreate`), named and labelled as the ReplicaSet controller would.
  * Pods whose containers use podsweep's image: bound to its Node, run by podman (init containers
    first, in order), their status written back (phase, container states, Ready from the
    readiness probe), stopped with SIGTERM and the pod's grace period when deleted.
  * `kubectl logs` / `helm test --logs`: the API server reads container logs from it (its Node's
    kubelet endpoint: HTTPS on loopback, `podman logs` behind it).
What it runs is what the Pod says: the image (a `.../podsweep:TAG` image maps to the local
`localhost/podsweep:VERSION`, as a registry mirror would), args, env (values, ConfigMap/Secret
references, fieldRefs, envFrom), volumes (ConfigMap, Secret, emptyDir, projected ServiceAccount
token from a TokenRequest bound to the pod, downward API), the numeric user, a read-only root, no
capability. One difference, as every pod here shares the host's network: a `--listen
0.0.0.0:PORT` argument gets a free loopback port of its own (recorded, for the probes)."""

import base64
import hashlib
import json
import os
import random
import shutil
import socket
import ssl
import string
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NODE = "podsweep-test-node"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Kubelet:
    def __init__(self, kube, namespaces, version, work, containers_conf):
        self.kube, self.namespaces, self.version = kube, list(namespaces), version
        self.work = os.path.join(work, "kubelet")
        os.makedirs(self.work, exist_ok=True)
        os.chmod(work, 0o755)
        os.chmod(self.work, 0o755)
        self.env = {**os.environ, "CONTAINERS_CONF": containers_conf}
        self.pods = {}  # uid -> {"ns", "name", "containers": {name: cid}, "ports": {name: port}, ...}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.errors = []
        self.log = []
        self.gone = {}  # (ns, name) -> the state of a stopped pod, whose logs can still be read

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self):
        self.port = free_port()
        self._serve_logs()
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}}
        code, out, _ = self.kube.request("POST", "/api/v1/nodes", node)
        if code not in (201, 409):
            raise RuntimeError(f"node: {code} {out}")
        self._node_status()
        self.thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        with self.lock:
            for uid in list(self.pods):
                self._kill(uid, grace=5)
        self.server.shutdown()

    def _node_status(self):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the stand-in runs pods",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}}
        self.kube.ok("PATCH", f"/api/v1/nodes/{NODE}/status", status, ctype="application/merge-patch+json")

    def _loop(self):
        while not self.stopping.is_set():
            try:
                with self.lock:
                    for ns in self.namespaces:
                        self._deployments(ns)
                        self._pods(ns)
            except Exception as e:  # keep running; the test reads the errors
                self.errors.append(f"{type(e).__name__}: {e}")
            self.stopping.wait(0.3)

    # ---- the Deployment controller ----------------------------------------------------------------
    def _deployments(self, ns):
        deps = self.kube.ok("GET", f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
        pods = self.kube.ok("GET", f"/api/v1/namespaces/{ns}/pods",
                            params={"labelSelector": "podsweep.test/deployment"})["items"]
        names = {d["metadata"]["name"] for d in deps}
        for p in pods:  # no garbage collector here: the pods of a removed Deployment go with it
            if p["metadata"]["labels"]["podsweep.test/deployment"] not in names and not p["metadata"].get("deletionTimestamp"):
                self._delete(ns, p["metadata"]["name"])
        for d in deps:
            name = d["metadata"]["name"]
            template = d["spec"]["template"]
            h = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
            mine = [p for p in pods if p["metadata"]["labels"].get("podsweep.test/deployment") == name
                    and not p["metadata"].get("deletionTimestamp")]
            new = [p for p in mine if p["metadata"]["labels"].get("pod-template-hash") == h]
            old = [p for p in mine if p not in new]
            going = [p for p in pods if p["metadata"]["labels"].get("podsweep.test/deployment") == name
                     and p["metadata"].get("deletionTimestamp")]
            want = d["spec"].get("replicas", 1)
            recreate = (d["spec"].get("strategy") or {}).get("type") == "Recreate"
            if recreate and old:
                for p in old:
                    self._delete(ns, p["metadata"]["name"])
                continue
            if recreate and going:
                continue  # every old pod stops before a new one starts
            if len(new) > want:
                for p in sorted(new, key=lambda p: p["metadata"]["creationTimestamp"])[want:]:
                    self._delete(ns, p["metadata"]["name"])
            elif len(new) < want and len(mine) <= want and not going:
                self._create_from(ns, name, h, template)
            elif old and not going:
                self._delete(ns, sorted(old, key=lambda p: p["metadata"]["creationTimestamp"])[0]["metadata"]["name"])
            ready = sum(1 for p in new if self._ready(p))
            status = {"status": {"replicas": len(mine), "updatedReplicas": len(new),
                                 "observedGeneration": d["metadata"].get("generation", 1),
                                 "readyReplicas": ready, "availableReplicas": ready}}
            if any(d.get("status", {}).get(k) != v for k, v in status["status"].items()):
                self.kube.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/status", status,
                                  ctype="application/merge-patch+json")

    @staticmethod
    def _ready(pod):
        return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", []))

    def _create_from(self, ns, deployment, h, template):
        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        meta = template.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), "pod-template-hash": h, "podsweep.test/deployment": deployment}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{deployment}-{h}-{suffix}", "namespace": ns, "labels": labels,
                            "annotations": meta.get("annotations") or {}},
               "spec": {**template["spec"], "nodeName": NODE}}
        code, out, _ = self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        if code >= 300:
            self.errors.append(f"create a pod of {deployment}: {code} {str(out)[:300]}")

    def _delete(self, ns, name):
        self.kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")

    # ---- pods --------------------------------------------------------------------------------------
    def _ours(self, pod):
        spec = pod["spec"]
        images = [c["image"] for c in spec.get("containers", []) + spec.get("initContainers", [])]
        return spec.get("nodeName") == NODE or (not spec.get("nodeName") and any(self._image(i) for i in images))

    def _image(self, image):
        """podsweep's image, whatever registry a page names: the local build."""
        repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        return f"localhost/podsweep:{self.version}" if repo.rsplit("/", 1)[-1] == "podsweep" else None

    def _pods(self, ns):
        items = self.kube.ok("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        seen = set()
        for pod in items:
            if not self._ours(pod):
                continue
            uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
            seen.add(uid)
            if not pod["spec"].get("nodeName"):
                self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding",
                                  {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                   "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
                continue
            if pod["metadata"].get("deletionTimestamp"):
                grace = pod["metadata"].get("deletionGracePeriodSeconds", 30)
                if uid in self.pods:
                    self._kill(uid, grace)
                self.kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}",
                                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                   "preconditions": {"uid": uid}})
                continue
            if uid not in self.pods:
                self._run(pod)
            self._report(pod)
        for uid in [u for u, p in self.pods.items() if p["ns"] == ns and u not in seen]:
            self._kill(uid, grace=5)

    def _run(self, pod):
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        state = {"ns": ns, "name": name, "containers": {}, "ports": {}, "init_failed": None, "phase": "Pending",
                 "probe_ok": {}, "started": time.time()}
        try:
            mounts = self._volumes(pod)
        except RuntimeError as e:  # a missing ConfigMap or Secret: the pod waits, as on a node
            self._patch_status(ns, name, {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": str(e)}]})
            return
        self.pods[uid] = state
        for c in pod["spec"].get("initContainers", []):
            cid = self._container(pod, c, mounts, detach=False)
            state["containers"][c["name"]] = cid
            code = self._podman("inspect", "-f", "{{.State.ExitCode}}", cid).stdout.strip()
            if code != "0":
                state["init_failed"] = (c["name"], code)
                return
        for c in pod["spec"]["containers"]:
            state["containers"][c["name"]] = self._container(pod, c, mounts, detach=True, state=state)

    def _container(self, pod, c, mounts, detach, state=None):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        image = self._image(c["image"])
        if not image:
            raise RuntimeError(f"{ns}/{name}: the stand-in runs podsweep's image only, not {c['image']}")
        psc, sc = pod["spec"].get("securityContext") or {}, c.get("securityContext") or {}
        user = sc.get("runAsUser", psc.get("runAsUser"))
        group = sc.get("runAsGroup", psc.get("runAsGroup"))
        args = list(c.get("args") or [])
        for i, a in enumerate(args[:-1]):
            if a == "--listen" and args[i + 1].startswith("0.0.0.0:") and state is not None:
                port = free_port()
                args[i + 1] = f"127.0.0.1:{port}"
                state["ports"][c["name"]] = port
        cname = f"k8s_{c['name']}_{name}_{ns}_{pod['metadata']['uid'][:8]}"
        cmd = ["run", "--replace", "--name", cname, "--hostname", name, "--network", "host",
               "--cap-drop", "all", "--security-opt", "no-new-privileges"]
        if sc.get("readOnlyRootFilesystem"):
            cmd.append("--read-only")
        if user is not None:
            cmd += ["--user", f"{user}:{group if group is not None else user}"]
        for k, v in self._envs(pod, c).items():
            cmd += ["-e", f"{k}={v}"]
        for m in c.get("volumeMounts", []):
            src = mounts[m["name"]]
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
            cmd += ["-v", f"{src}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"]
        if c.get("command"):
            raise RuntimeError(f"{ns}/{name}: a command over the image's entrypoint is not supported here")
        cmd += ["-d", image, *args] if detach else [image, *args]
        r = self._podman(*cmd)
        cid = r.stdout.strip().splitlines()[-1] if detach else cname
        self.log.append(f"{ns}/{name}/{c['name']}: podman {' '.join(cmd[-len(args) - 1:])}")
        return cid

    def _envs(self, pod, c):
        ns = pod["metadata"]["namespace"]
        host, port = self.kube.server.removeprefix("https://").rsplit(":", 1)
        env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
        for src in c.get("envFrom", []):
            if "configMapRef" in src:
                env.update(self._get(ns, "configmaps", src["configMapRef"]["name"]).get("data") or {})
            elif "secretRef" in src:
                data = self._get(ns, "secrets", src["secretRef"]["name"]).get("data") or {}
                env.update({k: base64.b64decode(v).decode() for k, v in data.items()})
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = e["value"]
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[e["name"]] = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": ns,
                                      "status.podIP": "127.0.0.1"}.get(vf["fieldRef"]["fieldPath"], "")
                elif "configMapKeyRef" in vf:
                    ref = vf["configMapKeyRef"]
                    env[e["name"]] = (self._get(ns, "configmaps", ref["name"]).get("data") or {})[ref["key"]]
                elif "secretKeyRef" in vf:
                    ref = vf["secretKeyRef"]
                    env[e["name"]] = base64.b64decode((self._get(ns, "secrets", ref["name"]).get("data") or {})[ref["key"]]).decode()
        return env

    def _get(self, ns, kind, name):
        code, out, _ = self.kube.request("GET", f"/api/v1/namespaces/{ns}/{kind}/{name}")
        if code != 200:
            raise RuntimeError(f"{kind} {ns}/{name}: {code}")
        return out

    def _volumes(self, pod):
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        base = os.path.join(self.work, uid)
        out = {}
        for v in pod["spec"].get("volumes", []):
            d = os.path.join(base, v["name"])
            os.makedirs(d, exist_ok=True)
            if "configMap" in v:
                data = self._get(ns, "configmaps", v["configMap"]["name"]).get("data") or {}
                self._write(d, data, v["configMap"].get("items"), f"ConfigMap {v['configMap']['name']}")
            elif "secret" in v:
                data = self._get(ns, "secrets", v["secret"]["secretName"]).get("data") or {}
                self._write(d, {k: base64.b64decode(x) for k, x in data.items()}, v["secret"].get("items"),
                            f"Secret {v['secret']['secretName']}")
            elif "emptyDir" in v:
                os.chmod(d, 0o777)
            elif "projected" in v:
                for s in v["projected"]["sources"]:
                    if "serviceAccountToken" in s:
                        sat = s["serviceAccountToken"]
                        req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": sat.get("expirationSeconds", 3607),
                                        "audiences": [sat["audience"]] if sat.get("audience") else None,
                                        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                                           "name": pod["metadata"]["name"], "uid": uid}}}
                        sa = pod["spec"].get("serviceAccountName") or "default"
                        tok = self.kube.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", req)
                        self._write(d, {sat["path"]: tok["status"]["token"]}, None, "token")
                    elif "configMap" in s:
                        data = self._get(ns, "configmaps", s["configMap"]["name"]).get("data") or {}
                        self._write(d, data, s["configMap"].get("items"), s["configMap"]["name"])
                    elif "downwardAPI" in s:
                        for item in s["downwardAPI"].get("items", []):
                            field = item.get("fieldRef", {}).get("fieldPath")
                            value = {"metadata.namespace": ns, "metadata.name": pod["metadata"]["name"]}.get(field, "")
                            self._write(d, {item["path"]: value}, None, "downward API")
            else:
                raise RuntimeError(f"volume {v['name']}: a kind the stand-in does not make")
            out[v["name"]] = d
        return out

    @staticmethod
    def _write(d, data, items, what):
        pairs = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
        for key, path in pairs:
            if key not in data:
                raise RuntimeError(f"{what} has no key {key}")
            target = os.path.join(d, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            value = data[key]
            with open(target, "wb") as f:
                f.write(value if isinstance(value, bytes) else value.encode())
            os.chmod(target, 0o644)
        for root, dirs, _ in os.walk(d):
            os.chmod(root, 0o755)

    def _report(self, pod):
        uid, ns, name = pod["metadata"]["uid"], pod["metadata"]["namespace"], pod["metadata"]["name"]
        st = self.pods.get(uid)
        if st is None or time.time() - st.get("reported_at", 0) < 1.0:
            return
        st["reported_at"] = time.time()
        statuses, running, failed, exited = [], 0, False, 0
        for c in pod["spec"]["containers"]:
            cid = st["containers"].get(c["name"])
            info = json.loads(self._podman("inspect", cid).stdout or "[{}]")[0].get("State", {}) if cid else {}
            if info.get("Running"):
                running += 1
                ready = self._probe(st, c)
                statuses.append({"name": c["name"], "ready": ready, "restartCount": 0, "image": c["image"], "imageID": "",
                                 "started": True, "state": {"running": {"startedAt": info.get("StartedAt", "")[:19] + "Z"}}})
            else:
                code = info.get("ExitCode", 1) if cid else 1
                exited += 1
                failed = failed or code != 0
                statuses.append({"name": c["name"], "ready": False, "restartCount": 0, "image": c["image"], "imageID": "",
                                 "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}})
        if st["init_failed"]:
            phase = "Failed"
        elif exited == len(statuses) and pod["spec"].get("restartPolicy") == "Never":
            phase = "Failed" if failed else "Succeeded"
        else:
            phase = "Running"
        ready = phase == "Running" and all(s["ready"] for s in statuses)
        status = {"phase": phase, "podIP": "127.0.0.1", "hostIP": "127.0.0.1", "containerStatuses": statuses,
                  "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
                                 {"type": "ContainersReady", "status": str(ready)}, {"type": "Ready", "status": str(ready)}]}
        if status != st.get("reported"):
            st["reported"] = status
            self._patch_status(ns, name, status)

    def _probe(self, st, c):
        probe = c.get("readinessProbe")
        if not probe:
            return True
        port = st["ports"].get(c["name"])
        if not port or "httpGet" not in probe:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), 1) as s:
                s.sendall(f"GET {probe['httpGet']['path']} HTTP/1.0\r\n\r\n".encode())
                return s.recv(64).split(b"\r\n")[0].split(b" ")[1:2] == [b"200"]
        except OSError:
            return False

    def _patch_status(self, ns, name, status):
        self.kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": status},
                          ctype="application/merge-patch+json")

    def _kill(self, uid, grace):
        st = self.pods.pop(uid, None)
        if not st:
            return
        for cid in st["containers"].values():
            self._podman("stop", "-t", str(int(grace)), cid)
        # the containers stay (podman rm at the end) so that their logs can still be read
        self.gone[(st["ns"], st["name"])] = st

    def containers_of(self, ns, name):
        for st in list(self.pods.values()) + list(self.gone.values()):
            if st["ns"] == ns and st["name"] == name:
                return st
        return None

    def cleanup(self):
        for st in list(self.pods.values()) + list(self.gone.values()):
            for cid in st["containers"].values():
                self._podman("rm", "-f", cid)
        shutil.rmtree(self.work, ignore_errors=True)

    def _podman(self, *args):
        return subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env)

    # ---- the kubelet's logs endpoint ------------------------------------------------------------------
    def _serve_logs(self):
        cert, key = os.path.join(self.work, "kubelet.crt"), os.path.join(self.work, "kubelet.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                q = urllib.parse.parse_qs(url.query)
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                _, ns, pod, container = parts
                st = kubelet.containers_of(ns, pod)
                cid = st and st["containers"].get(container)
                if not cid:
                    self.send_error(404, f"no container {container} of {ns}/{pod}")
                    return
                args = ["logs"]
                if q.get("tailLines"):
                    args += ["--tail", q["tailLines"][0]]
                r = subprocess.run(["podman", *args, cid], capture_output=True, env=kubelet.env)
                body = r.stdout + r.stderr
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, name="kubelet-logs", daemon=True).start()
