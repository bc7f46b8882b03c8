"""etcd for rendezvous (k8s/addons/etcd.py, its pod k8s/pods/etcd.py)."""

import pytest

from k8s.addons.etcd import ADDON
from k8s.pods.names import ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT
from k8s_walk import one, pod


@pytest.fixture(scope="module")
def etcd(dev):
    return ADDON.objects(dev, None)


def test_etcd_runs_only_on_the_system_nodes(etcd):
    from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE

    affinity = pod(one(etcd, "Deployment"))["affinity"]["nodeAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": ROLE_LABEL, "operator": "In", "values": [SYSTEM_ROLE]}]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in affinity


def test_etcd_speaks_v2_runs_non_root_and_writes_only_its_data_volume(etcd):
    spec = pod(one(etcd, "Deployment"))
    container = spec["containers"][0]
    assert "--enable-v2=true" in container["command"]
    assert container["image"].startswith("quay.io/coreos/etcd:v3.5.")
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True and isinstance(ctx["runAsUser"], int) and ctx["runAsUser"] > 0
    assert ctx["readOnlyRootFilesystem"] is True
    data_dir = next(a for a in container["command"] if a.startswith("--data-dir=")).split("=", 1)[1]
    mount = container["volumeMounts"][0]
    assert data_dir.startswith(mount["mountPath"] + "/")
    assert next(v for v in spec["volumes"] if v["name"] == mount["name"])["emptyDir"] == {}
    assert "exec" in container["livenessProbe"] and "exec" in container["readinessProbe"]
    assert container["resources"]["requests"]["cpu"]


def test_etcd_is_reachable_only_from_rendezvous_clients(etcd):
    deployment, service, policy = one(etcd, "Deployment"), one(etcd, "Service"), one(etcd, "NetworkPolicy")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {ETCD_CLIENT_LABEL: "true"}}}]
    assert rule["ports"] == [{"port": ETCD_CLIENT_PORT, "protocol": "TCP"}]
