"""What the upstream-conformance tests share.

Each third-party component gets a test module that loads the upstream artifact at the pinned
version from ../shared/contracts/ and compares a *view* of both sides: the facts that decide
whether the component runs (image, command and flags, env, ports, probes, mounts and the kind of
their sources, security context, host namespaces, placement, Service ports, webhooks, RBAC).
Defaults are filled in on both sides, so `runAsNonRoot: false` and an absent field compare equal.

Every intended difference is declared in one table per component (field, ours, upstream, why).
`declared_problems` fails on a difference that is not in the table, on a table row whose values
are not what the two sides actually render, and on a row for a field that no longer differs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pytest
import yaml

from tests.conftest import CONTRACTS_DIR, contract  # noqa: F401 (contract: re-exported)


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


class _Present:
    """In a table row: any value but ABSENT. For rows where a side's value is long and checked
    elsewhere (an upstream webhook we do not register, a placement rule built per environment)."""

    def __repr__(self) -> str:
        return "PRESENT"


PRESENT = _Present()


def _matches(declared: Any, actual: Any) -> bool:
    if declared is PRESENT:
        return actual is not ABSENT
    return declared == actual


@dataclass(frozen=True)
class Deviation:
    field: str
    ours: Any
    upstream: Any
    why: str


def yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def one(docs: Iterable[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)} objects"
    return found[0]


def image_parts(image: str) -> tuple[str, str]:
    repository, _, tag = image.rpartition(":")
    if "/" in tag or not repository:
        return image, ""
    return repository, tag


# --- views ----------------------------------------------------------------------------------

_SECURITY_DEFAULTS = {
    "privileged": False,
    # Kubernetes lets a process gain privileges unless told otherwise (no_new_privs is off).
    "allowPrivilegeEscalation": True,
    "runAsNonRoot": False,
    "runAsUser": ABSENT,  # the image's USER
    "runAsGroup": ABSENT,
    "readOnlyRootFilesystem": False,
    "capabilities": ABSENT,
    # Without a profile the container runtime runs the container Unconfined.
    "seccompProfile": ABSENT,
}
_PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1,
                   "successThreshold": 1, "failureThreshold": 3}


def _probe(probe: dict | None) -> Any:
    if not probe:
        return ABSENT
    probe = {**_PROBE_DEFAULTS, **probe}
    if "httpGet" in probe:
        probe["httpGet"] = {"scheme": "HTTP", **probe["httpGet"]}
    return probe


def _volume_source(volume: dict) -> dict:
    """The kind of a volume's source and what identifies it."""
    if "secret" in volume:
        src = volume["secret"]
        return {"kind": "secret", "secretName": src["secretName"], "defaultMode": src.get("defaultMode", 0o644),
                "optional": src.get("optional", False)}
    if "hostPath" in volume:
        src = volume["hostPath"]
        return {"kind": "hostPath", "path": src["path"], "type": src.get("type", "")}
    if "emptyDir" in volume:
        return {"kind": "emptyDir", **volume["emptyDir"]}
    for kind in ("configMap", "persistentVolumeClaim", "projected", "csi"):
        if kind in volume:
            return {"kind": kind, **volume[kind]}
    raise AssertionError(f"volume {volume.get('name')}: unknown source {sorted(volume)}")


def _effective_security(pod_spec: dict, container: dict) -> dict:
    pod_ctx, ctx = pod_spec.get("securityContext", {}), container.get("securityContext", {})
    effective = dict(_SECURITY_DEFAULTS)
    for key in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"):
        if key in pod_ctx:
            effective[key] = pod_ctx[key]
    for key in _SECURITY_DEFAULTS:
        if key in ctx:
            effective[key] = ctx[key]
    if effective["capabilities"] in ({}, {"drop": []}):
        effective["capabilities"] = ABSENT
    return effective


def container_of(pod_spec: dict, name: str | None = None) -> dict:
    containers = pod_spec["containers"]
    if name is None:
        assert len(containers) == 1, [c["name"] for c in containers]
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def merge_manager_patches(pod_spec: dict, patches: Iterable[dict]) -> dict:
    """A kubebuilder manager's pod with config/default's Deployment patches applied as kustomize's
    strategic merge does: the patched container's args replace the base's; ports, mounts and volumes
    are added (they merge by their keys, which the patches never repeat). Changes `pod_spec`."""
    [manager] = pod_spec["containers"]
    for patch in patches:
        patched = patch["spec"]["template"]["spec"]
        [container] = patched["containers"]
        assert container["name"] == manager["name"]
        if "args" in container:
            manager["args"] = container["args"]
        manager["ports"] = manager.get("ports", []) + container.get("ports", [])
        manager["volumeMounts"] = manager.get("volumeMounts", []) + container.get("volumeMounts", [])
        pod_spec["volumes"] = pod_spec.get("volumes", []) + patched.get("volumes", [])
    return pod_spec


def pod_view(pod_spec: dict, container_name: str | None = None) -> dict[str, Any]:
    """The facts of one pod template (and its main container) that decide whether it runs."""
    container = container_of(pod_spec, container_name)
    repository, tag = image_parts(container["image"])
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    view: dict[str, Any] = {
        "image.repository": repository,
        "image.tag": tag,
        "command": container.get("command", ABSENT),
        "args": container.get("args", ABSENT),
        "env": {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])} or ABSENT,
        "ports": sorted((p["containerPort"], p.get("name", ""), p.get("protocol", "TCP"))
                        for p in container.get("ports", [])) or ABSENT,
        "probe.liveness": _probe(container.get("livenessProbe")),
        "probe.readiness": _probe(container.get("readinessProbe")),
        "probe.startup": _probe(container.get("startupProbe")),
        "pod.hostNetwork": pod_spec.get("hostNetwork", False),
        "pod.hostPID": pod_spec.get("hostPID", False),
        "pod.hostIPC": pod_spec.get("hostIPC", False),
        "pod.priorityClassName": pod_spec.get("priorityClassName", ABSENT),
        "pod.serviceAccountName": pod_spec.get("serviceAccountName", "default"),
        "pod.automountServiceAccountToken": pod_spec.get("automountServiceAccountToken", True),
        "pod.tolerations": sorted((t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""),
                                   t.get("effect", "")) for t in pod_spec.get("tolerations", [])) or ABSENT,
        "pod.placement": {k: pod_spec[k] for k in ("nodeSelector", "affinity") if pod_spec.get(k)} or ABSENT,
    }
    for key, value in _effective_security(pod_spec, container).items():
        view[f"security.{key}"] = value
    for mount in container.get("volumeMounts", []):
        view[f"mount {mount['mountPath']}"] = {"readOnly": mount.get("readOnly", False),
                                               "subPath": mount.get("subPath", ""),
                                               "source": _volume_source(volumes[mount["name"]])}
    return view


def service_view(service: dict) -> dict[str, Any]:
    spec = service["spec"]
    return {
        "service.name": service["metadata"]["name"],
        "service.type": spec.get("type", "ClusterIP"),
        "service.ports": sorted((p.get("name", ""), p["port"], p.get("targetPort", p["port"]),
                                 p.get("protocol", "TCP")) for p in spec["ports"]),
    }


def rbac_view(rules: list[dict], namespace: str = "") -> dict[str, Any]:
    """'rbac GROUP/RESOURCE' -> the verbs granted on it, over every rule; a Role's rules (granted in
    `namespace` only) are keyed 'rbac[NAMESPACE] GROUP/RESOURCE'."""
    scope = f"[{namespace}]" if namespace else ""
    granted: dict[str, set[str]] = {}
    for rule in rules:
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault(f"rbac{scope} {group or 'core'}/{resource}", set()).update(rule["verbs"])
    return {key: tuple(sorted(verbs)) for key, verbs in granted.items()}


def webhook_view(configuration: dict) -> dict[str, Any]:
    """'webhook RESOURCE' -> the settings of the validating webhook for that resource."""
    view: dict[str, Any] = {"webhooks.configurationName": configuration["metadata"]["name"]}
    for hook in configuration["webhooks"]:
        [rule] = hook["rules"]
        [resource] = rule["resources"]
        service = hook["clientConfig"]["service"]
        view[f"webhook {resource}"] = {
            "name": hook["name"],
            "path": service.get("path", "/"),
            "service": (service["name"], service["namespace"], service.get("port", 443)),
            "failurePolicy": hook.get("failurePolicy", "Fail"),
            "sideEffects": hook["sideEffects"],
            "admissionReviewVersions": tuple(hook["admissionReviewVersions"]),
            "operations": tuple(sorted(rule["operations"])),
            "apiGroups": tuple(rule["apiGroups"]),
            "apiVersions": tuple(rule["apiVersions"]),
            "scope": rule.get("scope", "*"),
            "timeoutSeconds": hook.get("timeoutSeconds", 10),
            "matchPolicy": hook.get("matchPolicy", "Equivalent"),
        }
    return view


# --- the Kubernetes controllers we run as two replicas (JobSet, Kubeflow Trainer) ------------

SYSTEM_SECURITY = "the restricted Pod Security profile of kubeflow-system: the manager needs no root"
# What every such controller of ours adds to its upstream Deployment, and why.
CONTROLLER_DEVIATIONS = (
    Deviation("pdb.minAvailable", 1, ABSENT, "node drains and node group updates evict one replica at a time"),
    Deviation("pod.priorityClassName", "eks-distributed-training-control", ABSENT,
              "admission and the controllers must not wait behind training pods (k8s/addons/priority_classes.py)"),
    Deviation("pod.placement", PRESENT, ABSENT,
              "preferred, not required: keep the control plane on the system node group, off GPU nodes, "
              "and the two replicas on different nodes"),
    Deviation("security.runAsUser", 65532, ABSENT, "restated so the restricted profile admits the pod; "
              "distroless's nonroot uid"),
    Deviation("security.runAsGroup", 65532, ABSENT, SYSTEM_SECURITY),
)


def services_view(services: list[dict]) -> dict[str, Any]:
    """Service name -> its ports, named targets included (the pod's port names must match)."""
    return {f"service {s['metadata']['name']}": sorted(
        (p.get("name", ""), p["port"], p.get("targetPort", p["port"]), p.get("protocol", "TCP"))
        for p in s["spec"]["ports"]) for s in services}


def hooks_view(configurations: list[dict]) -> dict[str, Any]:
    view = {}
    for configuration in configurations:
        kind = configuration["kind"].removesuffix("WebhookConfiguration").lower()
        view.update({f"{kind} {k}": v for k, v in webhook_view(configuration).items()})
        for hook in configuration["webhooks"]:
            view[f"{kind} selector {hook['name']}"] = hook.get("objectSelector", ABSENT)
    return view


def rules_view(kind: str, name: str, rules: list[dict]) -> dict[str, Any]:
    """'KIND NAME group/resource' (or the URL; '@names' when the rule is limited to some) -> verbs."""
    granted: dict[str, set] = {}
    for rule in rules:
        only = "@" + ",".join(rule["resourceNames"]) if rule.get("resourceNames") else ""
        targets = [f"{g or 'core'}/{r}{only}" for g in rule.get("apiGroups", []) for r in rule.get("resources", [])]
        for target in targets + list(rule.get("nonResourceURLs", [])):
            granted.setdefault(f"rbac {kind} {name} {target}", set()).update(rule["verbs"])
    return {k: tuple(sorted(v)) for k, v in granted.items()}


def controller_view(pod: dict, services: list[dict], webhooks: list[dict], rbac: list[dict], replicas: int,
                    pdb: Any) -> dict[str, Any]:
    """A controller's pod, its resources, Services, webhook configurations, (Cluster)Role rules,
    replica count and disruption budget."""
    out = pod_view(pod)
    out["resources"] = container_of(pod).get("resources") or ABSENT
    out.update(services_view(services))
    out.update(hooks_view(webhooks))
    for doc in rbac:
        if doc["kind"] in ("Role", "ClusterRole"):
            out.update(rules_view(doc["kind"], doc["metadata"]["name"], doc["rules"]))
    out["deployment.replicas"] = replicas
    out["pdb.minAvailable"] = pdb
    return out


def our_controller_view(docs: list[dict]) -> dict[str, Any]:
    """controller_view of our rendering; its budget must cover the manager's pods."""
    deployment = one(docs, "Deployment")
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items(), "the budget covers the manager's pods"
    services = [d for d in docs if d["kind"] == "Service"]
    webhooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    rbac = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    return controller_view(deployment["spec"]["template"]["spec"], services, webhooks, rbac,
                           deployment["spec"]["replicas"], pdb["spec"]["minAvailable"])


# --- the check ------------------------------------------------------------------------------

def differences(ours: dict[str, Any], upstream: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    out = {}
    for key in sorted(set(ours) | set(upstream)):
        a, b = ours.get(key, ABSENT), upstream.get(key, ABSENT)
        if a != b:
            out[key] = (a, b)
    return out


def declared_problems(found: dict[str, tuple[Any, Any]], table: Iterable[Deviation]) -> list[str]:
    """Every difference must be a table row with exactly the rendered values; every row must
    still be a difference."""
    rows = {}
    problems = []
    for row in table:
        if row.field in rows:
            problems.append(f"{row.field}: declared twice")
        rows[row.field] = row
    for key, (ours, upstream) in found.items():
        row = rows.get(key)
        if row is None:
            problems.append(f"{key}: undeclared difference: ours {ours!r}, upstream {upstream!r}")
        elif not (_matches(row.ours, ours) and _matches(row.upstream, upstream)):
            problems.append(f"{key}: the table says ours {row.ours!r} / upstream {row.upstream!r}, "
                            f"but ours renders {ours!r} / upstream {upstream!r}")
    for key, row in rows.items():
        if key not in found:
            problems.append(f"{key}: declared deviation no longer differs (both sides render the same); drop the row")
        if not row.why.strip():
            problems.append(f"{key}: declared without a reason")
    return problems


def apply_json_patch(doc: dict, ops: list[dict]) -> dict:
    """The `replace` and `add` operations kustomize patches apply (RFC 6902), on a copy."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("replace", "add"), op
        *parents, last = [p for p in op["path"].split("/") if p]
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list) and op["op"] == "add":
            target.insert(len(target) if last == "-" else int(last), op["value"])
        elif isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            assert (last in target) == (op["op"] == "replace"), op
            target[last] = op["value"]
    return doc
