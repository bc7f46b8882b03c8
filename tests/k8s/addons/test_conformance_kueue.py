"""The Kueue controller we deploy under `"queueing": "kueue"` against the upstream v0.19.2 release
(kubernetes-sigs/kueue config/default: ../shared/contracts/kueue-v0.19.2/), for both training APIs.

Compared: the pod (image, command, args after the config patch, ports, probes, mounts and their
sources, security, placement), its resources, the Services, both webhook configurations hook by hook
(paths, rules, failure policy, selectors, the Service they call), every rule of the manager's
ClusterRole, the manager's config file key by key, and the names that tie them together (the Secret
and Service the certificate rotator uses, the configurations it injects into, the CRDs whose
conversion webhooks it injects into). Intended differences: deviations(api).

Upstream objects that are not in the contracts (config/components/visibility and the namespaced
RBAC roles of config/components/rbac, read at kubernetes-sigs/kueue v0.19.2, commit 8eab6877) are
restated in UPSTREAM_EXTRA with their paths.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from conformance import (
    ABSENT, CONTROLLER_DEVIATIONS, PRESENT, Deviation, contract, declared_problems, differences, merge_manager_patches,
    one, pod_view,
    rules_view, services_view, yaml_docs,
)
from config.queueing import KUEUE_VERSION, PYTORCHJOB_FRAMEWORK, TRAINJOB_FRAMEWORK, queued_frameworks

KUEUE = "kueue-v0.19.2"
PREFIX = "kueue-"
NAMESPACE = "kueue-system"
ROLE = "ClusterRole kueue-manager-role"
# The release image: the contract's kustomization names only the staging image (`…/k8s-staging-images/
# kueue/kueue:main`); releases are promoted to registry.k8s.io/kueue and tagged with the git tag
# (kubernetes-sigs/kueue v0.19.2: Makefile `IMAGE_REPO := $(IMAGE_REGISTRY)/kueue`, `IMAGE_TAG :=
# $(IMAGE_REPO):$(GIT_TAG)`; hack/releasing/wait_for_images.sh `--prod` sets
# IMAGE_REGISTRY="registry.k8s.io/kueue"; its README installs releases/download/v0.19.2/manifests.yaml).
RELEASE_REGISTRY = "registry.k8s.io/kueue"

# Upstream objects not in the contracts, as kubernetes-sigs/kueue v0.19.2 ships them (after namePrefix).
UPSTREAM_EXTRA = {
    # config/components/visibility/service.yaml
    "service kueue-visibility-server": [("https", 443, 8082, "TCP")],
    # config/components/visibility/apiservice_v1beta2.yaml
    "apiservice v1beta2.visibility.kueue.x-k8s.io": {
        "group": "visibility.kueue.x-k8s.io", "version": "v1beta2", "groupPriorityMinimum": 100,
        "versionPriority": 100, "insecureSkipTLSVerify": True,
        "service": {"name": "kueue-visibility-server", "namespace": NAMESPACE}},
    # config/components/visibility/role_binding.yaml (namespace kube-system by default/'s transformer)
    "rolebinding kube-system/kueue-visibility-server-auth-reader": "extension-apiserver-authentication-reader",
    # config/components/rbac/leader_election_role.yaml
    "rbac Role kueue-leader-election-role core/configmaps": ("create", "delete", "get", "list", "patch", "update",
                                                            "watch"),
    "rbac Role kueue-leader-election-role coordination.k8s.io/leases": ("create", "delete", "get", "list", "patch",
                                                                       "update", "watch"),
    "rbac Role kueue-leader-election-role core/events": ("create", "patch"),
    # config/components/rbac/manager_secrets_role.yaml
    "rbac Role kueue-manager-secrets-role core/secrets": ("get", "list", "update", "watch"),
    # config/components/rbac/metrics_auth_role.yaml, metrics_reader_role.yaml
    "rbac ClusterRole kueue-metrics-auth-role authentication.k8s.io/tokenreviews": ("create",),
    "rbac ClusterRole kueue-metrics-auth-role authorization.k8s.io/subjectaccessreviews": ("create",),
    "rbac ClusterRole kueue-metrics-reader /metrics": ("get",),
    # config/components/rbac/manager_clusterprofiles_role.yaml
    "rbac Role kueue-manager-clusterprofiles-role multicluster.x-k8s.io/clusterprofiles": ("get", "list", "watch"),
}

# The hooks of integrations we do not enable: registering them would make every such object in the
# cluster (every batch Job, every pod of kube-system's neighbours) wait on Kueue, failing closed.
NOT_ENABLED = "integration not enabled: Kueue serves a no-op, and Fail would make every {} wait on Kueue"
# ClusterRole rules of integrations we do not enable: Kueue watches a kind only when its integration is on.
NO_WATCH = "integration not enabled, so Kueue never watches {} (pkg/controller/jobs/*: each kind's own package)"


def _docs(name: str) -> list[dict]:
    return yaml_docs(contract(KUEUE, name))


def upstream_image() -> str:
    [kustomization] = _docs("components-manager-kustomization.yaml")
    [image] = kustomization["images"]
    return f"{image['newName']}:{image['newTag']}"


def upstream_pod() -> dict:
    """manager.yaml with default/'s config, webhook, visibility and metrics patches (strategic
    merge: args replaced; ports, mounts and volumes merged)."""
    pod = one(_docs("components-manager-manager.yaml"), "Deployment")["spec"]["template"]["spec"]
    merge_manager_patches(pod, [one(_docs(patch), "Deployment") for patch in (
        "default-manager_config_patch.yaml", "default-manager_webhook_patch.yaml",
        "default-manager_visibility_patch.yaml", "default-manager_metrics_patch.yaml")])
    [manager] = pod["containers"]
    manager["image"] = upstream_image()
    for volume in pod["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["name"] = PREFIX + volume["configMap"]["name"]
    pod["serviceAccountName"] = PREFIX + pod["serviceAccountName"]
    return pod


def upstream_webhooks() -> list[dict]:
    """manifests.yaml as components/webhook's kustomization leaves it: every integration's hook only
    outside kube-system and kueue-system; names and the Service after namePrefix."""
    [kustomization] = _docs("components-webhook-kustomization.yaml")
    [patch] = kustomization["patches"]
    selector = yaml.safe_load(patch["patch"])["webhooks"][0]["namespaceSelector"]
    targets = {path.split("name=")[1].split("]")[0] for replacement in kustomization["replacements"]
               for target in replacement["targets"] for path in target["fieldPaths"]}
    out = []
    for configuration in _docs("components-webhook-manifests.yaml"):
        configuration["metadata"]["name"] = PREFIX + configuration["metadata"]["name"]
        for hook in configuration["webhooks"]:
            service = hook["clientConfig"]["service"]
            service["name"], service["namespace"] = PREFIX + service["name"], NAMESPACE
            if hook["name"] in targets:
                hook["namespaceSelector"] = selector
        out.append(configuration)
    return out


def upstream_role() -> dict:
    """role.yaml after default/'s nameReference: the webhook configurations it may update by name
    carry the namePrefix too."""
    role = one(_docs("components-rbac-role.yaml"), "ClusterRole")
    for rule in role["rules"]:
        if rule.get("resourceNames") and rule["resources"][0].endswith("webhookconfigurations"):
            rule["resourceNames"] = [PREFIX + n for n in rule["resourceNames"]]
    role["metadata"]["name"] = PREFIX + role["metadata"]["name"]
    return role


def hooks_view(configurations: list[dict]) -> dict[str, Any]:
    view = {}
    for configuration in configurations:
        kind = configuration["kind"].removesuffix("WebhookConfiguration").lower()
        view[f"{kind} configurationName"] = configuration["metadata"]["name"]
        for hook in configuration["webhooks"]:
            [rule] = hook["rules"]
            service = hook["clientConfig"]["service"]
            view[f"{kind} {hook['name']}"] = {
                "path": service["path"], "service": (service["name"], service["namespace"], service.get("port", 443)),
                "failurePolicy": hook.get("failurePolicy", "Fail"), "sideEffects": hook["sideEffects"],
                "admissionReviewVersions": tuple(hook["admissionReviewVersions"]),
                "operations": tuple(sorted(rule["operations"])), "apiGroups": tuple(rule["apiGroups"]),
                "apiVersions": tuple(rule["apiVersions"]), "resources": tuple(rule["resources"]),
                "timeoutSeconds": hook.get("timeoutSeconds", 10), "objectSelector": hook.get("objectSelector", ABSENT)}
            view[f"{kind} namespaceSelector {hook['name']}"] = hook.get("namespaceSelector", ABSENT)
    return view


def view(pod: dict, services: dict, webhooks: list[dict], rules: dict, replicas: int, pdb: Any,
         extra: dict) -> dict[str, Any]:
    out = pod_view(pod)
    out["resources"] = pod["containers"][0].get("resources") or ABSENT
    out.update(services)
    out.update(hooks_view(webhooks))
    out.update(rules)
    out["deployment.replicas"] = replicas
    out["pdb.minAvailable"] = pdb
    out.update(extra)
    return out


def upstream_view() -> dict:
    services = [one(_docs(f), "Service") for f in ("components-webhook-service.yaml", "default-metrics_service.yaml")]
    for service in services:
        service["metadata"]["name"] = PREFIX + service["metadata"]["name"]
    role = upstream_role()
    deployment = one(_docs("components-manager-manager.yaml"), "Deployment")
    return view(upstream_pod(), services_view(services), upstream_webhooks(),
                rules_view("ClusterRole", role["metadata"]["name"], role["rules"]), deployment["spec"]["replicas"],
                ABSENT, UPSTREAM_EXTRA)


def our_view(docs: list[dict]) -> dict:
    deployment, pdb = one(docs, "Deployment"), one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items(), "the budget covers the manager's pods"
    rules: dict = {}
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            rules.update(rules_view(doc["kind"], doc["metadata"]["name"], doc["rules"]))
    services = services_view([d for d in docs if d["kind"] == "Service"])
    extra = {key: value for key, value in services.items() if key == "service kueue-visibility-server"}
    api_service = one(docs, "APIService")
    extra[f"apiservice {api_service['metadata']['name']}"] = api_service["spec"]
    for doc in docs:
        if doc["kind"] == "RoleBinding" and doc["metadata"]["namespace"] == "kube-system":
            extra[f"rolebinding kube-system/{doc['metadata']['name']}"] = doc["roleRef"]["name"]
    return view(deployment["spec"]["template"]["spec"], services, [d for d in docs if d["kind"].endswith(
        "WebhookConfiguration")], rules, deployment["spec"]["replicas"], pdb["spec"]["minAvailable"], extra)


def deviations(api: str) -> tuple[Deviation, ...]:
    """Every intended difference for an environment on training API `api`."""
    enabled = set(queued_frameworks(api))
    rows = [
        Deviation("image.repository", f"{RELEASE_REGISTRY}/kueue", "us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue",
                  "the released image, not the staging one the kustomization names (RELEASE_REGISTRY)"),
        Deviation("image.tag", KUEUE_VERSION, "main", "the release's tag"),
        Deviation("deployment.replicas", 2, 1,
                  "the webhooks fail closed for our runs and for Workloads: with one replica no run can be created "
                  "while that pod restarts; the queue controllers keep their caches on both replicas"),
        *CONTROLLER_DEVIATIONS,
        Deviation("rbac Role kueue-manager-clusterprofiles-role multicluster.x-k8s.io/clusterprofiles", ABSENT,
                  ("get", "list", "watch"), "MultiKueueClusterProfile is off (alpha) and we run no MultiKueue"),
    ]
    # Upstream's hooks, and the ones we narrow to the training namespace.
    hooks = {h["name"]: (c["kind"].removesuffix("WebhookConfiguration").lower(), h)
             for c in upstream_webhooks() for h in c["webhooks"]}
    run_hooks = {TRAINJOB_FRAMEWORK: ("mtrainjob.kb.io", "vtrainjob.kb.io"),
                 PYTORCHJOB_FRAMEWORK: ("mpytorchjob.kb.io", "vpytorchjob.kb.io")}
    ours = {name for f in enabled for name in run_hooks[f]}
    for name, (kind, hook) in sorted(hooks.items()):
        if name in ours:
            rows.append(Deviation(f"{kind} namespaceSelector {name}",
                                  {"matchLabels": {"kubernetes.io/metadata.name": "training"}}, PRESENT,
                                  "runs exist only in the training namespace, which managedJobsNamespaceSelector "
                                  "names alone; a webhook outage then touches nothing else"))
        elif hook.get("namespaceSelector"):
            resource = hook["rules"][0]["resources"][0]
            rows += [Deviation(f"{kind} {name}", ABSENT, PRESENT, NOT_ENABLED.format(resource)),
                     Deviation(f"{kind} namespaceSelector {name}", ABSENT, PRESENT, NOT_ENABLED.format(resource))]
    # ClusterRole rules of the integrations we leave out.
    needed = {f"{g or 'core'}/{r}" for f in enabled for g, rs, _, _ in INTEGRATION_RULES[f] for r in rs}
    for key, verbs in rules_view("ClusterRole", "kueue-manager-role", upstream_role()["rules"]).items():
        target = key.removeprefix(f"rbac {ROLE} ")
        group = target.split("/")[0]
        if group in NOT_WATCHED_GROUPS or (group in RUN_GROUPS and target not in needed):
            rows.append(Deviation(key, ABSENT, verbs, NO_WATCH.format(target)))
    return tuple(rows)


# Groups whose kinds belong to integrations we never enable, and those of our run kinds.
NOT_WATCHED_GROUPS = {"apps", "batch", "ray.io", "sparkoperator.k8s.io", "workload.codeflare.dev",
                      "leaderworkerset.x-k8s.io"}
RUN_GROUPS = {"kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io"}

from k8s.addons.kueue import INTEGRATION_RULES  # noqa: E402  (the rules each integration needs)


@pytest.fixture(scope="module", params=["v1", "v2"])
def api(request):
    return request.param


@pytest.fixture(scope="module")
def queued(dev, api):
    return dataclasses.replace(dev, queueing="kueue", training_api=api)


@pytest.fixture(scope="module")
def ours(queued) -> list[dict]:
    from k8s.addons.kueue import kueue_controller

    return kueue_controller(queued)


def test_kueue_matches_upstream_v0_19_2_except_the_declared_deviations(ours, api):
    problems = declared_problems(differences(our_view(ours), upstream_view()), deviations(api))
    assert not problems, "\n".join(problems)


def test_the_gate_fails_on_an_undeclared_difference_and_on_a_stale_row(ours, api):
    mine = our_view(ours)
    broken = dict(mine, **{"validating vworkload.kb.io": ABSENT})
    assert any("undeclared" in p for p in declared_problems(differences(broken, upstream_view()), deviations(api)))
    stale = (*deviations(api), Deviation("pod.hostNetwork", False, False, "no longer differs"))
    assert any("no longer differs" in p for p in declared_problems(differences(mine, upstream_view()), stale))


def test_the_integrations_table_follows_the_training_api():
    """The rule-filtering above must not hide a run kind's own rules: each integration's rules are upstream's."""
    upstream = rules_view("ClusterRole", "kueue-manager-role", upstream_role()["rules"])
    for framework, rules in INTEGRATION_RULES.items():
        for key, verbs in rules_view("ClusterRole", "kueue-manager-role", [
                {"apiGroups": [g], "resources": list(rs), "verbs": list(v)} for g, rs, v, _ in rules]).items():
            assert upstream[key] == verbs, (framework, key)


def test_the_image_is_the_release_of_the_contracts_version():
    from k8s.pods.images import IMAGES

    assert KUEUE == f"kueue-{KUEUE_VERSION}", "config/queueing.py pins the version the contracts hold"
    assert IMAGES["kueue"] == f"{RELEASE_REGISTRY}/kueue:{KUEUE_VERSION}"


def test_the_manager_config_is_the_releases_with_only_what_we_queue(queued, api):
    from k8s.pods.kueue import manager_config

    [release] = _docs("components-manager-controller_manager_config.yaml")
    ours = manager_config(queued)
    changed = {k for k in set(ours) | set(release) if ours.get(k) != release.get(k)}
    assert changed == {"integrations", "waitForPodsReady", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector"}
    assert ours["integrations"]["frameworks"] == list(queued_frameworks(api))
    assert ours["managedJobsNamespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "training"}}
    assert ours["waitForPodsReady"]["blockAdmission"] is False
    assert "backoffLimitCount" not in ours["waitForPodsReady"]["requeuingStrategy"], "requeued until stopped"
    assert release["leaderElection"]["leaderElect"] is True, "two replicas rely on leader election"
    from k8s.pods.kueue import LEASE

    assert release["leaderElection"]["resourceName"] == LEASE, "the Lease ops doctor reads"


def test_every_framework_of_the_pins_integration_row_is_one_the_release_names(api):
    """On or commented out, as the release's config lists it (the names Kueue knows): the table
    config/queueing.py refuses kueue with v1 from."""
    from config.queueing import KUEUE_INTEGRATIONS

    text = contract(KUEUE, "components-manager-controller_manager_config.yaml").read_text()
    names = {line.strip().lstrip("#").strip().lstrip("-").strip().strip('"') for line in text.splitlines()}
    assert set(queued_frameworks(api)) <= set(KUEUE_INTEGRATIONS[KUEUE_VERSION]) <= names


def test_dra_groups_map_their_efa_claims_to_the_quota_resource(dev):
    from k8s.pods.kueue import manager_config

    raw = dataclasses.replace(dev, queueing="kueue", training_api="v2")
    assert "resources" not in manager_config(raw)
    groups = [dataclasses.replace(g, efa_allocation="dra") if g.name == "p5" else g for g in dev.gpu_nodegroups]
    dra = dataclasses.replace(raw, gpu_nodegroups=tuple(groups))
    assert manager_config(dra)["resources"] == {"deviceClassMappings": [
        {"name": "vpc.amazonaws.com/efa", "deviceClassNames": ["efa.networking.k8s.aws"]}]}


def test_the_names_the_manager_looks_up_tie_together(ours):
    """internalCertManagement defaults (apis/config/v1beta2/defaults.go): the Secret the rotator writes
    and the Service its certificate is issued for; the configurations it injects into are the
    Service's name less -webhook-service plus -{mutating,validating}-webhook-configuration
    (pkg/util/cert/cert.go), and the role may update exactly those."""
    secret = one(ours, "Secret")
    pod = pod_view(one(ours, "Deployment")["spec"]["template"]["spec"])
    mount = pod["mount /tmp/k8s-webhook-server/serving-certs"]
    assert mount["readOnly"] is True and mount["source"]["secretName"] == secret["metadata"]["name"]
    assert secret["metadata"]["name"] == PREFIX + one(_docs("components-internalcert-secret.yaml"), "Secret")[
        "metadata"]["name"] == "kueue-webhook-server-cert"
    services = {h["clientConfig"]["service"]["name"] for d in ours if d["kind"].endswith("WebhookConfiguration")
                for h in d["webhooks"]}
    assert services == {"kueue-webhook-service"}
    base = "kueue-webhook-service".removesuffix("-webhook-service")
    names = {d["metadata"]["name"] for d in ours if d["kind"].endswith("WebhookConfiguration")}
    assert names == {f"{base}-mutating-webhook-configuration", f"{base}-validating-webhook-configuration"}
    api_service = one(ours, "APIService")
    assert api_service["spec"]["service"]["name"] in {d["metadata"]["name"] for d in ours if d["kind"] == "Service"}


def test_every_crd_the_rotator_injects_into_declares_a_conversion_webhook_on_our_service():
    """The rotator reports ready only when every injection succeeds, and it fails on a CRD without
    spec.conversion.webhook.clientConfig (cert-controller v0.16.0): then the manager never serves.
    The contract's role grants get/update on exactly the CRDs it injects into."""
    from k8s.addons.kueue_crds import kueue_crds

    [rule] = [r for r in upstream_role()["rules"] if r.get("resourceNames") and "update" in r["verbs"]
              and r["resources"] == ["customresourcedefinitions"]]
    converted = {c["metadata"]["name"]: c["spec"].get("conversion") for c in kueue_crds()}
    assert {name for name, conversion in converted.items() if conversion} == set(rule["resourceNames"])
    for name in rule["resourceNames"]:
        service = converted[name]["webhook"]["clientConfig"]["service"]
        assert (converted[name]["strategy"], service["name"], service["namespace"]) == \
            ("Webhook", "kueue-webhook-service", NAMESPACE)


def test_the_manager_pod_meets_restricted_which_kueue_system_enforces(ours):
    from pod_security_standards import violations

    namespace = one(ours, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = one(ours, "Deployment")["spec"]["template"]
    assert violations(template["metadata"], template["spec"], "restricted") == []
