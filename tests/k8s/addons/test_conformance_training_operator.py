"""The Training Operator we deploy against the upstream v1.9.4 release (kubeflow/trainer tag v1.9.4:
manifests/base, manifests/overlays/standalone and the manager's source), from
../shared/contracts/kubeflow-training-v1.9.4/operator/.

Compared: image, command and every flag (each must be one the manager parses; values compared as
the manager sees them, defaults filled from source), env, ports, probes, mounts and the kind of
their sources, security context and host namespaces, placement, the Service, the validating
webhooks (every path one the manager serves) and RBAC. Intended differences: DEVIATIONS.
"""

from __future__ import annotations

import functools
import re

import pytest

from conformance import (
    ABSENT, PRESENT, Deviation, apply_json_patch, contract, declared_problems, differences, one, pod_view,
    rbac_view, service_view, webhook_view, yaml_docs,
)

OPERATOR = ("kubeflow-training-v1.9.4", "operator")
FULL = ("create", "delete", "get", "list", "patch", "update", "watch")
# Job kinds whose controllers we do not enable (--enable-scheme): no CRD of theirs is installed.
NOT_ENABLED = ("jaxjobs", "paddlejobs", "tfjobs", "xgboostjobs")
SECURITY = "the restricted Pod Security profile: the manager is a static binary that needs no root"
SECRETS = ("Secrets only in the operator's own namespace: the one it reads and writes is its webhook certificate, "
           "through the cert rotator's cache limited to that namespace (open-policy-agent/cert-controller v0.16.0 "
           "rotator.go addNamespacedCache, the version v1.9.4's go.mod pins); no PyTorchJob or MPIJob v1 controller "
           "reads a Secret (kubeflow/trainer v1.9.4 pkg/controller.v1), so a cluster-wide grant let it read hf-token "
           "and every other Secret for nothing")

DEVIATIONS = (
    Deviation("deployment.replicas", 2, 1,
              "the webhook fails closed: with one replica every job is rejected while that pod restarts; "
              "v1.9.4 serves the webhook on every replica (pkg/cert/cert.go: RequireLeaderElection false)"),
    Deviation("pdb.minAvailable", 1, ABSENT, "node drains and node group updates evict one replica at a time"),
    Deviation("flag.leader-elect", "true", "false",
              "two replicas (three during a rolling update); only the Lease holder reconciles"),
    Deviation("pod.priorityClassName", "eks-distributed-training-control", ABSENT,
              "admission and the controllers must not wait behind training pods (k8s/priority.py)"),
    Deviation("flag.enable-scheme", ("mpijob", "pytorchjob"), (),
              "only the kinds this project runs; the other controllers would wait on CRDs we never install"),
    Deviation("flag.mpi-kubectl-delivery-image",
              "${KUBECTL_DELIVERY_IMAGE}",
              "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest",
              "upstream's default floats, and the release's image ships kubectl 1.30; each environment builds "
              "one with a kubectl within one minor of its cluster (k8s/images/kubectl-delivery), same contract"),
    Deviation("security.runAsNonRoot", True, False, SECURITY),
    Deviation("security.runAsUser", 65532, ABSENT,
              "the image (distroless static, no USER) runs as root by default; any non-root uid works"),
    Deviation("security.runAsGroup", 65532, ABSENT, SECURITY),
    Deviation("security.readOnlyRootFilesystem", True, False,
              "the manager writes nothing but reads its certificates from the Secret mount"),
    Deviation("security.capabilities", {"drop": ["ALL"]}, ABSENT, SECURITY),
    Deviation("security.seccompProfile", {"type": "RuntimeDefault"}, ABSENT,
              "every pod we render runs under the runtime's default seccomp profile"),
    Deviation("pod.placement", PRESENT, ABSENT,
              "preferred, not required: keep the control plane on the system node group, off GPU nodes, "
              "and the two replicas on different nodes"),
    Deviation("rbac[kubeflow] coordination.k8s.io/leases", ("create", "get", "list", "update", "watch"), ABSENT,
              "--leader-elect takes a Lease, in the operator's own namespace; upstream runs without leader election"),
    Deviation("rbac core/secrets", ABSENT, ("get", "list", "update", "watch"), SECRETS),
    Deviation("rbac[kubeflow] core/secrets", ("get", "list", "update", "watch"), ABSENT, SECRETS),
    *(Deviation(f"rbac kubeflow.org/{kind}", ABSENT, FULL, "controller not enabled") for kind in NOT_ENABLED),
    *(Deviation(f"rbac kubeflow.org/{kind}/status", ABSENT, ("get", "patch", "update"), "controller not enabled")
      for kind in NOT_ENABLED),
    *(Deviation(f"rbac kubeflow.org/{kind}/finalizers", ABSENT, ("update",), "controller not enabled")
      for kind in NOT_ENABLED),
    *(Deviation(f"webhook {kind}", ABSENT, PRESENT,
                "its controller (and so its webhook) is not enabled; with Fail a hook nobody serves "
                "would reject every job of that kind") for kind in NOT_ENABLED),
)


@functools.lru_cache(maxsize=None)
def _text(name: str) -> str:
    return contract(*OPERATOR, name).read_text()


def _docs(name: str) -> list[dict]:
    return yaml_docs(contract(*OPERATOR, name))


def _config_constants() -> dict[str, str]:
    return {name: value.strip('"') for name, value in
            re.findall(r'(\w+Default)\s*=\s*("[^"]*"|\d+)', _text("source-pkg-config-config.go"))}


def manager_flags() -> dict[str, tuple[str, object]]:
    """flag name -> (kind, default as the manager sees it) parsed from cmd/training-operator.v1/main.go."""
    source = _text("source-cmd-training-operator.v1-main.go")
    constants = _config_constants()
    flags: dict[str, tuple[str, object]] = {}
    for kind, name, default in re.findall(r'flag\.(String|Bool|Int)Var\(&[\w.]+,\s*"([\w-]+)",\s*([^,]+),', source):
        default = default.strip()
        if default.startswith('"'):
            value = default.strip('"')
        elif default.startswith("config."):
            value = constants[default.split(".", 1)[1]]
        elif default.startswith("os.Getenv("):
            value = ""  # KUBEFLOW_NAMESPACE is set by neither side
        else:
            value = default
        flags[name] = (kind, value)
    for name in re.findall(r'flag\.Var\(&\w+,\s*"([\w-]+)"', source):
        flags[name] = ("Var", ())
    assert {"webhook-server-port", "enable-scheme", "mpi-kubectl-delivery-image"} <= set(flags), "source changed shape"
    return flags


def effective_flags(args: list[str]) -> dict[str, object]:
    flags = manager_flags()
    values = {name: default for name, (_, default) in flags.items()}
    repeated: dict[str, list[str]] = {}
    for arg in args:
        name, sep, value = arg.removeprefix("--").partition("=")
        kind = flags[name][0]
        if kind == "Var":
            repeated.setdefault(name, []).append(value)
        else:
            values[name] = value if sep else "true"
    for name, items in repeated.items():
        values[name] = tuple(sorted(items))
    return {f"flag.{k}": v for k, v in values.items()}


def upstream_image() -> str:
    deployment = one(_docs("base-deployment.yaml"), "Deployment")
    repository = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    [pin] = [i for i in _docs("standalone-kustomization.yaml")[0]["images"] if i["name"] == repository]
    return f"{repository}:{pin['newTag']}"


def upstream_namespace() -> str:
    return _docs("standalone-kustomization.yaml")[0]["namespace"]


def served_webhook_paths() -> set[str]:
    """Paths the manager's webhook server registers: kinds with a real setup function in
    pkg/webhooks/webhooks.go (MPIJob maps to a no-op), which base-webhook-manifests.yaml lists too."""
    source = _text("source-pkg-webhooks-webhooks.go")
    kinds = {kind.lower() for kind, setup in re.findall(r"trainingoperator\.(\w+)Kind:\s*([\w.]+),", source)
             if setup != "scaffold"}
    from_source = {f"/validate-kubeflow-org-v1-{kind}" for kind in kinds}
    manifest = one(_docs("base-webhook-manifests.yaml"), "ValidatingWebhookConfiguration")
    from_manifest = {h["clientConfig"]["service"]["path"] for h in manifest["webhooks"]}
    assert from_source == from_manifest, (from_source, from_manifest)
    return from_source


def upstream_view() -> dict:
    deployment = one(_docs("base-deployment.yaml"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    pod["containers"][0]["image"] = upstream_image()
    container = pod["containers"][0]
    view = pod_view(pod)
    view.pop("args")
    view.update(effective_flags(container.get("args", [])))
    view.update(service_view(one(_docs("base-service.yaml"), "Service")))
    webhooks = apply_json_patch(one(_docs("base-webhook-manifests.yaml"), "ValidatingWebhookConfiguration"),
                                _docs("base-webhook-patch.yaml")[0])
    for hook in webhooks["webhooks"]:
        hook["clientConfig"]["service"]["namespace"] = upstream_namespace()
    view.update(webhook_view(webhooks))
    view.update(rbac_view(one(_docs("base-rbac-role.yaml"), "ClusterRole")["rules"]))
    view["deployment.replicas"] = deployment["spec"]["replicas"]
    # The release's manifests ship no PodDisruptionBudget.
    base = contract(*OPERATOR, "base-deployment.yaml").parent
    assert not any(isinstance(d, dict) and d.get("kind") == "PodDisruptionBudget"
                   for f in base.glob("*.yaml") for d in yaml_docs(f))
    view["pdb.minAvailable"] = ABSENT
    return view


@pytest.fixture(scope="module")
def ours() -> list[dict]:
    from k8s.addons.training_operator import training_operator

    return training_operator()


def our_view(docs: list[dict]) -> dict:
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    view = pod_view(pod)
    view.pop("args")
    view.update(effective_flags(pod["containers"][0].get("args", [])))
    view.update(service_view(one(docs, "Service")))
    view.update(webhook_view(one(docs, "ValidatingWebhookConfiguration")))
    view.update(rbac_view(one(docs, "ClusterRole")["rules"]))
    role = one(docs, "Role")
    view.update(rbac_view(role["rules"], namespace=role["metadata"]["namespace"]))
    view["deployment.replicas"] = deployment["spec"]["replicas"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items(), "the budget covers the operator's pods"
    view["pdb.minAvailable"] = pdb["spec"]["minAvailable"]
    return view


def test_operator_matches_upstream_v1_9_4_except_the_declared_deviations(ours):
    problems = declared_problems(differences(our_view(ours), upstream_view()), DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_every_argument_is_a_flag_the_v1_9_4_manager_parses(ours):
    flags = manager_flags()
    container = one(ours, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/manager"]
    unknown = [a for a in container.get("args", []) if a.removeprefix("--").split("=", 1)[0] not in flags]
    assert not unknown, f"flags the manager does not define: {unknown}"
    assert all(a.startswith("--") for a in container.get("args", []))


def test_every_webhook_path_is_one_the_manager_serves(ours):
    served = served_webhook_paths()
    paths = [h["clientConfig"]["service"]["path"] for h in one(ours, "ValidatingWebhookConfiguration")["webhooks"]]
    assert paths and set(paths) <= served, f"not served by v1.9.4: {sorted(set(paths) - served)}"


def test_the_lease_doctor_reads_is_the_one_the_manager_elects_with():
    """We pass no --leader-election-id: the manager uses its default, which `ops doctor` reads."""
    from k8s.pods.names import TRAINING_OPERATOR_LEASE

    assert manager_flags()["leader-election-id"] == ("String", TRAINING_OPERATOR_LEASE)


def test_the_operator_image_is_the_release_pin():
    from k8s.pods.images import IMAGES

    assert IMAGES["training-operator"] == upstream_image()


def test_the_webhook_secret_is_the_one_the_cert_rotator_writes_and_is_mounted_where_the_server_reads(ours):
    flags = effective_flags(one(ours, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    secret = one(ours, "Secret")
    assert secret["metadata"]["name"] == flags["flag.webhook-secret-name"]
    view = pod_view(one(ours, "Deployment")["spec"]["template"]["spec"])
    mount = view["mount /tmp/k8s-webhook-server/serving-certs"]
    assert mount["readOnly"] is True
    assert mount["source"]["kind"] == "secret" and mount["source"]["secretName"] == secret["metadata"]["name"]


def test_the_gate_fails_on_an_undeclared_difference_and_on_a_stale_row(ours):
    view = our_view(ours)
    broken = dict(view, **{"flag.webhook-server-port": "9444"})
    assert any("undeclared" in p for p in declared_problems(differences(broken, upstream_view()), DEVIATIONS))
    stale = (*DEVIATIONS, Deviation("pod.hostNetwork", False, False, "no longer differs"))
    assert any("no longer differs" in p for p in declared_problems(differences(view, upstream_view()), stale))


def test_under_trainer_v2_the_operator_runs_mpijob_only_with_no_pytorchjob_crd_rule_or_webhook(dev):
    """trainingApi v2 keeps the operator for the NCCL validation's MPIJob (issue 23's note §1.1.4): the
    one flag, RBAC and CRD differ from the v1 rendering, each only by the PyTorchJob kind."""
    import dataclasses

    from k8s.addons import ClusterValues
    from k8s.addons.training_operator import ADDON
    from k8s.addons.training_operator_crds import ADDON as CRDS

    v2 = dataclasses.replace(dev, training_api="v2")
    docs = ADDON.objects(v2, ClusterValues.placeholders())
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert effective_flags(args)["flag.enable-scheme"] == ("mpijob",)
    assert one(docs, "ValidatingWebhookConfiguration")["webhooks"] == []
    v1_view, v2_view = our_view(ADDON.objects(dev, ClusterValues.placeholders())), our_view(docs)
    changed = {k for k in set(v1_view) | set(v2_view) if v1_view.get(k) != v2_view.get(k)}
    assert changed == {"flag.enable-scheme", "webhook pytorchjobs", "rbac kubeflow.org/pytorchjobs",
                       "rbac kubeflow.org/pytorchjobs/status", "rbac kubeflow.org/pytorchjobs/finalizers"}, changed
    assert [c["spec"]["names"]["kind"] for c in CRDS.objects(v2, ClusterValues.placeholders())] == ["MPIJob"]
    assert [c["spec"]["names"]["kind"] for c in CRDS.objects(dev, ClusterValues.placeholders())] == \
        ["PyTorchJob", "MPIJob"]
