"""Workloads: the k8s/ charts applied to the cluster, one KubernetesManifest per chart.

The manifests live in this stack, not under the cluster construct: `Cluster.add_cdk8s_chart`
creates the manifest in the cluster's own stack, and the FSx values come from the storage stack,
which already depends on the cluster stack, so that would be a dependency cycle. This stack builds
exactly what `add_cdk8s_chart` builds (a KubernetesManifest of `chart.to_json()` on the cluster's
kubectl provider), in its own scope, with explicit dependencies between charts.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from config import Environment
from k8s.charts import EnvironmentCharts
from k8s.values import ClusterValues, image_placeholder


class WorkloadsStack(cdk.Stack):
    """Attributes: `charts` (k8s.charts.EnvironmentCharts, the objects the dist sink writes too),
    `manifests` (chart name -> KubernetesManifest)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, cluster: eks.ICluster,
                 values: ClusterValues, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.charts = EnvironmentCharts(config, values)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for entry in self.charts.entries:
            manifest = eks.KubernetesManifest(
                self, _construct_id(entry.name), cluster=cluster, manifest=entry.chart.to_json(),
                # Apply, not create: a retried deployment finds its objects already there.
                overwrite=True,
                # Removing an object from a chart removes it from the cluster.
                prune=True,
            )
            for dependency in entry.depends_on:
                manifest.node.add_dependency(self.manifests[dependency])
            self.manifests[entry.name] = manifest


def _construct_id(chart_name: str) -> str:
    return "".join(part.capitalize() for part in chart_name.split("-"))


def workload_values(storage, registry) -> ClusterValues:
    """ClusterValues from the storage and registry stacks (their attributes are tokens), with
    hints that tell a dist/ reader where each value comes from."""
    stage = cdk.Stage.of(storage)
    prefix = f"{stage.stage_name}-" if stage and stage.stage_name else ""
    outputs = f"aws cloudformation describe-stacks --stack-name {prefix}{storage.node.id}"
    hints = {
        "FSX_FILE_SYSTEM_ID": f"output FileSystemId of `{outputs}`",
        "FSX_DNS_NAME": f"output FileSystemDnsName of `{outputs}`",
        "FSX_MOUNT_NAME": f"output FileSystemMountName of `{outputs}`",
    }
    images = {}
    for variant, asset in registry.trainer_images.items():
        images[variant] = asset.image_uri
        hints[image_placeholder(variant)] = (
            f"the CDK asset image tagged {asset.image_tag} in the bootstrap container-assets repository "
            f"(`cdk deploy` pushes it)")
    return ClusterValues(fsx_file_system_id=storage.file_system_id, fsx_dns_name=storage.dns_name,
                         fsx_mount_name=storage.mount_name, trainer_images=images, hints=hints)
