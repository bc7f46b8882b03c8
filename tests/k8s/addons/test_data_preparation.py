"""The data Jobs' ServiceAccounts (k8s/addons/data_preparation.py); the Jobs: tests/k8s/pods/test_data_job.py."""

from k8s.addons import ClusterValues
from k8s.addons.data_preparation import service_accounts
from k8s.charts import EnvironmentCharts, apply_order
from k8s.pods.data_job import DATA_SOURCE_LABEL


def test_the_add_on_holds_one_service_account_per_copying_source_and_applies_after_fsx(dev):
    docs = service_accounts(dev)
    assert [(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in docs] == [
        ("ServiceAccount", "data-imagenet", "training"), ("ServiceAccount", "data-c4", "training")]
    assert docs[0]["metadata"]["labels"][DATA_SOURCE_LABEL] == "imagenet"
    waits = dict((addon.name, deps) for addon, deps in apply_order(dev))
    assert waits["data-preparation"] == ("namespaces", "fsx-storage")
    names = [e.name for e in EnvironmentCharts(dev, ClusterValues.placeholders()).entries]
    assert "data-preparation" in names


def test_environments_without_data_sources_get_no_add_on(prod):
    assert prod.data_sources == ()
    assert "data-preparation" not in [addon.name for addon, _ in apply_order(prod)]
