"""What every chart shares: the chart base class, common labels, and cdk8s-plus overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from config.kubernetes import GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE
from k8s.common import RUNTIME_DEFAULT_SECCOMP

if TYPE_CHECKING:
    from config.environment import Environment
    from k8s.values import ClusterValues

PART_OF = "eks-distributed-training"


@dataclass(frozen=True)
class Readiness:
    """What must hold on the cluster before the charts that depend on this one are applied, and
    before a deploy that changed this chart counts as done.

    `json_path` is read with `kubectl get`: the CDK sink waits until it yields any output (the
    semantics of aws-eks-v2's KubernetesObjectValue); `dist_wait` is the same condition for dist/
    readers, as a kubectl command line.
    """

    object_type: str
    name: str
    namespace: str
    json_path: str
    dist_wait: str
    timeout_minutes: int


class ProjectChart(cdk8s.Chart):
    """A chart whose objects carry the project's labels and keep the names we give them.

    Resource names are stable (no cdk8s hash suffix): jobs, Services and the rendezvous host are
    looked up by name, and a renamed object would be a new object on the cluster.

    A chart that sets `addon` is one add-on of an environment (cdk-eks-blueprints style): k8s/charts.py
    finds it by scanning this package, so adding a chart is adding a file. It declares what it
    needs applied first (`depends_on`; `after` for charts it follows only where the environment
    has them), whether an environment gets it (`applies_to`), how it is built from the
    environment (`for_environment`), and optionally a `ready_when` its dependents wait for.
    """

    component: str = ""
    addon: ClassVar[str | None] = None
    depends_on: ClassVar[tuple[str, ...]] = ()
    after: ClassVar[tuple[str, ...]] = ()
    ready_when: ClassVar[Readiness | None] = None

    @classmethod
    def applies_to(cls, config: "Environment") -> bool:
        return True

    @classmethod
    def for_environment(cls, scope: Construct, config: "Environment", values: "ClusterValues") -> "ProjectChart":
        return cls(scope, cls.addon)

    def __init__(self, scope: Construct, id: str, *, namespace: str | None = None):
        # The namespace goes on each namespaced object by hand (self.meta): cdk8s would also stamp
        # it on ClusterRoles and webhook configurations, which have none.
        self.object_namespace = namespace
        super().__init__(scope, id, disable_resource_name_hashes=True,
                         labels={"app.kubernetes.io/part-of": PART_OF,
                                 "app.kubernetes.io/managed-by": "cdk8s",
                                 **({"app.kubernetes.io/component": self.component} if self.component else {})})

    def meta(self, name: str, *, cluster_scoped: bool = False, **extra) -> dict:
        """Metadata for an object of this chart: its name, and the chart's namespace unless the
        kind is cluster-scoped."""
        metadata = {"name": name, **extra}
        if self.object_namespace and not cluster_scoped:
            metadata["namespace"] = self.object_namespace
        return metadata


def resources(cpu_milli: int, memory_mib: int) -> kplus.ContainerResources:
    """Replaces cdk8s-plus's default requests/limits: a memory limit equal to the request (no OOM
    surprises under node pressure) and no CPU limit, since throttling a control loop makes it
    slow, not safe."""
    cpu = kplus.CpuResources(request=kplus.Cpu.millis(cpu_milli))
    mem = kplus.MemoryResources(request=cdk8s.Size.mebibytes(memory_mib), limit=cdk8s.Size.mebibytes(memory_mib))
    return kplus.ContainerResources(cpu=cpu, memory=mem)


def patch_pod_spec(workload: kplus.AbstractPod, path: str, value) -> None:
    """Set a pod-spec field cdk8s-plus has no API for (priorityClassName, capabilities, extended
    resources). The patch passes the typed serialiser of the underlying object, so quantities
    must be k8s.Quantity objects, not strings."""
    prefix = "/spec/template/spec" if not isinstance(workload, kplus.Pod) else "/spec"
    cdk8s.ApiObject.of(workload).add_json_patch(cdk8s.JsonPatch.add(f"{prefix}/{path}", value))


NAME_LABEL = "app.kubernetes.io/name"


def select_own_pods(workload: kplus.AbstractPod, name: str) -> dict[str, str]:
    """Select pods by a readable name label instead of cdk8s-plus's construct-address label, so
    `kubectl get pods -l app.kubernetes.io/name=...` and NetworkPolicies can find them. The
    workload must be created with select=False."""
    labels = {NAME_LABEL: name}
    for key, value in labels.items():
        workload.pod_metadata.add_label(key, value)
    workload.select(kplus.LabelSelector.of(labels=labels))
    return labels


def taint_effect(name: str) -> kplus.TaintEffect:
    return {"NoSchedule": kplus.TaintEffect.NO_SCHEDULE, "NoExecute": kplus.TaintEffect.NO_EXECUTE,
            "PreferNoSchedule": kplus.TaintEffect.PREFER_NO_SCHEDULE}[name]


def tolerate_gpu_taint(workload: kplus.AbstractPod) -> None:
    workload.scheduling.tolerate(kplus.Node.tainted(
        kplus.NodeTaintQuery.is_(GPU_TAINT_KEY, GPU_TAINT_VALUE, effect=taint_effect(GPU_TAINT_EFFECT))))


def hardened(**overrides) -> kplus.ContainerSecurityContextProps:
    """A container that never escalates and has a read-only root file system, unless told."""
    base = dict(allow_privilege_escalation=False, read_only_root_filesystem=True)
    base.update(overrides)
    return kplus.ContainerSecurityContextProps(**base)


def runtime_default_seccomp(workload: kplus.AbstractPod) -> None:
    """The pod runs under the container runtime's default seccomp profile; cdk8s-plus has no API
    for it. Privileged containers always run Unconfined whatever the profile ("Seccomp and
    Kubernetes", https://kubernetes.io/docs/reference/node/seccomp/)."""
    patch_pod_spec(workload, "securityContext/seccompProfile", dict(RUNTIME_DEFAULT_SECCOMP))


def drop_all_capabilities(workload: kplus.AbstractPod) -> None:
    """Drop every Linux capability in each container; cdk8s-plus has no "ALL" capability."""
    for index, _ in enumerate(workload.containers):
        patch_pod_spec(workload, f"containers/{index}/securityContext/capabilities", {"drop": ["ALL"]})


def raw_object(scope: Construct, id: str, manifest: dict) -> cdk8s.ApiObject:
    """An ApiObject from a whole manifest dict, for kinds cdk8s-plus has no API for (CRDs,
    PyTorchJob, MPIJob, webhook configurations). Each top-level field goes in as one JSON patch,
    unchanged: a bare ApiObject has no typed serialiser to drop anything."""
    obj = cdk8s.ApiObject(scope, id, api_version=manifest["apiVersion"], kind=manifest["kind"],
                          metadata=manifest.get("metadata", {}))
    for key, value in manifest.items():
        if key not in ("apiVersion", "kind", "metadata"):
            obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj
