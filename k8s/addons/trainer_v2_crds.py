"""Structural CustomResourceDefinitions for Kubeflow Trainer v2.3.0 (trainer.kubeflow.org/v1alpha1):
TrainJob, TrainingRuntime and ClusterTrainingRuntime, written small on purpose, under `trainingApi: v2`.

Upstream's (../shared/contracts/kubeflow-trainer-v2.3.0/base-crds-*.yaml) are 555 KB and 927 KB
each, because they inline the JobSet, Job and Pod schemas: past the kubectl Lambda's 256 KB event
(k8s/addons/jobset_crd.py says the same of JobSet's). These declare every field of the specs the
controller and its webhooks read, with upstream's types, defaults, limits and CEL rules (a TrainJob's
name format, its immutable fields, one ML policy per runtime), and a runtime's JobSet template as the
JobSet CRD declares it; the ML policies' details, the initializers, the pod group policies, the
runtime patches and the status keep their unknown fields. tests/k8s/addons/test_trainer_v2_crds.py
checks every declared field against upstream and that what `ops` creates is kept whole.
"""

from __future__ import annotations

from k8s.addons import AddOn
from k8s.addons.jobset_crd import JOBSET_SPEC, _array, _strings
from k8s.addons.training_operator_crds import _OPEN_OBJECT, _int32, _object, _string

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
IMMUTABLE = [{"rule": "self == oldSelf", "message": "field is immutable"}]
MANAGERS = ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue")


def _immutable(schema: dict) -> dict:
    return {**schema, "x-kubernetes-validations": IMMUTABLE}


_TRAINER = _immutable(_object({
    "args": _strings(maxItems=128, **{"x-kubernetes-list-type": "atomic"}),
    "command": _strings(maxItems=128, **{"x-kubernetes-list-type": "atomic"}),
    # EnvVars: the Pod API validates them when the JobSet's pods are created.
    "env": _array({**_OPEN_OBJECT, "required": ["name"]}, maxItems=128,
                  **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    "image": _string(maxLength=500),
    "numNodes": _int32(),
    "numProcPerNode": _int32(),
    "resourcesPerNode": _OPEN_OBJECT,
}))

_TRAINJOB_SPEC = _object({
    "activeDeadlineSeconds": _immutable({"type": "integer", "format": "int64", "minimum": 1}),
    "initializer": _immutable(_object({"dataset": _OPEN_OBJECT, "model": _OPEN_OBJECT})),
    "managedBy": _string(default=MANAGERS[0], maxLength=253, **{"x-kubernetes-validations": [
        {"rule": f"self in {list(MANAGERS)}".replace('"', "'"),
         "message": f"ManagedBy must be {MANAGERS[0]} or {MANAGERS[1]} if set"},
        *IMMUTABLE]}),
    # Written by other managers (Kueue), each under its own name.
    "runtimePatches": _array({**_OPEN_OBJECT, "required": ["manager"]}, maxItems=16, **{
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["manager"]}),
    "runtimeRef": _immutable(_object({
        "apiGroup": _string(default=GROUP, maxLength=253),
        "kind": _string(default="ClusterTrainingRuntime", maxLength=253),
        "name": _string(minLength=1, maxLength=253),
    }, required=["name"])),
    "suspend": {"type": "boolean", "default": False},
    "trainer": _TRAINER,
}, required=["runtimeRef"])

_RUNTIME_SPEC = _object({
    "mlPolicy": _object({
        "numNodes": _int32(),
        **{policy: _OPEN_OBJECT for policy in ("flux", "jax", "mpi", "torch", "xgboost")},
    }, **{"x-kubernetes-validations": [{
        "rule": "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
                ".filter(x, x).size() <= 1",
        "message": "Only one of the policy can be configured"}]}),
    "podGroupPolicy": _OPEN_OBJECT,
    "template": _object({"metadata": _OPEN_OBJECT, "spec": JOBSET_SPEC}),
}, minProperties=1)

# trainjob_types.go: a TrainJob's name becomes the JobSet's and its pods' hostnames.
_TRAINJOB_NAME_RULES = [
    {"rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
     "message": "metadata.name must match RFC 1035 DNS label format"},
    {"rule": "size(self.metadata.name) <= 63", "message": "metadata.name must be no more than 63 characters"},
]


def _crd(kind: str, plural: str, scope: str, spec: dict, *, status: bool, rules: list | None = None,
         columns: list | None = None) -> dict:
    properties = {"apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"}, "spec": spec}
    if status:
        properties["status"] = _OPEN_OBJECT  # written only by the controller, through the subresource
    root = _object(properties, **({"x-kubernetes-validations": rules} if rules else {}))
    version = {"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": root}}
    if status:
        version["subresources"] = {"status": {}}
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {"group": GROUP, "scope": scope, "versions": [version], "names": {
            "kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}},
    }


def trainer_crds() -> list[dict]:
    return [
        _crd("ClusterTrainingRuntime", "clustertrainingruntimes", "Cluster", _RUNTIME_SPEC, status=False),
        _crd("TrainingRuntime", "trainingruntimes", "Namespaced", _RUNTIME_SPEC, status=False),
        _crd("TrainJob", "trainjobs", "Namespaced", _TRAINJOB_SPEC, status=True, rules=_TRAINJOB_NAME_RULES,
             columns=[{"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
                      {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]),
    ]


# The CRDs alone: applied (and Established) before the controller and any runtime or TrainJob.
ADDON = AddOn(name="trainer-v2-crds", applies_to=lambda config: config.training_api == "v2",
              objects=lambda config, values: trainer_crds())
