"""A structural CustomResourceDefinition for JobSet v0.12.0 (jobset.x-k8s.io/v1alpha2), written small
on purpose, under `trainingApi: v2`.

Upstream's CRD (../shared/contracts/jobset-v0.12.0/components-crd-bases-jobset.x-k8s.io_jobsets.yaml)
is about 820 KB because it inlines the Job and PersistentVolumeClaim schemas: past the kubectl
Lambda's 256 KB event and what a CloudFormation template carries inline (the v1 CRDs hit the same,
k8s/addons/training_operator_crds.py). This one declares every field of the JobSet spec down to the
Job template, with upstream's types, enums, defaults and CEL rules, so the API server defaults and
checks what the JobSet webhook and controller rely on; the Job template, the volume claim templates
and the status keep their unknown fields (tests/k8s/addons/test_jobset_crd.py checks that every
declared field is upstream's and that no field of upstream's is pruned). Nobody writes a JobSet by
hand here: Kubeflow Trainer builds it from a TrainingRuntime whose pod template was validated
against the PodSpec schema when it was rendered (k8s/pods/trainjob.py).
"""

from __future__ import annotations

from k8s.addons import AddOn
from k8s.addons.training_operator_crds import _OPEN_OBJECT, _int32, _object, _string

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
IMMUTABLE = [{"rule": "self == oldSelf", "message": "Value is immutable"}]


def _array(items: dict, **extra) -> dict:
    return {"type": "array", "items": items, **extra}


def _strings(**extra) -> dict:
    return _array(_string(), **extra)


_FAILURE_RULE = _object({
    "action": _string(enum=["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob",
                            "RestartJobAndIgnoreMaxRestarts"]),
    "name": _string(),
    "onJobFailureMessagePatterns": _strings(),
    "onJobFailureReasons": _strings(),
    "targetReplicatedJobs": _strings(**{"x-kubernetes-list-type": "atomic"}),
}, required=["action", "name"])

_REPLICATED_JOB = _object({
    "dependsOn": _array(_object({"name": _string(), "status": _string(enum=["Ready", "Complete"])},
                                required=["name", "status"]),
                        maxItems=5, **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    "groupName": _string(default="default"),
    "name": _string(),
    "replicas": {**_int32(), "default": 1},
    # A batch/v1 JobTemplateSpec: the Job API validates it when the controller creates the Jobs.
    "template": _OPEN_OBJECT,
}, required=["name", "template"])

JOBSET_SPEC = _object({
    "coordinator": _object({"jobIndex": {"type": "integer"}, "podIndex": {"type": "integer"},
                            "replicatedJob": _string()}, required=["replicatedJob"]),
    "failurePolicy": _object({
        "maxRestarts": _int32(),
        "restartStrategy": _string(enum=["Recreate", "BlockingRecreate", "InPlaceRestart"], default="Recreate"),
        "rules": _array(_FAILURE_RULE),
    }, **{"x-kubernetes-validations": IMMUTABLE}),
    "managedBy": _string(),
    "network": _object({"enableDNSHostnames": {"type": "boolean"}, "publishNotReadyAddresses": {"type": "boolean"},
                        "subdomain": _string()}, **{"x-kubernetes-validations": IMMUTABLE}),
    "replicatedJobs": _array(_REPLICATED_JOB, **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    "startupPolicy": _object({"startupPolicyOrder": _string(enum=["AnyOrder", "InOrder"])},
                             required=["startupPolicyOrder"], **{"x-kubernetes-validations": IMMUTABLE}),
    "successPolicy": _object({"operator": _string(enum=["All", "Any"]),
                              "targetReplicatedJobs": _strings(**{"x-kubernetes-list-type": "atomic"})},
                             required=["operator"], **{"x-kubernetes-validations": IMMUTABLE}),
    "suspend": {"type": "boolean"},
    "ttlSecondsAfterFinished": _int32(minimum=0),
    # PersistentVolumeClaim templates: the claim API validates them when the controller creates them.
    "volumeClaimPolicies": _array(_OPEN_OBJECT, maxItems=50, **{"x-kubernetes-list-type": "atomic",
                                                                 "x-kubernetes-validations": IMMUTABLE}),
}, **{"x-kubernetes-validations": [{
    "rule": ("!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
             "self.replicatedJobs.exists(x, has(x.dependsOn)))"),
    "message": "StartupPolicy and DependsOn APIs are mutually exclusive"}]})

_PRINTER_COLUMNS = [
    {"name": "TerminalState", "type": "string", "jsonPath": ".status.terminalState"},
    {"name": "Restarts", "type": "string", "jsonPath": ".status.restarts"},
    {"name": "Completed", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Completed")].status'},
    {"name": "Suspended", "type": "string", "jsonPath": ".spec.suspend"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def jobset_crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"jobsets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": "JobSet", "listKind": "JobSetList", "plural": "jobsets", "singular": "jobset"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": _object({
                    "apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"},
                    "spec": JOBSET_SPEC,
                    # Written only by the controller, through the status subresource.
                    "status": _OPEN_OBJECT,
                })},
                "subresources": {"status": {}},
                "additionalPrinterColumns": _PRINTER_COLUMNS,
            }],
        },
    }


# The CRD alone: applied (and Established) before the controller watches it and Trainer creates JobSets.
ADDON = AddOn(name="jobset-crd", applies_to=lambda config: config.training_api == "v2",
              objects=lambda config, values: [jobset_crd()])
