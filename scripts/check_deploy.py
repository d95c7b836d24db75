#!/usr/bin/env python3
"""Offline checks of the deployment files that a JSON schema cannot make.

Run by scripts/check-deploy.sh inside its virtual environment (PyYAML and
kubernetes-validate pinned in deploy/check-requirements.txt), after the compose
file has passed the compose specification's schema:

  check_deploy.py ROOT

ROOT holds docker-compose.yml, deploy/ and crates/server/src/ (the routes the
probes must name: the `path = "..."` of each handler's `#[utoipa::path]`, the
one source of both the router and the OpenAPI document). Every Kubernetes manifest under deploy/kubernetes/ is
validated strictly (unknown fields are errors) against the schemas of each
version in CHECK_K8S_VERSIONS (default "1.31 1.37"); a kind without a schema is
an error, not a warning. Then the references between files are followed:
selectors to labels, Secret keys, volume claims, probe paths, GPU limits,
kustomization resources (every manifest but the `*.example.yaml` ones),
compose dependencies and profiles, HAProxy servers.
Prints every problem found and exits 1 when there is any.
"""

import os
import re
import sys
from pathlib import Path

import kubernetes_validate
import yaml

SERVER_IMAGE = "spmv-select"
GPU = "nvidia.com/gpu"


class Problems:
    """Collects problems so that one run reports all of them."""

    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")


def load_yaml_docs(path, problems):
    """Every non-empty document of a YAML file, or [] after a parse problem."""
    try:
        with open(path, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        problems.add(path, f"cannot be read as YAML: {e}")
        return []


def server_routes(root, problems):
    """The paths the server routes: the `path = "..."` of every
    `#[utoipa::path(...)]` under crates/server/src (lib.rs routes those handlers)."""
    src = root / "crates/server/src"
    routes = set()
    try:
        for f in sorted(src.rglob("*.rs")):
            text = f.read_text(encoding="utf-8")
            for block in re.findall(r"#\[utoipa::path\((.*?)\)\]\s*pub async fn", text, re.S):
                routes.update(re.findall(r'^\s*path\s*=\s*"([^"]+)"', block, re.M))
    except OSError as e:
        problems.add(src, f"cannot be read: {e}")
        return set()
    if not routes:
        problems.add(src, "no #[utoipa::path(path = \"...\")] found: the probe paths cannot be checked")
    return routes


# ----------------------------------------------------------------- Kubernetes

KUSTOMIZATION_KEYS = {
    "apiVersion", "kind", "namespace", "resources", "images", "labels",
    "commonLabels", "commonAnnotations", "namePrefix", "nameSuffix",
    "patches", "configMapGenerator", "secretGenerator", "replicas",
}


def pod_spec(doc):
    """The pod template's spec of a workload, or None for other kinds."""
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return (spec.get("template") or {}).get("spec") or {}
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return (job.get("template") or {}).get("spec") or {}
    if kind == "Pod":
        return spec
    return None


def template_labels(doc):
    spec = doc.get("spec") or {}
    return ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}


def image_name(image):
    """`registry/name:tag` -> `registry/name` (a digest or tag removed)."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        image = image[: len(image) - len(last)] + last.split(":", 1)[0]
    return image


def check_kubernetes(root, routes, problems):
    folder = root / "deploy/kubernetes"
    kust_path = folder / "kustomization.yaml"
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        problems.add(folder, "no manifests found")
        return
    versions = os.environ.get("CHECK_K8S_VERSIONS", "1.31 1.37").split()

    resources = []  # (path, doc)
    kustomization = None
    for path in files:
        for doc in load_yaml_docs(path, problems):
            rel = path.relative_to(root)
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                problems.add(rel, "a document without apiVersion and kind")
                continue
            if doc["kind"] == "Kustomization":
                if path != kust_path:
                    problems.add(rel, "a Kustomization outside kustomization.yaml")
                kustomization = doc
                continue
            name = (doc.get("metadata") or {}).get("name")
            if not name:
                problems.add(rel, f"{doc['kind']} without metadata.name")
            resources.append((rel, doc))
            for v in versions:
                try:
                    kubernetes_validate.validate(doc, v, strict=True)
                except kubernetes_validate.ValidationError as e:
                    at = ".".join(str(p) for p in e.path) or "(top)"
                    problems.add(rel, f"{doc['kind']}/{name} is not valid Kubernetes {v} at {at}: {e.message}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    problems.add(rel, f"{doc['kind']}/{name}: {e.message}")
                except Exception as e:  # a version the package lacks, a broken schema
                    problems.add(rel, f"{doc['kind']}/{name}: cannot be validated against {v}: {e}")

    check_kustomization(root, folder, kustomization, files, resources, problems)
    check_references(resources, routes, problems)


def check_kustomization(root, folder, kust, files, resources, problems):
    rel = (folder / "kustomization.yaml").relative_to(root)
    if kust is None:
        problems.add(rel, "missing: nothing ties the manifests together")
        return
    if kust.get("apiVersion") != "kustomize.config.k8s.io/v1beta1":
        problems.add(rel, f"apiVersion {kust.get('apiVersion')!r}, expected kustomize.config.k8s.io/v1beta1")
    for key in sorted(set(kust) - KUSTOMIZATION_KEYS):
        problems.add(rel, f"unknown field {key!r}")
    listed = kust.get("resources") or []
    for r in listed:
        if not (folder / r).is_file():
            problems.add(rel, f"resource {r} does not exist")
    # Examples (`*.example.yaml`, e.g. a Secret with placeholders) are checked
    # like the rest but never applied; every other manifest must be listed.
    manifests = {str(p.relative_to(folder)) for p in files if p.name != "kustomization.yaml"}
    for m in sorted(m for m in manifests & set(listed) if m.endswith(".example.yaml")):
        problems.add(rel, f"{m} is an example and must not be applied")
    for m in sorted(m for m in manifests - set(listed) if not m.endswith(".example.yaml")):
        problems.add(rel, f"{m} is not listed in resources")
    image_names = {i.get("name") for i in kust.get("images") or []}
    for path, doc in resources:
        spec = pod_spec(doc)
        for c in (spec or {}).get("containers", []) + (spec or {}).get("initContainers", []):
            if image_name(c.get("image", "")) == SERVER_IMAGE and SERVER_IMAGE not in image_names:
                problems.add(rel, f"no `images` entry for {SERVER_IMAGE} (used by {path})")


def check_references(resources, routes, problems):
    secrets = {}
    claims = set()
    workloads = []
    for path, doc in resources:
        kind, meta = doc["kind"], doc.get("metadata") or {}
        if kind == "Secret":
            secrets[meta.get("name")] = set(doc.get("stringData") or {}) | set(doc.get("data") or {})
        elif kind == "PersistentVolumeClaim":
            claims.add(meta.get("name"))
        if pod_spec(doc) is not None:
            workloads.append((path, doc))

    for path, doc in workloads:
        kind, name = doc["kind"], doc["metadata"].get("name")
        spec = pod_spec(doc)
        where = f"{path} {kind}/{name}"
        selector = ((doc.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        labels = template_labels(doc)
        if kind != "Job" and not selector:
            problems.add(where, "no selector.matchLabels")
        for k, v in selector.items():
            if labels.get(k) != v:
                problems.add(where, f"selector {k}={v} does not match the pod template's labels")
        templates = {t.get("metadata", {}).get("name") for t in (doc.get("spec") or {}).get("volumeClaimTemplates") or []}
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        for v in volumes.values():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and claim not in claims:
                problems.add(where, f"volume {v['name']} claims {claim}, which no manifest defines")
        containers = spec.get("containers") or []
        for c in containers + (spec.get("initContainers") or []):
            cw = f"{where} container {c.get('name')}"
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes and m.get("name") not in templates:
                    problems.add(cw, f"mounts volume {m.get('name')}, which the pod does not have")
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    if ref.get("name") not in secrets:
                        problems.add(cw, f"env {e['name']} reads Secret {ref.get('name')}, which no manifest defines")
                    elif ref.get("key") not in secrets[ref["name"]]:
                        problems.add(cw, f"env {e['name']} reads key {ref.get('key')} that Secret {ref['name']} lacks")
        for c in containers:
            cw = f"{where} container {c.get('name')}"
            if image_name(c.get("image", "")) != SERVER_IMAGE:
                continue
            # The service and the workers time kernels: one whole GPU each.
            limits = (c.get("resources") or {}).get("limits") or {}
            if str(limits.get(GPU)) != "1":
                problems.add(cw, f"resources.limits[{GPU}] is {limits.get(GPU)!r}, expected 1")
            if not (c.get("resources") or {}).get("requests"):
                problems.add(cw, "no resource requests")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                http = (c.get(probe) or {}).get("httpGet")
                if http and http.get("path") not in routes:
                    problems.add(cw, f"{probe} asks {http.get('path')}, which the server does not route")
            if kind == "Deployment":
                for probe in ("livenessProbe", "readinessProbe"):
                    if not (c.get(probe) or {}).get("httpGet"):
                        problems.add(cw, f"no HTTP {probe}")
        if kind == "Job":
            jspec = doc.get("spec") or {}
            if jspec.get("completionMode") != "Indexed":
                problems.add(where, f"completionMode is {jspec.get('completionMode')!r}, expected Indexed")
            if not isinstance(jspec.get("parallelism"), int) or jspec["parallelism"] < 1:
                problems.add(where, "parallelism must be a positive number")
            if "backoffLimitPerIndex" in jspec and spec.get("restartPolicy") != "Never":
                problems.add(where, "backoffLimitPerIndex needs restartPolicy: Never")

    for path, doc in resources:
        if doc["kind"] != "Service":
            continue
        name = doc["metadata"].get("name")
        sel = (doc.get("spec") or {}).get("selector") or {}
        matches = [w for _, w in workloads if sel and all(template_labels(w).get(k) == v for k, v in sel.items())]
        if not matches:
            problems.add(f"{path} Service/{name}", f"selector {sel} matches no workload's pods")
            continue
        ports = {p.get("name") for w in matches for c in pod_spec(w).get("containers") or [] for p in c.get("ports") or []}
        for p in (doc.get("spec") or {}).get("ports") or []:
            target = p.get("targetPort")
            if isinstance(target, str) and target not in ports:
                problems.add(f"{path} Service/{name}", f"targetPort {target} names no container port of its pods")


# -------------------------------------------------------------------- compose

def profiles_of(service):
    return set(service.get("profiles") or [])


def check_compose(root, problems):
    path = root / "docker-compose.yml"
    docs = load_yaml_docs(path, problems)
    if not docs:
        return {}
    rel = path.relative_to(root)
    compose = docs[0]
    services = compose.get("services") or {}
    volumes = set((compose.get("volumes") or {}).keys())
    for name, s in services.items():
        where = f"{rel} service {name}"
        deps = s.get("depends_on") or {}
        for dep in deps if isinstance(deps, (dict, list)) else []:
            if dep not in services:
                problems.add(where, f"depends on {dep}, which is not a service")
                continue
            # A dependency must be enabled by every profile that enables this service.
            need, have = profiles_of(s), profiles_of(services[dep])
            if have and (not need or not need <= have):
                problems.add(where, f"depends on {dep}, which profiles {sorted(need) or 'none'} do not all enable ({sorted(have)})")
        for v in s.get("volumes") or []:
            source = v.split(":", 1)[0] if isinstance(v, str) else (v.get("source") or "")
            if not source or source.startswith(("/", "$", "~")):
                continue
            if source.startswith("."):
                if not (root / source).exists():
                    problems.add(where, f"mounts {source}, which is not in the repository")
            elif source not in volumes:
                problems.add(where, f"uses volume {source}, which `volumes:` does not declare")
        devices = (((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
        for d in devices:
            if ("count" in d) == ("device_ids" in d):
                problems.add(where, "a device request needs exactly one of count and device_ids")
    return services


# -------------------------------------------------------------------- HAProxy

def check_haproxy(root, services, routes, problems):
    path = root / "deploy/haproxy.cfg"
    rel = path.relative_to(root)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        problems.add(rel, f"cannot be read: {e}")
        return
    proxies = [n for n, s in services.items() if any("haproxy.cfg" in str(v) for v in s.get("volumes") or [])]
    if not proxies:
        problems.add(rel, "no compose service mounts it")
        return
    proxy_profiles = set().union(*(profiles_of(services[p]) for p in proxies))
    servers = re.findall(r"^\s*server\s+\S+\s+([^\s:]+):(\d+)", text, re.M)
    if not servers:
        problems.add(rel, "no `server` lines")
    for host, port in servers:
        s = services.get(host)
        if s is None:
            problems.add(rel, f"server {host} is not a compose service")
            continue
        if profiles_of(s) and not proxy_profiles <= profiles_of(s):
            problems.add(rel, f"server {host} is not started with the proxy's profiles {sorted(proxy_profiles)}")
        if port not in " ".join(str(x) for x in (s.get("expose") or []) + (s.get("command") or [])):
            problems.add(rel, f"server {host}:{port}: the service neither exposes nor binds port {port}")
    for uri in re.findall(r"http-check\s+send\b.*\buri\s+(\S+)", text):
        if uri not in routes:
            problems.add(rel, f"the health check asks {uri}, which the server does not route")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_deploy.py ROOT")
    root = Path(sys.argv[1]).resolve()
    problems = Problems()
    routes = server_routes(root, problems)
    check_kubernetes(root, routes, problems)
    services = check_compose(root, problems)
    check_haproxy(root, services, routes, problems)
    for p in problems.items:
        print(f"check-deploy: {p}", file=sys.stderr)
    if problems.items:
        print(f"check-deploy: {len(problems.items)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("check-deploy: Kubernetes manifests, compose references and HAProxy servers consistent")


if __name__ == "__main__":
    main()
