"""Every object the project puts on a cluster, and every pod those objects make.

Objects: the charts `cdk deploy` applies (k8s/charts.py) and what `ops` creates at run time from the
same code (k8s_walk.ops_objects: the runs of `ops start`/`ops submit`, the validation objects and
NCCL sweep pairs of `ops validate`, the Jobs of `ops data` and `ops model download`).

Pods: a workload's pod template as is; a PyTorchJob's or MPIJob's pods as the Training Operator
v1.9.4 builds them (kubeflow/trainer tag v1.9.4): the template plus the operator's labels
(pkg/controller.v1/common/job_controller.go GenLabels, pkg/controller.v1/mpi/mpijob.go
defaultReplicaLabels) and, for the MPI launcher, the kubectl-delivery init container and volumes
newLauncher adds (pkg/controller.v1/mpi/mpijob_controller.go), which carry no securityContext.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from config import Environment
from k8s.pods.images import KUBECTL_DELIVERY_IMAGE
from k8s_walk import build, objects, ops_objects

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
OPERATOR_KINDS = {"PyTorchJob": ("pytorchReplicaSpecs", "pytorchjob-controller"),
                  "MPIJob": ("mpiReplicaSpecs", "mpijob-controller")}
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"


def cluster_objects(config: Environment) -> list[dict]:
    """Every object of `config`: its charts, then what ops creates."""
    return objects(build(config)) + ops_objects(config)


@dataclass(frozen=True)
class Pod:
    where: str  # Kind/name[/replica/index]
    namespace: str
    labels: dict = field(hash=False)
    spec: dict = field(hash=False)
    annotations: dict = field(default_factory=dict, hash=False)

    @property
    def metadata(self) -> dict:
        return {"labels": self.labels, "annotations": self.annotations}


def _name(obj: dict) -> str:
    return obj["metadata"].get("name") or obj["metadata"]["generateName"]


def launcher_as_the_operator_builds_it(spec: dict) -> dict:
    spec = copy.deepcopy(spec)
    spec.setdefault("initContainers", []).append({
        "name": "kubectl-delivery", "image": f"${{{KUBECTL_DELIVERY_IMAGE}}}", "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "TARGET_DIR", "value": "/opt/kube"}, {"name": "NAMESPACE", "value": "training"}],
        "volumeMounts": [{"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
                         {"name": "mpi-job-config", "mountPath": "/etc/mpi"}],
        "resources": {"limits": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
                      "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}}})
    spec.setdefault("volumes", []).extend([{"name": "mpi-job-kubectl", "emptyDir": {}},
                                           {"name": "mpi-job-config", "configMap": {"name": "job-config"}}])
    return spec


def pods(obj: dict, *, replicas: int = 2) -> list[Pod]:
    """The pods `obj` makes: its template once for a workload, up to `replicas` per replica type for
    a Kubeflow job."""
    kind, meta = obj["kind"], obj["metadata"]
    namespace = meta.get("namespace", "default")
    if kind in WORKLOADS:
        template = obj["spec"]["template"]
        tmeta = template.get("metadata", {})
        return [Pod(f"{kind}/{_name(obj)}", namespace, dict(tmeta.get("labels", {})), template["spec"],
                    dict(tmeta.get("annotations", {})))]
    if kind not in OPERATOR_KINDS:
        return []
    replica_specs, controller = OPERATOR_KINDS[kind]
    made = []
    for role, replica in obj["spec"][replica_specs].items():
        template = replica["template"]
        tmeta = template.get("metadata", {})
        spec = template["spec"]
        if kind == "MPIJob" and role == "Launcher":
            spec = launcher_as_the_operator_builds_it(spec)
        for index in range(min(replicas, int(replica.get("replicas", 1)))):
            labels = {**tmeta.get("labels", {}), OPERATOR_NAME_LABEL: controller, JOB_NAME_LABEL: meta["name"],
                      REPLICA_TYPE_LABEL: role.lower(), REPLICA_INDEX_LABEL: str(index)}
            made.append(Pod(f"{kind}/{meta['name']}/{role}/{index}", namespace, labels, spec,
                            dict(tmeta.get("annotations", {}))))
    return made


def templates(obj: dict) -> list[Pod]:
    """The pod templates of `obj` exactly as we render them (no operator additions)."""
    kind = obj["kind"]
    if kind in WORKLOADS:
        return pods(obj)
    if kind not in OPERATOR_KINDS:
        return []
    replica_specs, _ = OPERATOR_KINDS[kind]
    return [Pod(f"{kind}/{obj['metadata']['name']}/{role}", obj["metadata"].get("namespace", "default"),
                dict(r["template"].get("metadata", {}).get("labels", {})), r["template"]["spec"])
            for role, r in obj["spec"][replica_specs].items()]
