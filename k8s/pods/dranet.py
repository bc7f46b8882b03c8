"""The EFA DRA driver's node agent (dranet, as the aws/eks-charts aws-dranet chart 1.0.0 renders it
with its default values: ../shared/contracts/aws-dranet-chart-v1.0.0/).

Root but unprivileged, every capability dropped, read-only root file system, in the host's network
namespace; it publishes the node's EFA devices as ResourceSlices (driver dra.net) and hands allocated
ones to containers through NRI (/var/run/nri). Ours differs only where
tests/k8s/addons/test_conformance_aws_dranet.py declares it: our DRA node groups by label, our GPU
taint tolerated, memory limit equal to its request and no CPU limit.
"""

from __future__ import annotations

from config.kubernetes import (
    AWS_DRANET, EFA_ALLOCATION_LABEL, EFA_DRA, GPU_TAINT_KEY, INSTANCE_TYPE_LABEL, KUBE_SYSTEM_NAMESPACE,
)
from k8s.pods.security import RUNTIME_DEFAULT_SECCOMP
from k8s.pods.workload import container, daemon_set, host_path_volume, own_pods, pod_spec

HEALTH_PORT = 9177  # values.yaml healthPort
# values.yaml `filter`: only EFA devices are published for allocation, not the node's ENA or veths.
EFA_FILTER = ('"dra.net/pciDevice" in attributes && '
              'attributes["dra.net/pciDevice"].StringValue == "Elastic Fabric Adapter (EFA)"')
# Where the chart's DaemonSet never runs (EKS Auto Mode nodes manage their own devices).
COMPUTE_TYPE_LABEL = "eks.amazonaws.com/compute-type"
# (volume name, host path, mount propagation) as templates-daemonset.yaml mounts them, each at the same path.
HOST_MOUNTS = (
    ("device-plugin", "/var/lib/kubelet/plugins", ""),
    ("plugin-registry", "/var/lib/kubelet/plugins_registry", ""),
    ("nri-plugin", "/var/run/nri", ""),
    ("netns", "/var/run/netns", "HostToContainer"),
    ("infiniband", "/dev/infiniband", "HostToContainer"),
    ("dranet-run", "/var/run/dranet", ""),
)


def dranet_node_affinity(instance_types: tuple[str, ...]) -> dict:
    """The chart's rule (an EFA instance type, not Auto Mode) narrowed to our DRA groups' nodes."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [
            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(instance_types)},
            {"key": COMPUTE_TYPE_LABEL, "operator": "NotIn", "values": ["auto"]},
            {"key": EFA_ALLOCATION_LABEL, "operator": "In", "values": [EFA_DRA]},
        ]}]}}}


def dranet_daemon_set(image: str, instance_types: tuple[str, ...]) -> dict:
    """`instance_types`: those of the environment's DRA groups (the chart lists every EFA type)."""
    if not instance_types:
        raise ValueError("the EFA DRA driver needs at least one DRA node group's instance type")
    mounts = [{"name": name, "mountPath": path, **({"mountPropagation": prop} if prop else {})}
              for name, path, prop in HOST_MOUNTS]
    driver = container(
        name="dranet", image=image,
        args=["/dranet", "--v=4", "--hostname-override=$(NODE_NAME)", f"--bind-address=:{HEALTH_PORT}",
              "--cloud-provider-hint=AWS", f"--filter={EFA_FILTER}"],
        env=[{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        # The chart's requests; memory limited at the chart's limit and requested the same (our rule:
        # no OOM surprise under node pressure), CPU unlimited (no throttling of a node agent).
        resources={"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
        security_context={"privileged": False, "runAsUser": 0, "runAsGroup": 0, "readOnlyRootFilesystem": True,
                          "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                          "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)},
        readinessProbe={"httpGet": {"path": "/healthz", "port": HEALTH_PORT}},
        volumeMounts=[*mounts, {"name": "tmp", "mountPath": "/tmp"}],
    )
    pod = pod_spec(
        containers=[driver],
        # It watches ResourceClaims and writes ResourceSlices.
        automount_token=True,
        security_context={"runAsNonRoot": False},
        serviceAccountName=AWS_DRANET,
        hostNetwork=True,
        hostPID=False,
        affinity=dranet_node_affinity(instance_types),
        # The chart's toleration, and our DRA groups are GPU groups carrying the GPU taint.
        tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"},
                     {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        volumes=[*(host_path_volume(name, path, "DirectoryOrCreate") for name, path, _ in HOST_MOUNTS),
                 {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "10Mi"}}],
        priorityClassName="system-node-critical",
    )
    return daemon_set(name=AWS_DRANET, namespace=KUBE_SYSTEM_NAMESPACE, pod_labels=own_pods(AWS_DRANET), pod=pod)
