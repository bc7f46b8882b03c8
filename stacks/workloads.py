"""Workloads: the k8s/ charts applied to the cluster, one KubernetesManifest per chart.

What a deploy does to jobs: nothing. No chart holds a PyTorchJob, MPIJob or Job, so a deploy never
suspends, restarts, deletes or re-templates one that may be running. Runs are created by
`ops start` / `ops submit` (k8s/pods/pytorchjob.py render_run, named after a digest of their spec, image
included) and validation objects by `ops validate`; a running run keeps the image it started with.
The manifests earlier releases applied per preset and for validation keep their logical ids as
stand-ins (RETIRED_MARKER), so this release does not delete those jobs either.

The manifests live in this stack, not under the cluster construct: `Cluster.add_cdk8s_chart`
creates the manifest in the cluster's own stack, and the FSx values come from the storage stack,
which already depends on the cluster stack, so that would be a dependency cycle. This stack builds
exactly what `add_cdk8s_chart` builds (a KubernetesManifest of `chart.to_json()` on the cluster's
kubectl provider), in its own scope, with explicit dependencies between charts.

A chart with a `ready_when` (the Training Operator) gets a KubernetesObjectValue that polls it
until the condition holds: a deploy that changed the operator is done when its rollout is (the
webhook fails closed, and `ops` creates jobs right after a deploy), and the charts that depend on
it wait for that value, not only for the apply.

Destroy is the one time this stack touches runs: where the FSx claim goes with the stack, a
TrainingDrain (cdk_constructs/training_drain.py) deletes every run (TrainJob, JobSet, PyTorchJob,
MPIJob, Job) in the training namespace (whoever created them: ops start/submit/validate/data, or an
earlier release's deploy) and waits for their pods before any manifest is deleted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from constructs import Construct

from cdk_constructs.training_drain import TrainingDrain
from config import Environment
from config.eks_versions import kubectl_for
from config.kubernetes import FSX_CLAIM_NAME, TRAINING_NAMESPACE
from stacks.removal import removal_policy
from config.outputs import FSX_DNS_NAME_OUTPUT, FSX_FILE_SYSTEM_ID_OUTPUT, FSX_MOUNT_NAME_OUTPUT, trainer_image_output
from k8s.addons import ClusterValues, Placeholder
from k8s.charts import ChartEntry, EnvironmentCharts
from k8s.pods.images import KUBECTL_DELIVERY_IMAGE, image_placeholder
from k8s.pods.names import short_digest
from k8s.pods.pytorchjob import presets_for
from k8s.sinks import substitute_tokens

DEFAULT_QUALIFIER = cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
KUBECTL_DELIVERY_DIR = Path(__file__).resolve().parent.parent / "k8s" / "images" / "kubectl-delivery"


class WorkloadsStack(cdk.Stack):
    """Attributes: `kubectl_delivery_image` (the MPI launcher's kubectl, k8s/images/kubectl-delivery),
    `values` (the ClusterValues the charts were built from), `charts` (k8s.charts.EnvironmentCharts,
    the objects the dist sink writes too), `manifests` (chart name -> its KubernetesManifests, one
    each), `readiness` (chart name -> the KubernetesObjectValue its dependents wait for), `retired`
    (the stand-ins of earlier releases' job manifests), `training_drain` (TrainingDrain; None where
    the environment keeps its data)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, cluster: eks.ICluster,
                 values: ClusterValues, log_key: kms.IKey | None = None, **kwargs) -> None:
        """`log_key`: encrypts the log group of the training drain (EncryptedLogs.key)."""
        super().__init__(scope, id, **kwargs)
        self.config = config
        # The MPI launcher's kubectl, within one minor version of this cluster's Kubernetes.
        kubectl_version, kubectl_sha256 = kubectl_for(config.kubernetes_version)
        self.kubectl_delivery_image = ecr_assets.DockerImageAsset(
            self, "KubectlDeliveryImage", directory=str(KUBECTL_DELIVERY_DIR),
            build_args={"KUBECTL_VERSION": kubectl_version, "KUBECTL_SHA256": kubectl_sha256},
            platform=ecr_assets.Platform.LINUX_AMD64)
        hint, fill = pushed_image(self, self.kubectl_delivery_image)
        values = replace(values, kubectl_delivery_image=self.kubectl_delivery_image.image_uri,
                         hints={**values.hints, KUBECTL_DELIVERY_IMAGE: hint},
                         fills={**values.fills, KUBECTL_DELIVERY_IMAGE: fill})
        self.values = values
        self.charts = EnvironmentCharts(config, values)
        self.manifests: dict[str, tuple[eks.KubernetesManifest, ...]] = {}
        self.readiness: dict[str, eks.KubernetesObjectValue] = {}
        for entry in self.charts.entries:
            manifest = eks.KubernetesManifest(
                self, _construct_id(entry.name), cluster=cluster, manifest=entry.chart.to_json(),
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
            self.manifests[entry.name] = (manifest,)
            if entry.ready_when:
                self.readiness[entry.name] = self._wait_until_ready(entry, cluster, manifest, values)
        self.retired: list[eks.KubernetesManifest] = []
        for construct_id in retired_manifest_ids(config):
            retired = eks.KubernetesManifest(self, construct_id, cluster=cluster, manifest=[RETIRED_MARKER],
                                             overwrite=True, prune=False)
            for namespace in self.manifests["namespaces"]:
                retired.node.add_dependency(namespace)
            self.retired.append(retired)
        self.training_drain = _training_drain(self, config, cluster, self.manifests, self.retired, log_key)

    def _wait_until_ready(self, entry: ChartEntry, cluster: eks.ICluster, manifest: eks.KubernetesManifest,
                          values: ClusterValues) -> eks.KubernetesObjectValue:
        """Polls the chart's readiness object until the JSON path yields a value. Its id carries a
        digest of the chart, so a changed chart is waited for again on the next deploy (a custom
        resource whose properties do not change is not re-run; a new id is a new resource)."""
        ready = entry.ready_when
        value = eks.KubernetesObjectValue(
            self, f"{_construct_id(entry.name)}Ready{content_digest(entry.chart.to_json(), values)}", cluster=cluster,
            object_type=ready.object_type, object_name=ready.name, object_namespace=ready.namespace,
            json_path=ready.json_path, timeout=cdk.Duration.minutes(ready.timeout_minutes),
        )
        value.node.add_dependency(manifest)
        return value


def _training_drain(stack: cdk.Stack, config: Environment, cluster: eks.ICluster,
                    manifests: dict[str, tuple[eks.KubernetesManifest, ...]],
                    retired: list[eks.KubernetesManifest], log_key: kms.IKey | None) -> TrainingDrain | None:
    """On destroy, runs leave the training namespace before the FSx claim does, and before any
    manifest of the stack (the retired stand-ins too: the drain goes first). Where the claim is
    kept (removalPolicy retain) nothing waits on it, and a drain would only stop runs."""
    if config.retain:
        return None
    holds = [m for chart in manifests.values() for m in chart] + retired
    drain = TrainingDrain(stack, "TrainingDrain", cluster=cluster, namespace=TRAINING_NAMESPACE, claim=FSX_CLAIM_NAME,
                          holds=holds, after=manifests["namespaces"], log_key=log_key,
                          training_api=config.training_api)
    cdk.RemovalPolicies.of(drain).apply(removal_policy(config))  # its log group goes with the environment
    return drain


def content_digest(objects: list[dict], values: ClusterValues) -> str:
    """A digest of a chart's objects that changes exactly when what they deploy changes. A token's
    text (`${Token[TOKEN.n]}`) depends on construction order, not on the value, so each token
    counts as what decides its value: its dist fill (an image asset's tag is its content hash; the
    FSx values' stack outputs), else its placeholder name."""
    stable = {token: Placeholder(values.fills.get(p.name) or p.name, p.description)
              for token, p in values.dist_substitutions().items()}
    return short_digest(substitute_tokens(objects, stable, "digest"), 8)


# Earlier releases applied the preset PyTorchJobs (one manifest each) and the validation objects
# (one manifest) on deploy. Removing those manifests from the template would make CloudFormation
# delete them, and the kubectl handler deletes every object of the last manifest it applied: the
# presets' PyTorchJobs, running ones included. So they keep their logical ids and now apply this
# ConfigMap, without pruning: an apply without a prune label touches nothing else, and a later
# release may drop them (a delete then removes only the ConfigMap).
RETIRED_MARKER = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "retired-job-manifests", "namespace": TRAINING_NAMESPACE},
    "data": {"why": "Earlier releases applied the preset PyTorchJobs and the validation objects on deploy. Runs now "
                    "come from `ops start`; this ConfigMap replaced those manifests so that no deploy deletes a run."},
}


def retired_manifest_ids(config: Environment) -> list[str]:
    """The construct ids earlier releases gave those manifests in this stack: `TrainingJobs<Preset>`
    per preset of the environment, and `ClusterValidation` where it had GPU groups."""
    ids = [f"TrainingJobs{_construct_id(p.name)}" for p in presets_for(config)]
    return ids + (["ClusterValidation"] if config.gpu_nodegroups else [])


# Deleting these would cascade: CRDs take every job with them, namespaces everything inside, the
# volume its binding. Environments that retain their data keep them when the stack goes.
KEPT_WHEN_RETAINED = ("namespaces", "training-operator-crds", "jobset-crd", "trainer-v2-crds", "kueue-crds", "fsx-storage")


def removal_policy_for(config: Environment, chart_name: str) -> cdk.RemovalPolicy:
    if config.retain and chart_name in KEPT_WHEN_RETAINED:
        return cdk.RemovalPolicy.RETAIN
    return cdk.RemovalPolicy.DESTROY


def _construct_id(chart_name: str) -> str:
    return "".join(part.capitalize() for part in chart_name.split("-"))


def workload_values(storage, registry) -> ClusterValues:
    """ClusterValues from the storage and registry stacks (their attributes are tokens), with
    hints that tell a dist/ reader where each value comes from.

    The trainer images are the trainer repository's copies. Here they are named by their
    immutable tag (the asset's source hash, known at synth): the digest is known only once the
    Registry stack has copied the image, and a digest passed to this stack would be a
    CloudFormation export that no later deploy could change. dist/ and the ops commands (which
    create every run) take the Registry stack's outputs, which add the digest."""
    def output(stack, key: str) -> str:
        return (f"$(aws cloudformation describe-stacks --region {stack.region} --stack-name {stack.stack_name} "
                f"--query \"Stacks[0].Outputs[?OutputKey=='{key}'].OutputValue\" --output text)")

    fills = {"FSX_FILE_SYSTEM_ID": output(storage, FSX_FILE_SYSTEM_ID_OUTPUT),
             "FSX_DNS_NAME": output(storage, FSX_DNS_NAME_OUTPUT),
             "FSX_MOUNT_NAME": output(storage, FSX_MOUNT_NAME_OUTPUT)}
    hints = {name: f"output of stack {storage.stack_name}" for name in fills}
    for variant in registry.trainer_image_uris:
        name = image_placeholder(variant)
        hints[name] = (f"output {trainer_image_output(variant)} of stack {registry.stack_name} (the trainer "
                       "repository's copy, by tag and digest)")
        fills[name] = output(registry, trainer_image_output(variant))
    return ClusterValues(fsx_file_system_id=storage.file_system_id, fsx_dns_name=storage.dns_name,
                         fsx_mount_name=storage.mount_name, trainer_images=dict(registry.trainer_image_uris),
                         hints=hints, fills=fills)


def pushed_image(stack: cdk.Stack, asset: ecr_assets.DockerImageAsset) -> tuple[str, str]:
    """(hint, fill) of an image asset for dist/: `cdk deploy` pushes it to the bootstrap's
    container-assets repository, tagged with the asset hash; with the default bootstrap qualifier
    that is this URI."""
    repository = (f"{stack.account}.dkr.ecr.{stack.region}.amazonaws.com/"
                  f"cdk-{DEFAULT_QUALIFIER}-container-assets-{stack.account}-{stack.region}")
    return (f"pushed by `cdk deploy`, tagged {asset.image_tag} (default bootstrap qualifier assumed)",
            f"{repository}:{asset.image_tag}")
