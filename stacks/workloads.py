"""Workloads: the k8s/ charts applied to the cluster, one KubernetesManifest per chart.

The manifests live in this stack, not under the cluster construct: `Cluster.add_cdk8s_chart`
creates the manifest in the cluster's own stack, and the FSx values come from the storage stack,
which already depends on the cluster stack, so that would be a dependency cycle. This stack builds
exactly what `add_cdk8s_chart` builds (a KubernetesManifest of `chart.to_json()` on the cluster's
kubectl provider), in its own scope, with explicit dependencies between charts.

A chart that sets `one_manifest_per_object` (the preset PyTorchJobs) becomes one manifest per
object instead: the custom resource event carries the manifest twice on an update (old and new
properties) within the Lambda's 256 KiB, and a catalogue of presets in one manifest would outgrow
that; one job per manifest also re-applies only the job that changed.

A chart with a `ready_when` (the Training Operator) gets a KubernetesObjectValue that polls it
until the condition holds, and the charts that depend on it wait for that value, not only for the
apply: the operator's webhook fails closed, so a PyTorchJob applied before its pod is Available
would be rejected and fail the deploy.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from constructs import Construct

from cdk_constructs.training_drain import TrainingDrain
from config import Environment
from config.kubernetes import FSX_CLAIM_NAME, TRAINING_NAMESPACE
from stacks.removal import removal_policy
from config.outputs import trainer_image_output
from k8s.charts import ChartEntry, EnvironmentCharts
from k8s.common import short_digest
from k8s.values import ClusterValues, image_placeholder


class WorkloadsStack(cdk.Stack):
    """Attributes: `charts` (k8s.charts.EnvironmentCharts, the objects the dist sink writes too),
    `manifests` (chart name -> its KubernetesManifests: one, or one per object), `readiness` (chart
    name -> the KubernetesObjectValue its dependents wait for), `training_drain` (TrainingDrain; None
    where the environment keeps its data)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, cluster: eks.ICluster,
                 values: ClusterValues, log_key: kms.IKey | None = None, **kwargs) -> None:
        """`log_key`: encrypts the log group of the training drain (EncryptedLogs.key)."""
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.charts = EnvironmentCharts(config, values)
        self.manifests: dict[str, tuple[eks.KubernetesManifest, ...]] = {}
        self.readiness: dict[str, eks.KubernetesObjectValue] = {}
        for entry in self.charts.entries:
            objects = entry.chart.to_json()
            if entry.chart.one_manifest_per_object:
                parts = {f"{_construct_id(entry.name)}{_construct_id(o['metadata']['name'])}": [o] for o in objects}
            else:
                parts = {_construct_id(entry.name): objects}
            manifests = []
            for construct_id, part in parts.items():
                manifest = eks.KubernetesManifest(
                    self, construct_id, cluster=cluster, manifest=part,
                    # Apply, not create: a retried deployment finds its objects already there.
                    overwrite=True,
                    # Removing an object from a chart removes it from the cluster.
                    prune=True,
                    removal_policy=removal_policy_for(config, entry.name),
                )
                for dependency in entry.depends_on:
                    for before in self.manifests[dependency]:
                        manifest.node.add_dependency(before)
                    if dependency in self.readiness:
                        manifest.node.add_dependency(self.readiness[dependency])
                manifests.append(manifest)
            self.manifests[entry.name] = tuple(manifests)
            if entry.ready_when:
                [manifest] = manifests
                self.readiness[entry.name] = self._wait_until_ready(entry, cluster, manifest)
        self.training_drain = _training_drain(self, config, cluster, self.manifests, log_key)

    def _wait_until_ready(self, entry: ChartEntry, cluster: eks.ICluster,
                          manifest: eks.KubernetesManifest) -> eks.KubernetesObjectValue:
        """Polls the chart's readiness object until the JSON path yields a value. Its id carries a
        digest of the chart, so a changed chart is waited for again on the next deploy (a custom
        resource whose properties do not change is not re-run)."""
        ready = entry.ready_when
        value = eks.KubernetesObjectValue(
            self, f"{_construct_id(entry.name)}Ready{short_digest(entry.chart.to_json(), 8)}", cluster=cluster,
            object_type=ready.object_type, object_name=ready.name, object_namespace=ready.namespace,
            json_path=ready.json_path, timeout=cdk.Duration.minutes(ready.timeout_minutes),
        )
        value.node.add_dependency(manifest)
        return value


def _training_drain(stack: cdk.Stack, config: Environment, cluster: eks.ICluster,
                    manifests: dict[str, tuple[eks.KubernetesManifest, ...]],
                    log_key: kms.IKey | None) -> TrainingDrain | None:
    """On destroy, runs leave the training namespace before the FSx claim does. Where the claim is
    kept (removalPolicy retain) nothing waits on it, and a drain would only stop runs."""
    if config.retain:
        return None
    drain = TrainingDrain(stack, "TrainingDrain", cluster=cluster, namespace=TRAINING_NAMESPACE, claim=FSX_CLAIM_NAME,
                          holds=[m for chart in manifests.values() for m in chart], after=manifests["namespaces"],
                          log_key=log_key)
    cdk.RemovalPolicies.of(drain).apply(removal_policy(config))  # its log group goes with the environment
    return drain


# Deleting these would cascade: CRDs take every job with them, namespaces everything inside, the
# volume its binding. Environments that retain their data keep them when the stack goes.
KEPT_WHEN_RETAINED = ("namespaces", "training-operator-crds", "fsx-storage")


def removal_policy_for(config: Environment, chart_name: str) -> cdk.RemovalPolicy:
    if config.retain and chart_name in KEPT_WHEN_RETAINED:
        return cdk.RemovalPolicy.RETAIN
    return cdk.RemovalPolicy.DESTROY


def _construct_id(chart_name: str) -> str:
    return "".join(part.capitalize() for part in chart_name.split("-"))


def workload_values(storage, registry) -> ClusterValues:
    """ClusterValues from the storage and registry stacks (their attributes are tokens), with
    hints that tell a dist/ reader where each value comes from.

    The deployed jobs name their image by its immutable tag in the trainer repository (the
    asset's source hash, known at synth): its digest is known only once the Registry stack has
    copied the image, and a digest passed to this stack would be a CloudFormation export that no
    later deploy could change. dist/ and the ops commands take the Registry stack's outputs, which
    add the digest."""
    def output(stack, key: str) -> str:
        return (f"$(aws cloudformation describe-stacks --region {stack.region} --stack-name {stack.stack_name} "
                f"--query \"Stacks[0].Outputs[?OutputKey=='{key}'].OutputValue\" --output text)")

    fills = {"FSX_FILE_SYSTEM_ID": output(storage, "FileSystemId"), "FSX_DNS_NAME": output(storage, "FileSystemDnsName"),
             "FSX_MOUNT_NAME": output(storage, "FileSystemMountName")}
    hints = {name: f"output of stack {storage.stack_name}" for name in fills}
    for variant in registry.trainer_image_uris:
        name = image_placeholder(variant)
        hints[name] = (f"output {trainer_image_output(variant)} of stack {registry.stack_name} (the trainer "
                       "repository's copy, by tag and digest)")
        fills[name] = output(registry, trainer_image_output(variant))
    return ClusterValues(fsx_file_system_id=storage.file_system_id, fsx_dns_name=storage.dns_name,
                         fsx_mount_name=storage.mount_name, trainer_images=dict(registry.trainer_image_uris),
                         hints=hints, fills=fills)
