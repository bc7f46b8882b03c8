"""The namespaces add-on (k8s/addons/namespaces.py); their Pod Security levels: tests/k8s/test_pod_security.py."""

from config.kubernetes import TRAINING_NAMESPACE
from k8s.addons.namespaces import namespaces
from k8s.pods.names import KUBEFLOW_NAMESPACE


def test_namespaces_for_the_operator_and_the_jobs():
    assert [d["metadata"]["name"] for d in namespaces("1.35")] == [KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE]
