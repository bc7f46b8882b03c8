"""TrainingClusterStage: one environment, built the one way (by app.py and by the pipeline)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

import config
from config.outputs import (
    CLUSTER_STACK_ID, NETWORK_STACK_ID, REGISTRY_STACK_ID, STORAGE_STACK_ID, VALIDATION_STACK_ID, WORKLOADS_STACK_ID,
)
from stacks.cluster import ClusterStack
from stacks.nag import apply_nag
from stacks.network import NetworkStack
from stacks.registry import RegistryStack
from stacks.storage import StorageStack
from k8s.pods.images import image_placeholder
from k8s.pods.validation import validation_objects
from stacks.validation import ValidationStack
from stacks.workloads import WorkloadsStack, workload_values


class TrainingClusterStage(cdk.Stage):
    """Attributes: `config`, and the stacks `network`, `cluster`, `storage`, `registry`, `workloads`,
    `validation`. Each stack gets what it uses, so its signature shows its dependencies.

    `pipeline_account`: the account of the pipeline that promotes this stage; only that pipeline's
    validation step may then start the stage's validation runner."""

    def __init__(self, scope: Construct, id: str, *, config: config.Environment,
                 pipeline_account: str | None = None, **kwargs) -> None:
        kwargs.setdefault("env", cdk.Environment(account=config.account, region=config.region))
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.network = NetworkStack(self, NETWORK_STACK_ID, config=config)
        vpc, training_subnet = self.network.vpc, self.network.training_subnet
        self.cluster = ClusterStack(self, CLUSTER_STACK_ID, config=config, vpc=vpc, training_subnet=training_subnet)
        self.storage = StorageStack(
            self, STORAGE_STACK_ID, config=config, vpc=vpc, training_subnet=training_subnet,
            cluster_security_group=self.cluster.cluster.cluster_security_group,
            efa_security_group=self.cluster.efa_security_group)
        self.registry = RegistryStack(self, REGISTRY_STACK_ID, config=config)
        self.workloads = WorkloadsStack(self, WORKLOADS_STACK_ID, config=config, cluster=self.cluster.cluster,
                                        values=workload_values(self.storage, self.registry),
                                        log_key=self.cluster.logs.key)
        # The smoke run's image is a placeholder in the objects; the runner fills it from its
        # environment, where CloudFormation resolves the trainer repository's copy of the image.
        self.validation = ValidationStack(
            self, VALIDATION_STACK_ID, config=config, vpc=vpc, cluster=self.cluster.cluster,
            validation_objects=validation_objects(config),
            runner_environment={image_placeholder("cpu"): self.registry.trainer_image_uris["cpu"]},
            pipeline_account=pipeline_account)
        apply_nag(self)
