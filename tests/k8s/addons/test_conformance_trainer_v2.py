"""The Kubeflow Trainer controller we deploy under `trainingApi: v2` against the upstream v2.3.0
release (kubeflow/trainer manifests/overlays/manager with base/manager, base/rbac and base/webhook:
../shared/contracts/kubeflow-trainer-v2.3.0/).

Compared: the pod (image, args after the config patch, ports, probes, mounts and their sources,
security, placement), the manager's config file, every object's kind and name, the Service, both
webhook configurations (paths, rules, object selectors, the Service they call) and every RBAC rule.
Intended differences: DEVIATIONS.
"""

from __future__ import annotations

import pytest
import yaml

from conformance import (
    ABSENT, CONTROLLER_DEVIATIONS, Deviation, apply_json_patch, contract, controller_view, declared_problems,
    differences, one, our_controller_view, pod_view, yaml_docs,
)

TRAINER = "kubeflow-trainer-v2.3.0"
DEVIATIONS = (
    Deviation("deployment.replicas", 2, 1,
              "the webhooks fail closed: with one replica no run can be created while that pod restarts; "
              "every v2.3.0 replica serves them (pkg/util/cert/cert.go: RequireLeaderElection false)"),
    *CONTROLLER_DEVIATIONS,
    Deviation("resources", {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}, ABSENT,
              "upstream sets none: requests keep both replicas schedulable beside the other controllers on the "
              "system nodes, and the limit bounds a leak there"),
)


def _docs(name: str) -> list[dict]:
    return yaml_docs(contract(TRAINER, name))


def overlay() -> dict:
    [kustomization] = _docs("overlays-manager-kustomization.yaml")
    return kustomization


def upstream_image() -> str:
    pod = one(_docs("base-manager-manager.yaml"), "Deployment")["spec"]["template"]["spec"]
    [pin] = [i for i in overlay()["images"] if i["name"] == pod["containers"][0]["image"]]
    return f"{pod['containers'][0]['image']}:{pin['newTag']}"


def upstream_pod() -> dict:
    """manager.yaml with manager_config_patch.yaml (strategic merge: args set, mounts and volumes merged)."""
    pod = one(_docs("base-manager-manager.yaml"), "Deployment")["spec"]["template"]["spec"]
    patched = one(_docs("base-manager-manager_config_patch.yaml"), "Deployment")["spec"]["template"]["spec"]
    [manager], [patch] = pod["containers"], patched["containers"]
    manager["args"] = patch["args"]
    manager["volumeMounts"] += patch["volumeMounts"]
    pod["volumes"] += patched["volumes"]
    manager["image"] = upstream_image()
    return pod


def upstream_webhooks() -> list[dict]:
    docs = _docs("base-webhook-manifests.yaml")
    out = []
    for kind, patch in (("MutatingWebhookConfiguration", "base-webhook-patch_mutating.yaml"),
                        ("ValidatingWebhookConfiguration", "base-webhook-patch_validating.yaml")):
        configuration = apply_json_patch(one(docs, kind), _docs(patch)[0])
        for hook in configuration["webhooks"]:
            hook["clientConfig"]["service"]["namespace"] = overlay()["namespace"]
        out.append(configuration)
    return out


def upstream_rbac() -> list[dict]:
    [kustomization] = _docs("base-rbac-kustomization.yaml")
    return [d for f in kustomization["resources"] for d in _docs(f"base-rbac-{f}")]


def upstream_view() -> dict:
    deployment = one(_docs("base-manager-manager.yaml"), "Deployment")
    return controller_view(upstream_pod(), [one(_docs("base-manager-manager.yaml"), "Service")],
                           upstream_webhooks(), upstream_rbac(), deployment["spec"].get("replicas", 1), ABSENT)


@pytest.fixture(scope="module")
def ours() -> list[dict]:
    from k8s.addons.trainer_v2 import trainer_controller

    return trainer_controller()


def test_trainer_matches_upstream_v2_3_0_except_the_declared_deviations(ours):
    problems = declared_problems(differences(our_controller_view(ours), upstream_view()), DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_every_upstream_object_is_installed_under_its_name(ours):
    """All of base/manager, base/rbac, base/webhook and the overlay's generated Secret and ConfigMap;
    the Namespace is the namespaces add-on's, the CRDs trainer-v2-crds', JobSet the jobset add-on's."""
    upstream = [*_docs("base-manager-manager.yaml"), *upstream_rbac(), *upstream_webhooks()]
    names = {(d["kind"], d["metadata"]["name"]) for d in upstream}
    [manager] = _docs("base-manager-kustomization.yaml")
    names |= {("ConfigMap", g["name"]) for g in manager["configMapGenerator"] + overlay()["configMapGenerator"]}
    names |= {("Secret", g["name"]) for g in overlay()["secretGenerator"]}
    mine = {(d["kind"], d["metadata"]["name"]) for d in ours if d["kind"] != "PodDisruptionBudget"}
    assert mine == names, (sorted(mine - names), sorted(names - mine))


def test_bindings_and_the_public_configmap_are_upstreams(ours):
    for binding in (d for d in upstream_rbac() if d["kind"].endswith("Binding")):
        mine = next(d for d in ours
                    if d["kind"] == binding["kind"] and d["metadata"]["name"] == binding["metadata"]["name"])
        assert mine["roleRef"] == binding["roleRef"]
        expected = [{**s, "namespace": overlay()["namespace"]} if s["kind"] == "ServiceAccount" else s
                    for s in binding["subjects"]]
        assert mine["subjects"] == expected
    [generator] = overlay()["configMapGenerator"]
    public = next(d for d in ours if d["kind"] == "ConfigMap" and d["metadata"]["name"] == generator["name"])
    assert [f"{k}={v}" for k, v in public["data"].items()] == generator["literals"]


def test_the_manager_config_is_the_releases(ours):
    from k8s.pods.trainer_v2 import CONFIG_MAP

    config_map = next(d for d in ours if d["kind"] == "ConfigMap" and d["metadata"]["name"] == CONFIG_MAP)
    [release] = _docs("base-manager-controller_manager_config.yaml")
    assert yaml.safe_load(config_map["data"]["controller_manager_config.yaml"]) == release


def test_names_tie_together_as_the_manager_looks_them_up(ours):
    """certManagement's Service and Secret are the ones created, the Secret is mounted where the
    webhook server reads, and the Lease `ops doctor` should read is the config's."""
    from k8s.pods.trainer_v2 import LEASE

    [config] = _docs("base-manager-controller_manager_config.yaml")
    certs = config["certManagement"]
    assert one(ours, "Secret")["metadata"]["name"] == certs["webhookSecretName"]
    assert one(ours, "Service")["metadata"]["name"] == certs["webhookServiceName"]
    pod = pod_view(one(ours, "Deployment")["spec"]["template"]["spec"])
    mount = pod["mount /tmp/k8s-webhook-server/serving-certs"]
    assert mount["readOnly"] is True and mount["source"]["secretName"] == certs["webhookSecretName"]
    assert config["leaderElection"]["resourceName"] == LEASE


def test_the_image_is_the_release_pin():
    from k8s.pods.images import IMAGES

    assert IMAGES["trainer-controller-manager"] == upstream_image()


def test_the_manager_pod_meets_restricted(ours):
    from pod_security_standards import violations

    template = one(ours, "Deployment")["spec"]["template"]
    assert violations(template["metadata"], template["spec"], "restricted") == []


def test_the_gate_fails_on_an_undeclared_difference_and_on_a_stale_row(ours):
    mine = our_controller_view(ours)
    broken = dict(mine, **{"validating selector validator.trainingruntime.trainer.kubeflow.org": ABSENT})
    assert any("undeclared" in p for p in declared_problems(differences(broken, upstream_view()), DEVIATIONS))
    stale = (*DEVIATIONS, Deviation("pod.hostNetwork", False, False, "no longer differs"))
    assert any("no longer differs" in p for p in declared_problems(differences(mine, upstream_view()), stale))


def test_secrets_stay_granted_cluster_wide_because_the_controller_watches_them_in_every_namespace(ours):
    """Not narrowed to a Role in kubeflow-system as the v1 operator's, JobSet's and Kueue's are, and
    not declared a deviation. At v2.3.0 (commit 658725bd) the manager's cache spans the cluster:
    pkg/config/config.go:101-123 builds ctrl.Options with no Cache (no DefaultNamespaces, no ByObject
    for Secrets). The MPI and Flux plugins are registered whatever the runtimes
    (pkg/runtime/framework/plugins/registry.go:41-52) and each adds Watches(&corev1.Secret{}) to the
    TrainJob controller (mpi/mpi.go:235-253, flux/flux.go:241-258), so the controller lists and
    watches Secrets in every namespace: under a namespaced grant that informer is forbidden, its cache
    never syncs and the controller does not start. They also read and write Secrets in the TrainJob's
    own namespace, which a TrainingRuntime there chooses through mlPolicy.mpi or mlPolicy.flux: the
    SSH key (mpi.go:266 Get, mpi.go:296 apply; RBAC marker mpi.go:66) and the Flux CURVE certificate
    (flux.go:531). Only the cert rotator (pkg/util/cert/cert.go:61,73-76, through cert-controller
    v0.16.0's namespaced cache) and the TrainJobStatus plugin (trainjobstatus.go:179-183) read in
    kubeflow-system alone."""
    def secret_verbs(role: dict) -> set[str]:
        return {v for rule in role["rules"] if "" in rule["apiGroups"] and "secrets" in rule["resources"]
                for v in rule["verbs"]}

    upstream = upstream_rbac()
    role = one(upstream, "ClusterRole")
    # list and watch: the informer; get and create: the MPI plugin's Get and its SSH key Secret.
    assert {"get", "list", "watch", "create"} <= secret_verbs(role)
    assert one(upstream, "ClusterRoleBinding")["roleRef"]["name"] == role["metadata"]["name"]
    [crd] = _docs("base-crds-trainer.kubeflow.org_trainingruntimes.yaml")
    ml_policy = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["mlPolicy"]
    assert crd["spec"]["scope"] == "Namespaced" and {"mpi", "flux"} <= set(ml_policy["properties"])

    mine = one(ours, "ClusterRole")
    assert secret_verbs(mine) == secret_verbs(role)
    assert one(ours, "ClusterRoleBinding")["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                                        "kind": "ClusterRole", "name": mine["metadata"]["name"]}
    assert not any(secret_verbs(d) for d in ours if d["kind"] == "Role")
