"""The namespaces add-on (k8s/addons/namespaces.py); their Pod Security levels: tests/k8s/test_pod_security.py."""

from config.kubernetes import TRAINING_NAMESPACE
from k8s.addons.namespaces import namespaces
from k8s.pods.names import KUBEFLOW_NAMESPACE


def test_namespaces_for_the_operator_and_the_jobs():
    assert [d["metadata"]["name"] for d in namespaces("1.35")] == [KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE]


def test_trainer_v2_environments_get_kubeflow_system_at_restricted_and_v1_ones_do_not(dev):
    import dataclasses

    from config.kubernetes import KUBEFLOW_SYSTEM_NAMESPACE
    from k8s.addons.namespaces import environment_namespaces

    assert KUBEFLOW_SYSTEM_NAMESPACE not in [d["metadata"]["name"] for d in environment_namespaces(dev)]
    v2 = {d["metadata"]["name"]: d for d in environment_namespaces(dataclasses.replace(dev, training_api="v2"))}
    assert v2[KUBEFLOW_SYSTEM_NAMESPACE]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
