"""A small client of the local kube-apiserver (scripts/kube up) for scripts/chart: server-side
apply by API discovery, SubjectAccessReviews, TokenRequests, the audit log. Standard library plus
PyYAML only; every request carries the admin token of DIR/env unless another token is given."""

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml


class KubeError(Exception):
    pass


class Kube:
    def __init__(self, env):
        self.server = env["PODSWEEP_KUBE_SERVER"]
        self.token = env["PODSWEEP_KUBE_TOKEN"]
        self.ca = env["PODSWEEP_KUBE_CA"]
        self.audit = env["PODSWEEP_KUBE_AUDIT"]
        self.ctx = ssl.create_default_context(cafile=self.ca)
        self._resources = {}

    @staticmethod
    def from_dir(kube_dir):
        env = {}
        with open(f"{kube_dir}/env") as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                env[k] = v
        return Kube(env)

    def request(self, method, path, body=None, ctype="application/json", params=None, token=None):
        """(status, parsed body or text, Warning headers)."""
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + (token or self.token))
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                code, raw, headers = r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            code, raw, headers = e.code, e.read(), e.headers
        warnings = headers.get_all("Warning") or []
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return code, parsed, warnings

    def ok(self, method, path, body=None, **kw):
        code, out, _ = self.request(method, path, body, **kw)
        if code >= 300:
            raise KubeError(f"{method} {path}: {code} {out}")
        return out

    # ---- discovery and server-side apply --------------------------------------------------
    def resource(self, api_version, kind):
        """(plural, namespaced) of a kind, from the API server's discovery."""
        if api_version not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.ok("GET", base)
            self._resources[api_version] = {
                r["kind"]: (r["name"], r["namespaced"]) for r in listing["resources"] if "/" not in r["name"]}
        try:
            return self._resources[api_version][kind]
        except KeyError:
            raise KubeError(f"the API server serves no {kind} in {api_version}")

    def path_of(self, obj, namespace=None):
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural, namespaced = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        ns = obj["metadata"].get("namespace") or namespace
        if namespaced:
            return f"{base}/namespaces/{ns}/{plural}/{obj['metadata']['name']}"
        return f"{base}/{plural}/{obj['metadata']['name']}"

    def apply(self, obj, dry_run=False, manager="podsweep-chart-test", namespace=None, token=None):
        """Server-side apply of one object: (status, body, warnings)."""
        params = {"fieldManager": manager, "force": "true"}
        if dry_run:
            params["dryRun"] = "All"
        return self.request("PATCH", self.path_of(obj, namespace), json.dumps(obj).encode(),
                            ctype="application/apply-patch+yaml", params=params, token=token)

    def delete(self, obj, namespace=None):
        return self.request("DELETE", self.path_of(obj, namespace))

    # ---- authorization and tokens ------------------------------------------------------------
    def can(self, user, verb, resource, namespace="", group="", name=""):
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": ["system:serviceaccounts",
                                                    "system:serviceaccounts:" + user.split(":")[2],
                                                    "system:authenticated"],
                           "resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                                  "namespace": namespace, "name": name}}}
        out = self.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(out["status"].get("allowed"))

    def can_soon(self, user, verb, resource, namespace="", group="", name="", timeout=15):
        """can(), for a permission whose Role or binding was just written: the API server's RBAC
        authorizer learns of them through its own watch, a moment after the write is answered.
        True once a review allows it; False when none did within `timeout` s."""
        try:
            return wait(f"{user} may {verb} {resource}", timeout,
                        lambda: self.can(user, verb, resource, namespace, group, name), every=0.1)
        except KubeError:
            return False

    def sa_token(self, namespace, name, seconds=3600):
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds}}
        out = self.ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        return out["status"]["token"]

    def namespace(self, name, labels=None):
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        code, out, _ = self.apply(obj)
        if code >= 300:
            raise KubeError(f"namespace {name}: {code} {out}")
        # No controller-manager here: the ServiceAccount admission needs a default account.
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        self.apply(sa)
        # ... and its root CA publisher's ConfigMap, whose UID podsweep reads as the namespace's identity.
        with open(self.ca) as f:
            ca = f.read()
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": name},
              "data": {"ca.crt": ca}}
        self.apply(cm)

    # ---- the audit log --------------------------------------------------------------------------
    def audit_events(self):
        out = []
        with open(self.audit) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def pod_deletes(self, namespace):
        """Every DELETE of a pod of `namespace` (stage ResponseComplete): name, code, dry run, user."""
        rows = []
        for e in self.audit_events():
            ref = e.get("objectRef") or {}
            if e.get("verb") != "delete" or ref.get("resource") != "pods" or ref.get("subresource") \
                    or ref.get("namespace") != namespace or e.get("stage") != "ResponseComplete":
                continue
            rows.append({"name": ref.get("name"), "code": (e.get("responseStatus") or {}).get("code"),
                         # kube-rs sends dryRun in the body (the DELETE is audited at Request level).
                         "dry_run": "dryRun=All" in e.get("requestURI", "")
                         or "All" in ((e.get("requestObject") or {}).get("dryRun") or []),
                         "user": (e.get("user") or {}).get("username")})
        return rows


def load_all(text):
    return [d for d in yaml.safe_load_all(text) if d]


def helm(helm_bin, *args, check=True):
    r = subprocess.run([helm_bin, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise KubeError(f"helm {' '.join(args)}: {r.stderr.strip()}")
    return r


def wait(what, timeout, probe, every=0.2):
    """Polls probe() until it returns something truthy; raises naming `what` after `timeout` s."""
    t0 = time.time()
    while True:
        got = probe()
        if got:
            return got
        if time.time() - t0 > timeout:
            raise KubeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


class Tally:
    """The `ok` / `FAIL` lines of a check script, counted."""

    def __init__(self):
        self.passed = self.failed = 0

    def ok(self, text):
        self.passed += 1
        print("ok    " + text, flush=True)

    def bad(self, text):
        self.failed += 1
        print("FAIL  " + text, flush=True)

    def check(self, cond, text, why=""):
        (self.ok if cond else self.bad)(text if cond or not why else f"{text}: {why}")
        return cond

    def end(self, what, figures, chart, env):
        """Prints the figures as one JSON line stamped with the chart, commit, date and API server,
        then "<what>: N passed, M failed"; exits 1 when a check failed."""
        figures.update({"chart": chart, "commit": env.get("PODSWEEP_COMMIT"), "date": time.strftime("%Y-%m-%d"),
                        "api_server": "kube-apiserver " + env.get("PODSWEEP_KUBE_VERSION", "?")})
        print(json.dumps(figures))
        print(f"{what}: {self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
