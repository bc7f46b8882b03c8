"""Cluster validation: prove each node group is what the instance-type table says, and that a run works.

Per GPU node group, a GPU check Job runs nvidia-smi and counts the EFA devices the device plugin
hands the pod; per EFA node group that can hold two nodes, an NCCL all-reduce MPIJob across two
nodes is the template `ops validate` pins to each pair of the group's nodes, and ops/nccl.py
judges each pair's all_reduce_perf table against the floor in config/instance_types.py.
Where the environment has the CPU group, the smoke run (the cpu-ddp preset, rendered like every run:
a PyTorchJob by k8s/pods/pytorchjob.py, or under trainingApi v2 a TrainingRuntime and its TrainJob by
k8s/pods/trainjob.py) proves the training operator (or Trainer and JobSet), etcd rendezvous, FSx and
the trainer image.

None of these is deployed: a deploy would re-apply them whenever their spec changed, suspending or
re-templating one that runs. `python -m ops validate` creates them after a deploy (the pipeline's
validation runner does it from inside the VPC), each afresh, and a group without the nodes a check
needs is skipped rather than left Pending. `validation_objects` is what dist/<env>/validation/ and
the runner carry; the smoke run's image is the `${TRAINER_IMAGE_CPU}` placeholder ops fills in.
"""

from __future__ import annotations

from config.environment import Environment, Nodegroup
from config.instance_types import InstanceType
from config.kubernetes import (
    GPU_CHECK_DIGEST_LENGTH, NCCL_INSTANCE_TYPE_ANNOTATION, NODEGROUP_LABEL, TRAINING_NAMESPACE, VALIDATION_LABEL,
    gpu_check_job_name,
)
from k8s.pods.images import IMAGES, image_placeholder, placeholder
from k8s.pods.names import (
    API_CLIENT_LABEL, MPI_CONTAINER, NCCL_TEST_NODES, nccl_groups, nccl_test_name, project_labels, short_digest,
)
from k8s.pods.network_env import MPI_TCP_IF_EXCLUDE, network_env
from k8s.pods.podspec import validate_pod_templates
from k8s.pods.pytorchjob import presets_for, render_run
from k8s.pods.trainjob import render_trainjob_run
from k8s.pods.devices import device_resources, pod_resource_claims
from k8s.pods.resources import gpu_toleration, node_share, shm_size
from k8s.pods.security import NOBODY_UID, container_security_context, pod_security_context
from k8s.pods.workload import (
    container, hardened_container_security_context, hardened_pod_security_context, pod_spec, rendered,
    required_node_affinity,
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


COMPONENT = "validation"


def gpu_check_script(group: Nodegroup) -> str:
    instance = group.instance_type
    return "\n".join([
        "set -eu",
        "nvidia-smi",
        "gpus=$(nvidia-smi --list-gpus | wc -l)",
        f'echo "GPUs: $gpus (expected {instance.gpus} on {instance.name})"',
        f'[ "$gpus" -eq {instance.gpus} ] || {{ echo "FAIL: GPU count" >&2; exit 1; }}',
        # Either EFA path gives the container one uverbs device per interface: the device plugin per
        # requested interface, the DRA driver per allocated device (dranet v1.2.0
        # pkg/driver/dra_hooks.go buildRDMAConfig: the device's RDMA character devices).
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
        "env": [dict(MPI_HOME)],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "securityContext": container_security_context(),
    }
    worker = {
        "name": MPI_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        # The launcher drives the workers through kubectl exec; they only need to stay up.
        "command": ["/bin/bash", "-c", "sleep infinity"],
        "env": [dict(MPI_HOME), *network_env(instance, nccl_debug="INFO")],
        # What a training pod of this node group asks for.
        "resources": device_resources(group, cpu=node_share(instance)[0], memory=node_share(instance)[1]),
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
                    # k8s/pods/network_policy.py lets it reach the API server for `kubectl exec`.
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
                    **pod_resource_claims(group),
                }}},
            },
        },
    }
    return body


def has_smoke_run(config: Environment) -> bool:
    """Whether `config` has a node group for the smoke run's preset."""
    return SMOKE_PRESET in {p.name for p in presets_for(config)}


def smoke_run_objects(config: Environment, *, image: str = placeholder(image_placeholder("cpu"))) -> list[dict]:
    """The smoke run, in the order `ops validate` creates it: the PyTorchJob, or under trainingApi
    v2 its TrainingRuntime, then the TrainJob (Trainer's webhook refuses a TrainJob whose runtime
    does not exist). Empty where the environment has no node group for its preset."""
    if not has_smoke_run(config):
        return []
    if config.training_api == "v2":
        objects = list(render_trainjob_run(config, SMOKE_PRESET, image=image, job_name=SMOKE_RUN,
                                           checkpoint_root=SMOKE_CHECKPOINT_ROOT))
    else:
        objects = [render_run(config, SMOKE_PRESET, image=image, job_name=SMOKE_RUN,
                              checkpoint_root=SMOKE_CHECKPOINT_ROOT)]
    # Not one of the preset's runs for `ops start`/`ops stop`: it has a checkpoint folder of its own.
    for obj in objects:
        obj["metadata"]["labels"][VALIDATION_LABEL] = "true"
    return objects


def gpu_check_job(group: Nodegroup, *, image: str = IMAGES["cuda-base"], namespace: str = TRAINING_NAMESPACE) -> dict:
    """nvidia-smi and a device count (gpu_check_script) on one node of `group`, as nobody. The pod
    requests every device a training pod of this node group takes (GPUs, EFA interfaces and their
    huge pages, requests equal to limits), so a node that passes can schedule training pods: the
    device plugins only hand a pod what it requests."""
    instance = group.instance_type
    script = gpu_check_script(group)
    check = container(name="gpu-check", image=image, command=["/bin/sh", "-c", script],
                      resources=device_resources(group, cpu="500m", memory="512Mi"),
                      security_context=hardened_container_security_context(NOBODY_UID))
    pod = pod_spec(containers=[check], security_context=hardened_pod_security_context(NOBODY_UID),
                   affinity=required_node_affinity(NODEGROUP_LABEL, [group.name]), tolerations=[gpu_toleration()],
                   restartPolicy="Never", **pod_resource_claims(group))
    return rendered({
        "apiVersion": "batch/v1", "kind": "Job",
        # A Job's pod template is immutable: the name carries a digest of what it checks, so a
        # changed check is a new Job rather than a failed update.
        "metadata": {"name": gpu_check_job_name(group.name, short_digest([script, image], GPU_CHECK_DIGEST_LENGTH)),
                     "namespace": namespace, "labels": project_labels(COMPONENT)},
        "spec": {"backoffLimit": 1, "template": {"spec": pod}}})


def nccl_test_mpijobs(config: Environment, *, image: str = IMAGES["nccl-tests"],
                      namespace: str = TRAINING_NAMESPACE) -> list[dict]:
    """The NCCL test template of each group nccl_groups picks, checked against the strict PodSpec."""
    jobs = []
    for group in nccl_groups(config):
        manifest = nccl_mpijob_manifest(group, image=image, namespace=namespace)
        validate_pod_templates(manifest, config.kubernetes_version)
        manifest["metadata"] = rendered({**manifest["metadata"], "labels": project_labels(COMPONENT)})
        jobs.append(manifest)
    return jobs


def validation_objects(config: Environment) -> list[dict]:
    """Every object `ops validate` creates for `config`: the GPU checks and NCCL tests, then the smoke run."""
    return ([gpu_check_job(group) for group in config.gpu_nodegroups] + nccl_test_mpijobs(config)
            + smoke_run_objects(config))
