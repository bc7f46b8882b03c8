"""The ServiceAccounts of the data-preparation Jobs, one per data source that copies from S3.

Each is bound to its own EKS Pod Identity role (stacks/cluster.py), which may list and read that
source's S3 prefix and nothing else. The Jobs themselves are created per run by `ops data` from
k8s/pods/data_job.py (that module says why they are not deployed with the charts).
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import TRAINING_NAMESPACE
from k8s.addons import AddOn
from k8s.pods.data_job import DATA_SOURCE_LABEL


def service_accounts(config: Environment) -> list[dict]:
    # No Kubernetes API token for any pod that runs as them: Pod Identity projects its own
    # (k8s/pods/fsx_job.py), and the data Jobs never call the API.
    return [{"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": source.service_account, "namespace": TRAINING_NAMESPACE,
                          "labels": {DATA_SOURCE_LABEL: source.name}},
             "automountServiceAccountToken": False}
            for source in config.data_sources if source.copies]


ADDON = AddOn(name="data-preparation", depends_on=("namespaces", "fsx-storage"),
              applies_to=lambda config: any(source.copies for source in config.data_sources),
              objects=lambda config, values: service_accounts(config))
