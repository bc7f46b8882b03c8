"""Structural CustomResourceDefinitions for the Training Operator's kubeflow.org/v1 PyTorchJob and
MPIJob, written small on purpose.

The upstream CRDs are about 600 KB each because they inline the whole PodTemplateSpec schema. That
exceeds the kubectl Lambda's 256 KB event and what a CloudFormation template can carry inline
(aws-cdk issues 19165 and 17362). These schemas type every field of the job specs themselves, so
kubectl's strict field validation rejects unknown or mistyped job fields, and check the parts of
the pod template our charts rely on (container names and images). The rest of the template keeps
its unknown fields at admission, and nothing later rejects them: the operator decodes the job into
its typed Go structs, which drop unknown fields, and creates the pods from those. So every pod
template we render is validated against the Kubernetes PodSpec schema before it leaves this
repository (k8s/pods/podspec.py, called by the job builders in k8s/pods).
"""

from __future__ import annotations

from k8s.addons import AddOn
from k8s.pods.training_operator import environment_schemes

GROUP = "kubeflow.org"
VERSION = "v1"
RESTART_POLICIES = ["Always", "OnFailure", "Never", "ExitCode"]
CLEAN_POD_POLICIES = ["None", "All", "Running"]


def _string(**extra) -> dict:
    return {"type": "string", **extra}


def _int32(minimum: int | None = None, maximum: int | None = None) -> dict:
    schema: dict = {"type": "integer", "format": "int32"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _object(properties: dict, **extra) -> dict:
    return {"type": "object", "properties": properties, **extra}


_OPEN_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

# The fields of a container the charts set and the operator reads by name; everything else in the
# pod template is kept as written for the API server to validate at pod creation.
_CONTAINER = _object({"name": _string(minLength=1), "image": _string(minLength=1)},
                     required=["name", "image"], **{"x-kubernetes-preserve-unknown-fields": True})
_POD_TEMPLATE = _object({
    "metadata": _OPEN_OBJECT,
    "spec": _object({"containers": {"type": "array", "minItems": 1, "items": _CONTAINER}},
                    required=["containers"], **{"x-kubernetes-preserve-unknown-fields": True}),
}, required=["spec"])

_REPLICA_SPEC = _object({
    "replicas": _int32(minimum=0),
    "restartPolicy": _string(enum=RESTART_POLICIES),
    "template": _POD_TEMPLATE,
})

_RUN_POLICY = _object({
    "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 0},
    "backoffLimit": _int32(minimum=0),
    "cleanPodPolicy": _string(enum=CLEAN_POD_POLICIES),
    "managedBy": _string(),
    "schedulingPolicy": _object({
        "minAvailable": _int32(),
        "minResources": {"type": "object", "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}},
        "priorityClass": _string(),
        "queue": _string(),
        "scheduleTimeoutSeconds": _int32(),
    }),
    "suspend": {"type": "boolean", "default": False},
    "ttlSecondsAfterFinished": _int32(minimum=0),
})

_ELASTIC_POLICY = _object({
    "maxReplicas": _int32(minimum=1),
    "maxRestarts": _int32(minimum=0),
    # HPA metric specs: the operator passes them through to a HorizontalPodAutoscaler.
    "metrics": {"type": "array", "items": _OPEN_OBJECT},
    "minReplicas": _int32(minimum=1),
    "nProcPerNode": _int32(minimum=1),
    "rdzvBackend": _string(enum=["c10d", "etcd", "etcd-v2", "static"]),
    "rdzvConf": {"type": "array", "items": _object({"key": _string(), "value": _string()})},
    "rdzvHost": _string(),
    "rdzvId": _string(),
    "rdzvPort": _int32(minimum=1, maximum=65535),
    "standalone": {"type": "boolean"},
}, **{"x-kubernetes-validations": [{
    "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
    "message": "minReplicas must not exceed maxReplicas",
}]})


def _replica_map(allowed: list[str], required: str) -> dict:
    """Replica specs keyed by role. A map (as upstream) with CEL limiting the keys, because
    listed properties would silently prune a misspelt role instead of rejecting it."""
    quoted = ", ".join(f"'{r}'" for r in allowed)
    # maxProperties bounds the CEL cost estimate the API server checks when it accepts the CRD.
    return {"type": "object", "maxProperties": len(allowed), "additionalProperties": _REPLICA_SPEC,
            "x-kubernetes-validations": [
        {"rule": f"self.all(k, k in [{quoted}])", "message": f"replica types are {', '.join(allowed)}"},
        {"rule": f"'{required}' in self", "message": f"a {required} replica spec is required"},
    ]}


_PYTORCH_SPEC = _object({
    "elasticPolicy": _ELASTIC_POLICY,
    "nprocPerNode": _string(),
    "pytorchReplicaSpecs": _replica_map(["Master", "Worker"], "Worker"),
    "runPolicy": _RUN_POLICY,
}, required=["pytorchReplicaSpecs"])

_MPI_SPEC = _object({
    "cleanPodPolicy": _string(enum=CLEAN_POD_POLICIES),
    "mainContainer": _string(),
    "mpiReplicaSpecs": _replica_map(["Launcher", "Worker"], "Launcher"),
    "runPolicy": _RUN_POLICY,
    "slotsPerWorker": _int32(minimum=1),
}, required=["mpiReplicaSpecs"])

_PRINTER_COLUMNS = [
    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_manifest(kind: str, plural: str, spec_schema: dict, *, scale: dict | None = None) -> dict:
    subresources: dict = {"status": {}}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": _object({
                    "apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"},
                    "spec": spec_schema,
                    # Written only by the operator through the status subresource.
                    "status": _OPEN_OBJECT,
                }, required=["spec"])},
                "subresources": subresources,
                "additionalPrinterColumns": _PRINTER_COLUMNS,
            }],
        },
    }


def pytorchjob_crd() -> dict:
    # The scale subresource lets an HPA (elasticPolicy.metrics) resize the workers.
    return crd_manifest("PyTorchJob", "pytorchjobs", _PYTORCH_SPEC, scale={
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    })


def mpijob_crd() -> dict:
    return crd_manifest("MPIJob", "mpijobs", _MPI_SPEC)


def operator_crds(schemes: tuple[str, ...]) -> list[dict]:
    """The CRDs of the kinds the operator runs (k8s/pods/training_operator.py environment_schemes)."""
    return [crd() for scheme, crd in (("pytorchjob", pytorchjob_crd), ("mpijob", mpijob_crd)) if scheme in schemes]


# The CRDs alone: applied (and Established) before the operator and any job that uses them.
ADDON = AddOn(name="training-operator-crds", objects=lambda config, values: operator_crds(environment_schemes(config)))
