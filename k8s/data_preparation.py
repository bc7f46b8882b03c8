"""The ServiceAccounts of the data-preparation Jobs, one per data source that copies from S3.

Each is bound to its own EKS Pod Identity role (stacks/cluster.py), which may list and read that
source's S3 prefix and nothing else. The Jobs themselves are created per run by `ops data` from
k8s/data_jobs.py (that module says why they are not deployed with the charts).
"""

from __future__ import annotations

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.environment import Environment
from config.kubernetes import TRAINING_NAMESPACE
from k8s.base import ProjectChart
from k8s.data_jobs import DATA_SOURCE_LABEL


class DataPreparationChart(ProjectChart):
    component = "data-preparation"
    addon = "data-preparation"
    depends_on = ("namespaces", "fsx-storage")

    @classmethod
    def applies_to(cls, config: Environment) -> bool:
        return any(source.copies for source in config.data_sources)

    @classmethod
    def for_environment(cls, scope, config, values) -> "DataPreparationChart":
        return cls(scope, cls.addon, config=config)

    def __init__(self, scope: Construct, id: str, *, config: Environment):
        super().__init__(scope, id, namespace=TRAINING_NAMESPACE)
        self.service_accounts = {
            source.name: kplus.ServiceAccount(
                self, source.name, automount_token=True,
                metadata=self.meta(source.service_account, labels={DATA_SOURCE_LABEL: source.name}))
            for source in config.data_sources if source.copies}
