"""TrainingClusterStage: one environment, built the one way (by app.py and by the pipeline)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

import config
from stacks.cluster import ClusterStack
from stacks.nag import apply_nag
from stacks.network import NetworkStack
from stacks.registry import RegistryStack
from stacks.storage import StorageStack
from stacks.workloads import WorkloadsStack, workload_values


class TrainingClusterStage(cdk.Stage):
    """Attributes: `config`, and the stacks `network`, `cluster`, `storage`, `registry`, `workloads`."""

    def __init__(self, scope: Construct, id: str, *, config: config.Environment, **kwargs) -> None:
        kwargs.setdefault("env", cdk.Environment(account=config.account, region=config.region))
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.network = NetworkStack(self, "Network", config=config)
        self.cluster = ClusterStack(self, "Cluster", config=config, network=self.network)
        self.storage = StorageStack(self, "Storage", config=config, network=self.network, cluster=self.cluster)
        self.registry = RegistryStack(self, "Registry", config=config)
        self.workloads = WorkloadsStack(self, "Workloads", config=config, cluster=self.cluster.cluster, values=workload_values(self.storage, self.registry))
        apply_nag(self)
