"""Structural CustomResourceDefinitions for Kueue v0.19.2 (kueue.x-k8s.io/v1beta2), written small on
purpose, under `"queueing": "kueue"`.

All eleven of the release's kinds (../shared/contracts/kueue-v0.19.2/components-crd-bases-*): the
manager's controllers watch every one of them from start-up with the default feature gates
(ClusterQueue, LocalQueue, Cohort, ResourceFlavor, Workload, AdmissionCheck, WorkloadPriorityClass;
Topology for TopologyAwareScheduling, MultiKueueCluster and MultiKueueConfig for MultiKueue, both
beta and on: pkg/features/kube_features.go; ProvisioningRequestConfig for its admission check), and
a controller-runtime manager whose informer finds no CRD never becomes ready. Upstream's Workload CRD
is 1.4 MB (it inlines the PodTemplateSpec per pod set), past the kubectl Lambda's 256 KB event.

Only v1beta2, the storage version, is served: upstream also serves v1beta1 through a conversion
webhook (config/components/crd/patches), which nothing of ours speaks and Kueue v0.20 stops serving.
The kinds we write (ResourceFlavor, ClusterQueue, LocalQueue) are declared field by field with
upstream's types, enums, defaults and CEL rules, so the API server defaults and checks what Kueue
relies on; the other kinds declare their spec's fields with their defaults and rules down to where
their detail is Kueue's own business (a pod set's template, admission-check parameters); every status
keeps its unknown fields, and declares only its keyed lists, so Kueue's server-side applies merge
them entry by entry as upstream's schema makes them. tests/k8s/addons/test_kueue_crds.py checks each declared field against
upstream's and that no default of upstream's is lost.
"""

from __future__ import annotations

from config.queueing import KUEUE_VERSION
from k8s.addons import AddOn
from k8s.addons.jobset_crd import _array, _strings
from k8s.addons.training_operator_crds import _OPEN_OBJECT, _int32, _object, _string
from k8s.pods.kueue import NAMESPACE, WEBHOOK_SERVICE

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
# A DNS-1123 subdomain: names of flavors, queues and cohorts (upstream's pattern).
_DNS_NAME = _string(maxLength=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
             "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"}
_IMMUTABLE = [{"message": "field is immutable", "rule": "self == oldSelf"}]
_UNIQUE = {"message": "must be unique", "rule": "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0"}
_ATOMIC = {"x-kubernetes-list-type": "atomic"}
_EFFECTS = "['NoSchedule', 'PreferNoSchedule', 'NoExecute']"
_STOP_POLICY = _string(enum=["None", "Hold", "HoldAndDrain"], default="None")
_FAIR_SHARING = _object({"weight": {**_QUANTITY, "default": 1}})


def _open_array(**extra) -> dict:
    return _array(_OPEN_OBJECT, **extra)


def _rules(*pairs: tuple[str, str]) -> dict:
    return {"x-kubernetes-validations": [{"message": message, "rule": rule} for message, rule in pairs]}


_RESOURCE_GROUPS = _array(_object({
    "coveredResources": _strings(maxItems=64, minItems=1, **_ATOMIC),
    "flavors": _array(_object({
        "name": _DNS_NAME,
        "resources": _array(_object({"name": _string(), "nominalQuota": _QUANTITY, "borrowingLimit": _QUANTITY,
                                     "lendingLimit": _QUANTITY}, required=["name", "nominalQuota"]),
                            maxItems=64, minItems=1, **{"x-kubernetes-list-type": "map",
                                                        "x-kubernetes-list-map-keys": ["name"]}),
    }, required=["name", "resources"]), maxItems=64, minItems=1,
        **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
}, required=["coveredResources", "flavors"], **_rules(
    ("flavors must have the same number of resources as the coveredResources",
     "self.flavors.all(x, size(x.resources) == size(self.coveredResources))"))), maxItems=16, **_ATOMIC)

_CLUSTER_QUEUE_SPEC = _object({
    "admissionChecksStrategy": _OPEN_OBJECT,
    "admissionScope": _OPEN_OBJECT,
    "cohortName": _DNS_NAME,
    "concurrentAdmissionPolicy": _OPEN_OBJECT,
    "fairSharing": _FAIR_SHARING,
    "flavorFungibility": _object({
        "preference": _string(enum=["BorrowingOverPreemption", "PreemptionOverBorrowing"]),
        "whenCanBorrow": _string(enum=["MayStopSearch", "TryNextFlavor"], default="MayStopSearch"),
        "whenCanPreempt": _string(enum=["MayStopSearch", "TryNextFlavor"], default="TryNextFlavor"),
    }, default={}, **_rules(
        ("preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
         "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')"))),
    # A LabelSelector: the API server checks its shape when Kueue parses it, and Kueue reports a bad one
    # as the ClusterQueue's Active condition.
    "namespaceSelector": {**_OPEN_OBJECT, "x-kubernetes-map-type": "atomic"},
    "preemption": _object({
        "borrowWithinCohort": _object({"maxPriorityThreshold": _int32(),
                                       "policy": _string(enum=["Never", "LowerPriority"], default="Never")},
                                      default={}),
        "reclaimWithinCohort": _string(enum=["Never", "LowerPriority", "Any"], default="Never"),
        "withinClusterQueue": _string(enum=["Never", "LowerPriority", "LowerOrNewerEqualPriority"], default="Never"),
    }, default={}, **_rules(
        ("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
         "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
         "self.borrowWithinCohort.policy != 'Never')"))),
    "queueingStrategy": _string(enum=["StrictFIFO", "BestEffortFIFO"], default="BestEffortFIFO"),
    "resourceGroups": _RESOURCE_GROUPS,
    "stopPolicy": _STOP_POLICY,
}, **_rules(("borrowingLimit must be nil when cohort is empty",
             "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
             "f.resources.all(r, !has(r.borrowingLimit)))) : true")))

_RESOURCE_FLAVOR_SPEC = _object({
    "nodeLabels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 8,
                   "x-kubernetes-map-type": "atomic"},
    "nodeTaints": _array(_object({"effect": _string(), "key": _string(), "timeAdded": _string(format="date-time"),
                                  "value": _string()}, required=["effect", "key"]), maxItems=8, **_ATOMIC, **_rules(
        ("supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
         f"self.all(x, x.effect in {_EFFECTS})"))),
    "tolerations": _array(_object({"effect": _string(), "key": _string(), "operator": _string(),
                                   "tolerationSeconds": {"type": "integer", "format": "int64"}, "value": _string()}),
                          maxItems=8, **_ATOMIC, **_rules(
        ("operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
         "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)"),
        ("effect must be 'NoExecute' when 'tolerationSeconds' is set",
         "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)"),
        ("supported toleration values: 'Equal'(default), 'Exists'",
         "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])"),
        ("a value must be empty when 'operator' is 'Exists'",
         "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)"),
        ("supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
         f"self.all(x, !has(x.effect) || x.effect in {_EFFECTS})"))),
    "topologyName": _DNS_NAME,
}, **_rules(
    ("at least one nodeLabel is required when topology is set", "!has(self.topologyName) || self.nodeLabels.size() >= 1"),
    ("nodeLabels are immutable when topologyName is set",
     "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && (!has(self.nodeLabels) || "
     "self.nodeLabels == oldSelf.nodeLabels))"),
    ("tolerations are immutable when topologyName is set",
     "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) || "
     "self.tolerations == oldSelf.tolerations))"),
    ("topologyName is immutable when topologyName is set",
     "!has(oldSelf.topologyName) || (has(self.topologyName) && self.topologyName == oldSelf.topologyName)")))

_LOCAL_QUEUE_SPEC = _object({
    "clusterQueue": {**_DNS_NAME, "x-kubernetes-validations": _IMMUTABLE},
    "fairSharing": _FAIR_SHARING,
    "stopPolicy": _STOP_POLICY,
})

# Kueue creates every Workload itself from a job's pod sets; a pod set's template is a PodTemplateSpec
# the Pod API validates when the job's pods are created.
_POD_SET = {**_OPEN_OBJECT, "required": ["template"], "properties": {
    "name": _string(default="main", maxLength=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")}}
_WORKLOAD_SPEC = _object({
    "active": {"type": "boolean", "default": True},
    "maximumExecutionTimeSeconds": _int32(minimum=1),
    "podSets": _array(_POD_SET, maxItems=18, minItems=1,
                      **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    "preemptionGates": _array(_object({"name": _string(maxLength=63, minLength=1)}, required=["name"]), maxItems=8,
                              **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
    "priority": _int32(),
    "priorityClassRef": _object({
        "group": _string(enum=["kueue.x-k8s.io", "scheduling.k8s.io"]),
        "kind": _string(enum=["WorkloadPriorityClass", "PriorityClass"]),
        "name": {**_DNS_NAME, "minLength": 1},
    }, required=["group", "kind", "name"], **_rules(
        ("only the PriorityClass kind is allowed for the scheduling.k8s.io group",
         "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true"),
        ("only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
         "(self.group == 'kueue.x-k8s.io') ? self.kind == 'WorkloadPriorityClass' : true"))),
    "queueName": _DNS_NAME,
})

_ADMISSION_CHECK_SPEC = _object({
    "controllerName": _string(maxLength=253, minLength=1, **{"x-kubernetes-validations": _IMMUTABLE}),
    "parameters": _OPEN_OBJECT,
}, required=["controllerName"])

_PROVISIONING_REQUEST_CONFIG_SPEC = _object({
    "managedResources": _strings(maxItems=100, **{"x-kubernetes-list-type": "set"}),
    "parameters": {"type": "object", "additionalProperties": _string(maxLength=255), "maxProperties": 100},
    "podSetMergePolicy": _string(enum=["IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"]),
    "podSetUpdates": _OPEN_OBJECT,
    "provisioningClassName": {**_DNS_NAME, "minLength": 1},
    "retryStrategy": {**_OPEN_OBJECT, "default": {"backoffBaseSeconds": 60, "backoffLimitCount": 3,
                                                  "backoffMaxSeconds": 1800}},
}, required=["provisioningClassName"])

_MULTIKUEUE_CONFIG_SPEC = _object({
    "clusters": _array(_string(maxLength=256), maxItems=20, minItems=1, **_ATOMIC,
                       **{"x-kubernetes-validations": [_UNIQUE]}),
    "quotaManagement": _string(enum=["Manual", "Automated"]),
}, required=["clusters"])

_MULTIKUEUE_CLUSTER_SPEC = _object({"clusterSource": {**_OPEN_OBJECT, **_rules(
    ("exactly one of the fields in [kubeConfig clusterProfileRef] must be set",
     "[has(self.kubeConfig),has(self.clusterProfileRef)].filter(x,x==true).size() == 1"))}},
    required=["clusterSource"])

_TOPOLOGY_SPEC = _object({"levels": _array(_object({"nodeLabel": _string(maxLength=316, minLength=1)},
                                                   required=["nodeLabel"]),
                                           maxItems=16, minItems=1, **_ATOMIC, **{"x-kubernetes-validations": [
    *_IMMUTABLE, _UNIQUE,
    {"message": "the kubernetes.io/hostname label can only be used at the lowest level of topology",
     "rule": "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
             "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'"}]})}, required=["levels"])



def _keyed(keys: list[str], max_items: int, *, defaults: dict | None = None, **nested) -> dict:
    """A status list Kueue writes with server-side apply, merged entry by entry under `keys` as
    upstream declares it (x-kubernetes-list-type map); the entries keep their other fields. Left
    open, the list would merge as one atomic value, and one field manager's apply would replace
    entries another owns."""
    defaults = defaults or {}
    properties = {key: _string(**({"default": defaults[key]} if key in defaults else {})) for key in keys}
    items = {**_OPEN_OBJECT, "properties": {**properties, **nested}}
    if [k for k in keys if k not in defaults]:
        items["required"] = [k for k in keys if k not in defaults]
    return _array(items, maxItems=max_items, **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys})


def _status(**lists) -> dict:
    return {**_OPEN_OBJECT, "properties": lists}


_CONDITIONS = _keyed(["type"], 16)
_QUEUE_STATUS = _status(conditions=_CONDITIONS,
                        **{usage: _keyed(["name"], 64, resources=_keyed(["name"], 64))
                           for usage in ("flavorsReservation", "flavorsUsage")})
_WORKLOAD_STATUS = _status(
    admission={**_OPEN_OBJECT, "properties": {"podSetAssignments": _keyed(["name"], 18, defaults={"name": "main"})}},
    admissionChecks=_keyed(["name"], 8), conditions=_CONDITIONS, preemptionGates=_keyed(["name"], 8),
    reclaimablePods=_keyed(["name"], 18), resourceRequests=_keyed(["name"], 18),
    schedulingStats={**_OPEN_OBJECT, "properties": {"evictions": _keyed(["reason", "underlyingCause"], 256)}},
    unhealthyNodes=_keyed(["name"], 8))

# We create no Cohort: its quota groups are Kueue's to validate (its Cohort webhook, vcohort.kb.io).
_COHORT_SPEC = _object({"fairSharing": _FAIR_SHARING, "parentName": _DNS_NAME,
                        "resourceGroups": _open_array(maxItems=16, **_ATOMIC)})


# The CRDs Kueue's certificate rotator injects its CA into as conversion webhooks
# (pkg/util/cert/cert.go; the manager's ClusterRole may get and update exactly these). The rotator
# reports ready only once every injection succeeded, and one into a CRD without
# spec.conversion.webhook.clientConfig fails (open-policy-agent/cert-controller v0.16.0
# injectCertToConversionWebhook), so Kueue would never serve admission. With one served version the
# API server never calls the webhook; the stanza is there for the rotator.
CONVERTED = ("clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads")


def conversion() -> dict:
    return {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
        "service": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": "/convert"}}}}


def _crd(kind: str, plural: str, short_names: list[str], properties: dict, *, scope: str = "Cluster",
         status: dict | None = None, required: list[str] | None = None) -> dict:
    """`status`: its schema, written only by Kueue through the status subresource."""
    root = {"apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"}, **properties}
    if status:
        root["status"] = status
    version = {"name": VERSION, "served": True, "storage": True,
               "schema": {"openAPIV3Schema": _object(root, **({"required": required} if required else {}))}}
    if status:
        version["subresources"] = {"status": {}}
    spec = {"group": GROUP, "scope": scope, "versions": [version], "names": {
        "kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(), "shortNames": short_names}}
    if plural in CONVERTED:
        spec["conversion"] = conversion()
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/version": KUEUE_VERSION}},
            "spec": spec}


def kueue_crds() -> list[dict]:
    return [
        _crd("AdmissionCheck", "admissionchecks", ["ac"], {"spec": _ADMISSION_CHECK_SPEC},
             status=_status(conditions=_CONDITIONS)),
        _crd("ClusterQueue", "clusterqueues", ["cq"], {"spec": _CLUSTER_QUEUE_SPEC}, status=_QUEUE_STATUS),
        _crd("Cohort", "cohorts", ["co"], {"spec": _COHORT_SPEC}, status=_status()),
        _crd("LocalQueue", "localqueues", ["queue", "queues", "lq"], {"spec": _LOCAL_QUEUE_SPEC}, scope="Namespaced",
             status=_QUEUE_STATUS),
        _crd("MultiKueueCluster", "multikueueclusters", ["mkc"], {"spec": _MULTIKUEUE_CLUSTER_SPEC},
             status=_status(conditions=_CONDITIONS)),
        _crd("MultiKueueConfig", "multikueueconfigs", ["mkconf"], {"spec": _MULTIKUEUE_CONFIG_SPEC}),
        _crd("ProvisioningRequestConfig", "provisioningrequestconfigs", ["prc"],
             {"spec": _PROVISIONING_REQUEST_CONFIG_SPEC}),
        _crd("ResourceFlavor", "resourceflavors", ["flavor", "flavors", "rf"], {"spec": _RESOURCE_FLAVOR_SPEC}),
        _crd("Topology", "topologies", ["topo"], {"spec": _TOPOLOGY_SPEC}),
        _crd("WorkloadPriorityClass", "workloadpriorityclasses", ["wpc"],
             {"description": _string(maxLength=2048), "value": _int32()}, required=["value"]),
        _crd("Workload", "workloads", ["kwl", "kueueworkload", "kueueworkloads"], {"spec": _WORKLOAD_SPEC},
             scope="Namespaced", status=_WORKLOAD_STATUS),
    ]


# The CRDs alone: Established before the manager starts its informers and before any queue exists.
ADDON = AddOn(name="kueue-crds", applies_to=lambda config: config.queueing == "kueue",
              objects=lambda config, values: kueue_crds())
