"""Cluster validation: prove each node group is what the instance-type table says, and that a run works.

Per GPU node group, a GPU check Job runs nvidia-smi and counts the EFA devices the device plugin
hands the pod; per EFA node group that can hold two nodes, an NCCL all-reduce MPIJob across two
nodes is the template `ops validate` pins to each pair of the group's nodes, and ops/nccl.py
judges each pair's all_reduce_perf table against the floor in config/instance_types.py.
Where the environment has the CPU group, the smoke run (the cpu-ddp preset, rendered by
k8s/jobs.py like every run) proves the operator, etcd rendezvous, FSx and the trainer image.

None of these is deployed: a deploy would re-apply them whenever their spec changed, suspending or
re-templating one that runs. `python -m ops validate` creates them after a deploy (the pipeline's
validation runner does it from inside the VPC), each afresh, and a group without the nodes a check
needs is skipped rather than left Pending. `validation_objects` is what dist/<env>/validation/ and
the runner carry; the smoke run's image is the `${TRAINER_IMAGE_CPU}` placeholder ops fills in.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from config.environment import Environment, Nodegroup
from config.instance_types import InstanceType
from config.kubernetes import NCCL_INSTANCE_TYPE_ANNOTATION, NODEGROUP_LABEL, TRAINING_NAMESPACE, VALIDATION_LABEL
from k8s.base import (
    ProjectChart, drop_all_capabilities, hardened, patch_pod_spec, raw_object, runtime_default_seccomp,
    tolerate_gpu_taint,
)
from k8s.jobs import presets_for, render_run
from k8s.podspec import validate_pod_templates
from k8s.values import image_placeholder
from k8s.common import (
    API_CLIENT_LABEL, IMAGES, MPI_CONTAINER, MPI_TCP_IF_EXCLUDE, NCCL_TEST_NODES, NOBODY_UID,
    container_resources, container_security_context, gpu_toleration, network_env, nccl_groups, nccl_test_name,
    node_share, pod_security_context, shm_size, short_digest,
)

ALL_REDUCE = "/opt/nccl-tests/build/all_reduce_perf"
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
# Where the MPIJob v1 controller puts kubectl and the hostfile in the launcher
# (kubeflow/trainer v1.9.4 pkg/controller.v1/mpi/mpijob.go: kubectlMountPath, configMountPath).
MPI_KUBECTL = "/opt/kube/kubectl"
MPI_HOSTFILE = "/etc/mpi/hostfile"
# How long the launcher waits for its workers: a fresh GPU node pulls the multi-GB nccl-tests image.
WORKER_WAIT = "20m"
# The smoke run: the preset, its run's name, and a checkpoint folder of its own (a user's runs of
# the preset keep theirs).
SMOKE_PRESET = "cpu-ddp"
SMOKE_RUN = "validation-cpu-ddp"
SMOKE_CHECKPOINT_ROOT = "/fsx/checkpoints/.validation"


@dataclass(frozen=True)
class ValidationProps:
    config: Environment
    cuda_image: str = IMAGES["cuda-base"]
    nccl_image: str = IMAGES["nccl-tests"]
    namespace: str = TRAINING_NAMESPACE


def gpu_check_script(group: Nodegroup) -> str:
    instance = group.instance_type
    return "\n".join([
        "set -eu",
        "nvidia-smi",
        "gpus=$(nvidia-smi --list-gpus | wc -l)",
        f'echo "GPUs: $gpus (expected {instance.gpus} on {instance.name})"',
        f'[ "$gpus" -eq {instance.gpus} ] || {{ echo "FAIL: GPU count" >&2; exit 1; }}',
        # The EFA device plugin mounts one uverbs device per requested interface.
        "efa=$(ls -1d /dev/infiniband/uverbs* 2>/dev/null | wc -l)",
        f'echo "EFA devices: $efa (expected {instance.efa_interfaces})"',
        f'[ "$efa" -eq {instance.efa_interfaces} ] || {{ echo "FAIL: EFA device count" >&2; exit 1; }}',
        'echo "PASS"',
    ])


def nccl_max_bytes(instance: InstanceType) -> str:
    """The largest all-reduce: 16 GiB where the GPU holds nccl-tests' three buffers of it (send,
    receive, expected under -c 1) and its reserve, 8 GiB on 40 GB GPUs (nccl-tests would cut
    maxBytes itself, src/common.cu, but a stated range keeps runs comparable)."""
    return "16G" if instance.gpu_memory_gib >= 80 else "8G"


def nccl_launcher_script(group: Nodegroup) -> str:
    """mpirun across the workers: all_reduce_perf from 1 GiB up, where bus bandwidth is the bound,
    with data checking (-c 1). The launcher judges nothing: ops/nccl.py reads its table (for
    `ops validate` and `ops doctor` alike), so a failed MPIJob means the test itself broke."""
    instance = group.instance_type
    ranks = NCCL_TEST_NODES * instance.gpus
    exported = " ".join(f"-x {e['name']}={e['value']}" for e in network_env(instance, nccl_debug="INFO"))
    return "\n".join([
        "set -eu -o pipefail",
        # The operator starts the launcher as soon as it creates the workers, and v1.9.4's
        # kubectl-delivery only copies kubectl (the old mpioperator image also waited for the
        # workers to run). mpirun's first `kubectl exec` into a worker that is still pulling its
        # image would fail the job, so wait for every host in the hostfile to be Ready; the
        # launcher's Role allows get/list/watch on pods.
        f"workers=$(awk '{{print \"pod/\" $1}}' {MPI_HOSTFILE})",
        f"{MPI_KUBECTL} wait --for=condition=Ready --timeout={WORKER_WAIT} $workers"
        ' || { echo "FAIL: workers not Ready" >&2; exit 1; }',
        f"{MPIRUN} --tag-output -np {ranks} -npernode {instance.gpus}"
        f" --bind-to none -x PATH -x LD_LIBRARY_PATH {exported}"
        # Keep MPI's own bootstrap traffic off EFA and off the link-local interface.
        f" --mca pml ^ucx --mca btl tcp,self --mca btl_tcp_if_exclude {MPI_TCP_IF_EXCLUDE}"
        f" {ALL_REDUCE} -b 1G -e {nccl_max_bytes(instance)} -f 2 -g 1 -c 1 -n 20",
    ])


# mpirun, orted and kubectl keep their session files and caches under $HOME, which the image's
# passwd gives the nobody user as a directory that does not exist.
MPI_HOME = {"name": "HOME", "value": "/tmp"}


def nccl_mpijob_manifest(group: Nodegroup, *, image: str, namespace: str) -> dict:
    """Launcher and workers run as nobody with no capability: mpirun reaches the workers through
    `kubectl exec` (the launcher's ServiceAccount, which the operator creates per job with a Role
    that may only read pods and exec into this job's workers), and NCCL needs no root for EFA."""
    instance = group.instance_type
    launcher = {
        "name": MPI_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", "-c", nccl_launcher_script(group)],
        "env": [MPI_HOME],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "securityContext": container_security_context(),
    }
    worker = {
        "name": MPI_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        # The launcher drives the workers through kubectl exec; they only need to stay up.
        "command": ["/bin/bash", "-c", "sleep infinity"],
        "env": [MPI_HOME, *network_env(instance, nccl_debug="INFO")],
        # What a training pod of this node group asks for.
        "resources": container_resources(instance, cpu=node_share(instance)[0], memory=node_share(instance)[1]),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": nccl_test_name(group.name), "namespace": namespace,
                     # The floor ops/nccl.py judges against is the instance type's.
                     "annotations": {NCCL_INSTANCE_TYPE_ANNOTATION: instance.name}},
        "spec": {
            "slotsPerWorker": instance.gpus,
            "mainContainer": MPI_CONTAINER,
            # Finished pods stay for their logs (`ops doctor` reads the launcher's).
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
            "mpiReplicaSpecs": {
                # No serviceAccountName: the operator then creates <job>-launcher and its Role.
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": {
                    # k8s/network.py lets it reach the API server for `kubectl exec`.
                    "metadata": {"labels": {API_CLIENT_LABEL: "true"}}, "spec": {
                    "securityContext": pod_security_context(NOBODY_UID),
                    "containers": [launcher]}}},
                "Worker": {"replicas": NCCL_TEST_NODES, "restartPolicy": "Never", "template": {"spec": {
                    "securityContext": pod_security_context(NOBODY_UID),
                    "automountServiceAccountToken": False,
                    "nodeSelector": {NODEGROUP_LABEL: group.name},
                    "tolerations": [gpu_toleration()],
                    "containers": [worker],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                              "sizeLimit": shm_size(instance)}}],
                }}},
            },
        },
    }
    return body


def has_smoke_run(config: Environment) -> bool:
    """Whether `config` has a node group for the smoke run's preset."""
    return SMOKE_PRESET in {p.name for p in presets_for(config)}


def smoke_run_manifest(config: Environment, *, image: str = f"${{{image_placeholder('cpu')}}}") -> dict | None:
    """The smoke run, or None where the environment has no node group for its preset."""
    if not has_smoke_run(config):
        return None
    run = render_run(config, SMOKE_PRESET, image=image, job_name=SMOKE_RUN, checkpoint_root=SMOKE_CHECKPOINT_ROOT)
    # Not one of the preset's runs for `ops start`/`ops stop`: it has a checkpoint folder of its own.
    run["metadata"]["labels"][VALIDATION_LABEL] = "true"
    return run


def validation_objects(config: Environment) -> list[dict]:
    """Every object `ops validate` creates for `config`: the GPU checks and NCCL tests, then the smoke run."""
    objects = ClusterValidationChart(cdk8s.App(), "cluster-validation", props=ValidationProps(config=config)).to_json()
    smoke = smoke_run_manifest(config)
    return objects + ([smoke] if smoke else [])


class ClusterValidationChart(ProjectChart):
    """The GPU checks and NCCL tests as a chart; not an add-on (see the module docstring)."""

    component = "validation"

    def __init__(self, scope: Construct, id: str, *, props: ValidationProps):
        super().__init__(scope, id, namespace=props.namespace)
        self.gpu_checks: dict[str, kplus.Job] = {}
        for group in props.config.gpu_nodegroups:
            self.gpu_checks[group.name] = self._gpu_check(group, props)
        self.nccl_tests = {}
        for group in nccl_groups(props.config):
            manifest = nccl_mpijob_manifest(group, image=props.nccl_image, namespace=props.namespace)
            validate_pod_templates(manifest, props.config.kubernetes_version)
            self.nccl_tests[group.name] = raw_object(self, f"Nccl{group.name}", manifest)

    def _gpu_check(self, group: Nodegroup, props: ValidationProps) -> kplus.Job:
        instance = group.instance_type
        script = gpu_check_script(group)
        # A Job's pod template is immutable: the name carries a digest of what it checks, so a
        # changed check is a new Job rather than a failed update.
        name = f"gpu-check-{group.name.lower()}-{short_digest([script, props.cuda_image], 6)}"
        job = kplus.Job(
            self, f"GpuCheck{group.name}", metadata=self.meta(name),
            backoff_limit=1, ttl_after_finished=None,
            automount_service_account_token=False,
            # nvidia-smi and a device count need no root.
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True, user=NOBODY_UID, group=NOBODY_UID),
        )
        job.add_container(
            name="gpu-check", image=props.cuda_image, image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=["/bin/sh", "-c", script],
            security_context=hardened(ensure_non_root=True, user=NOBODY_UID, group=NOBODY_UID),
        )
        # Every device a training pod of this node group takes (GPUs, EFA interfaces and their
        # huge pages, requests equal to limits), so a node that passes can schedule training pods:
        # the device plugins only hand a pod what it requests. cdk8s-plus has no API for extended
        # resources, and the patch must carry Quantity objects: the typed Job serialiser drops
        # plain strings from resource maps.
        q = k8s.Quantity.from_string
        patch_pod_spec(job, "containers/0/resources", {
            side: {k: q(v) for k, v in values.items()}
            for side, values in container_resources(instance, cpu="500m", memory="512Mi").items()})
        runtime_default_seccomp(job)
        drop_all_capabilities(job)
        job.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(NODEGROUP_LABEL, group.name)))
        tolerate_gpu_taint(job)
        return job
