"""The cluster services' PriorityClass (k8s/addons/priority_classes.py)."""

from k8s.addons.priority_classes import control_priority_class
from k8s.addons.training_operator import training_operator
from k8s.pods.etcd import etcd_deployment
from k8s.pods.names import CONTROL_PRIORITY_CLASS
from k8s_walk import one, pod


def test_cluster_services_get_our_priority_class_not_a_reserved_one():
    klass = control_priority_class()
    assert klass["kind"] == "PriorityClass" and klass["metadata"]["name"] == CONTROL_PRIORITY_CLASS
    assert not CONTROL_PRIORITY_CLASS.startswith("system-")
    assert 0 < klass["value"] <= 1_000_000_000, "values above one billion are reserved"
    assert klass["globalDefault"] is False, "training pods keep priority 0"
    for deployment in (one(training_operator(), "Deployment"), etcd_deployment()):
        assert pod(deployment)["priorityClassName"] == CONTROL_PRIORITY_CLASS
