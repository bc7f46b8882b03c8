"""The JobSet controller we deploy under `trainingApi: v2` against the upstream v0.12.0 release
(kubernetes-sigs/jobset config/default, ../shared/contracts/jobset-v0.12.0/), as Kubeflow Trainer
v2.3.0's overlay installs it (namePrefix `jobset-`, namespace kubeflow-system, the release image:
../shared/contracts/kubeflow-trainer-v2.3.0/third-party-jobset-kustomization.yaml).

Compared: the pod (image, command, args after the config patch, ports, probes, mounts and their
sources, security, placement), the manager's config file, every object's kind and name, the
Services, both webhook configurations (paths, rules, object selectors, the Service they call) and
every RBAC rule. Intended differences: DEVIATIONS.
"""

from __future__ import annotations

import pytest
import yaml

from conformance import (
    ABSENT, CONTROLLER_DEVIATIONS, Deviation, apply_json_patch, contract, controller_view, declared_problems,
    differences, merge_manager_patches, one, our_controller_view, pod_view, yaml_docs,
)

JOBSET = "jobset-v0.12.0"
PREFIX = "jobset-"
DEVIATIONS = (
    Deviation("deployment.replicas", 2, 1,
              "the pod webhooks fail closed for every JobSet pod and a JobSet restart recreates all of a run's pods: "
              "with one replica a manager restart blocks the run's restart"),
    *CONTROLLER_DEVIATIONS,
)


def _docs(name: str) -> list[dict]:
    return yaml_docs(contract(JOBSET, name))


def _named(doc: dict) -> dict:
    """A release object as the overlay installs it: prefixed name, kubeflow-system namespace."""
    doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
    return doc


def upstream_image() -> str:
    [kustomization] = yaml_docs(contract("kubeflow-trainer-v2.3.0", "third-party-jobset-kustomization.yaml"))
    [image] = kustomization["images"]
    return f"{image['newName']}:{image['newTag']}"


def upstream_pod() -> dict:
    """manager.yaml with default/'s config, webhook and metrics patches (strategic merge: the
    container's args are replaced; ports, mounts and volumes merge by their keys)."""
    pod = one(_docs("components-manager-manager.yaml"), "Deployment")["spec"]["template"]["spec"]
    merge_manager_patches(pod, [one(_docs(patch), "Deployment") for patch in (
        "default-manager_config_patch.yaml", "default-manager_webhook_patch.yaml", "default-manager_metrics_patch.yaml")])
    [manager] = pod["containers"]
    manager["image"] = upstream_image()
    for volume in pod["volumes"]:
        source = volume.get("secret") or volume.get("configMap")
        key = "secretName" if "secret" in volume else "name"
        source[key] = PREFIX + source[key]
    pod["serviceAccountName"] = PREFIX + pod["serviceAccountName"]
    return pod


def upstream_webhooks() -> list[dict]:
    docs = _docs("components-webhook-manifests.yaml")
    patches = {"MutatingWebhookConfiguration": "components-webhook-patches-mutating-patch.yaml",
               "ValidatingWebhookConfiguration": "components-webhook-patches-validating-patch.yaml"}
    out = []
    for kind, patch in patches.items():
        configuration = _named(apply_json_patch(one(docs, kind), _docs(patch)[0]))
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"]["service"]
            service["name"], service["namespace"] = PREFIX + service["name"], "kubeflow-system"
        out.append(configuration)
    return out


def upstream_rbac() -> list[dict]:
    [kustomization] = _docs("components-rbac-kustomization.yaml")
    return [_named(d) for f in kustomization["resources"] for d in _docs(f"components-rbac-{f}")]


def upstream_objects() -> list[dict]:
    """Every object the overlay installs but the CRD (k8s/addons/jobset_crd.py) and the Namespace
    (Trainer's overlay removes it), as (kind, name)."""
    docs = [*upstream_rbac(), *_docs("components-webhook-manifests.yaml"), *_docs("components-webhook-service.yaml"),
            *_docs("components-internalcert-secret.yaml"), *_docs("default-manager_metrics_service.yaml"),
            *[d for d in _docs("components-manager-manager.yaml") if d["kind"] != "Namespace"]]
    named = [_named(d) if not d["metadata"]["name"].startswith(PREFIX) else d for d in docs]
    [manager] = _docs("components-manager-kustomization.yaml")
    named += [{"kind": "ConfigMap", "metadata": {"name": PREFIX + g["name"]}} for g in manager["configMapGenerator"]]
    return named


def upstream_view() -> dict:
    services = [_named(one(_docs(f), "Service"))
                for f in ("components-webhook-service.yaml", "default-manager_metrics_service.yaml")]
    deployment = one(_docs("components-manager-manager.yaml"), "Deployment")
    return controller_view(upstream_pod(), services, upstream_webhooks(), upstream_rbac(),
                           deployment["spec"]["replicas"], ABSENT)


@pytest.fixture(scope="module")
def ours() -> list[dict]:
    from k8s.addons.jobset import jobset_controller

    return jobset_controller()


def test_jobset_matches_upstream_v0_12_0_except_the_declared_deviations(ours):
    problems = declared_problems(differences(our_controller_view(ours), upstream_view()), DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_every_upstream_object_is_installed_under_the_overlays_name(ours):
    upstream = {(d["kind"], d["metadata"]["name"]) for d in upstream_objects()}
    mine = {(d["kind"], d["metadata"]["name"]) for d in ours if d["kind"] != "PodDisruptionBudget"}
    assert mine == upstream, (sorted(mine - upstream), sorted(upstream - mine))


def test_every_binding_binds_its_release_role_to_the_managers_service_account(ours):
    # kustomize prefixes the roleRef too.
    upstream = {d["metadata"]["name"]: PREFIX + d["roleRef"]["name"] for d in upstream_rbac() if d["kind"].endswith("Binding")}
    deployment = one(ours, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [d for d in ours if d["kind"].endswith("Binding")]
    assert {d["metadata"]["name"]: d["roleRef"]["name"] for d in bindings} == upstream
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kubeflow-system"}]


def test_namespaced_objects_live_in_kubeflow_system_as_trainer_installs_them(ours):
    [trainer] = yaml_docs(contract("kubeflow-trainer-v2.3.0", "overlays-manager-kustomization.yaml"))
    for doc in ours:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding") and not doc["kind"].endswith("Configuration"):
            assert doc["metadata"]["namespace"] == trainer["namespace"], doc["metadata"]["name"]


def test_the_manager_config_is_the_releases(ours):
    config_map = one(ours, "ConfigMap")
    [release] = _docs("components-manager-controller_manager_config.yaml")
    assert yaml.safe_load(config_map["data"]["controller_manager_config.yaml"]) == release
    assert release["leaderElection"]["leaderElect"] is True, "two replicas rely on leader election"


def test_the_cert_secret_and_webhook_service_are_the_names_the_manager_looks_up(ours):
    """internalCertManagement defaults (api/config/v1alpha1/defaults.go): the Secret the rotator
    writes and the Service its certificate is issued for, both after the overlay's namePrefix."""
    secret = one(ours, "Secret")
    pod = pod_view(one(ours, "Deployment")["spec"]["template"]["spec"])
    mount = pod["mount /tmp/k8s-webhook-server/serving-certs"]
    assert mount["readOnly"] is True
    assert mount["source"]["kind"] == "secret" and mount["source"]["secretName"] == secret["metadata"]["name"]
    assert secret["metadata"]["name"] == PREFIX + one(_docs("components-internalcert-secret.yaml"), "Secret")[
        "metadata"]["name"]
    services = {h["clientConfig"]["service"]["name"] for d in ours if d["kind"].endswith("WebhookConfiguration")
                for h in d["webhooks"]}
    assert services == {PREFIX + "webhook-service"}
    assert any(d["kind"] == "Service" and d["metadata"]["name"] in services for d in ours)


def test_the_image_is_the_one_trainer_v2_3_0_installs():
    from k8s.pods.images import IMAGES

    assert IMAGES["jobset"] == upstream_image()


def test_the_gate_fails_on_an_undeclared_difference_and_on_a_stale_row(ours):
    mine = our_controller_view(ours)
    broken = dict(mine, **{"validating selector vpod.kb.io": ABSENT})
    assert any("undeclared" in p for p in declared_problems(differences(broken, upstream_view()), DEVIATIONS))
    stale = (*DEVIATIONS, Deviation("pod.hostNetwork", False, False, "no longer differs"))
    assert any("no longer differs" in p for p in declared_problems(differences(mine, upstream_view()), stale))


def test_the_manager_pod_meets_restricted_which_kubeflow_system_enforces(ours):
    from pod_security_standards import violations

    from k8s.addons.namespaces import V2_POD_SECURITY

    template = one(ours, "Deployment")["spec"]["template"]
    assert V2_POD_SECURITY["kubeflow-system"].enforce == "restricted"
    assert violations(template["metadata"], template["spec"], "restricted") == []
