"""`ops doctor`: is the deployed cluster what the environment config says, and healthy?

Read-only checks against the live API server, one row each (ops/checks.py):
- nodes <group>: every node of the group Ready, at least minSize of them;
- efa <group>: which path the group's pods take EFA interfaces by (`efaAllocation`: the EFA device
  plugin, or the EFA DRA driver and the group's ResourceClaimTemplate);
- gpu <group>: where some group has `gpuAllocation: dra`, which path each GPU group's pods take
  GPUs by (ops/doctor_dra.py);
- allocatable <node>: on GPU nodes, nvidia.com/gpu and vpc.amazonaws.com/efa equal the
  instance-type table's GPUs and EFA interfaces (none of either on a node whose group takes it
  through DRA: a node advertising it there runs both agents of that device), and hugepages-2Mi covers the 2 MiB pages the node's
  user data reserves for EFA (config/node_user_data.py; it never lowers a larger reservation);
- node-health <node>: the conditions the EKS node monitoring agent sets (NODE_HEALTH_CONDITIONS);
- dra <node>: on a DRA group's node, the EFA devices the DRA driver published as ResourceSlices,
  as many as the instance type's EFA interfaces; on a device-plugin node, none (ops/doctor_dra.py);
  dra gpu <node>: the same for the GPUs NVIDIA's GPU DRA driver publishes, where a group uses it;
- the device-plugin DaemonSets (and the DRA drivers', where a group uses them) and etcd Ready;
- per training controller (the Training Operator; under trainingApi v2 also Kubeflow Trainer and
  JobSet): its Deployment Ready (every replica), its leader-election Lease held and renewed, and a
  ready endpoint behind its fail-closed webhooks' Service (ops/doctor_controllers.py);
- the FSx claim Bound;
- nccl <group>: the last NCCL sweep's verdict (ops/nccl.py, the one `ops validate` printed), read
  back from its pairs' launcher logs;
- run <name>: each run (PyTorchJob under v1, TrainJob under v2) that is not finished, and whether
  its spec digest is the one `ops start` would create now (when the Registry stack's image is
  known): a run of older code is a warning.
"""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, Mapping

from config import Environment
from config.instance_types import InstanceType
from config.kubernetes import (
    AWS_DRANET, EFA_DEVICE_PLUGIN, EFA_DRA, EFA_NODE_HUGEPAGES, EFA_RESOURCE, ETCD_SERVICE, FSX_CLAIM_NAME, GPU_RESOURCE, HUGEPAGE_MIB,
    GPU_DRA, HUGEPAGES_RESOURCE, INSTANCE_TYPE_LABEL, KUBE_SYSTEM_NAMESPACE, NCCL_GROUP_LABEL,
    NODEGROUP_LABEL, NVIDIA_DEVICE_PLUGIN, OPERATOR_REPLICA_TYPE_LABEL, SYSTEM_NODEGROUP, TRAINING_NAMESPACE,
    VALIDATION_LABEL, efa_claim_template_name,
)
from k8s.pods.devices import claim_template_name
from k8s.pods.names import nccl_groups
from k8s.pods.nvidia_dra import KUBELET_PLUGIN as NVIDIA_KUBELET_PLUGIN
from ops import doctor_controllers, doctor_dra, nccl
from ops.checks import FAIL, PASS, WARN, Check
from ops.kube import phase_of
from ops.kube_reads import READ_TIMEOUT_S, call, list_objects, read

# "Detect node health issues and enable automatic node repair", Amazon EKS User Guide
# (https://docs.aws.amazon.com/eks/latest/userguide/node-health.html): the node monitoring agent (an
# add-on here, config/addons.py) sets one NodeCondition per category, True while healthy. It sets
# AcceleratedHardwareReady only on nodes with NVIDIA or Neuron hardware
# (aws/eks-node-monitoring-agent v1.7.0 cmd/eks-node-monitoring-agent/main.go).
NODE_HEALTH_CONDITIONS = ("ContainerRuntimeReady", "KernelReady", "NetworkingReady", "StorageReady")
ACCELERATOR_CONDITION = "AcceleratedHardwareReady"

# The launcher pods of a group's NCCL sweep: ops/nccl.py labels them with the group, and the Training
# Operator labels an MPIJob's launcher (kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/common_types.go
# ReplicaTypeLabel; pkg/controller.v1/mpi/mpijob.go defaultLauncherLabels: "launcher").
LAUNCHER_SELECTOR = NCCL_GROUP_LABEL + "={group}," + OPERATOR_REPLICA_TYPE_LABEL + "=launcher"
# NCCL_DEBUG=INFO puts every rank's init lines before the table; the table and summary are last.
LOG_TAIL_LINES = 5000


def run(env: Environment, api_client: Any, *, images: Mapping[str, str] | None = None,
        images_unknown: str = "", now: datetime | None = None) -> list[Check]:
    """Every row for `env`, read through one kubernetes ApiClient. `images`: the trainer image per
    variant the Registry stack published (what `ops start` would run), or None with the reason in
    `images_unknown`."""
    from kubernetes.client import AppsV1Api, CoreV1Api

    core, apps = CoreV1Api(api_client), AppsV1Api(api_client)
    host = api_client.configuration.host
    nodes = call(lambda: core.list_node(label_selector=NODEGROUP_LABEL, _request_timeout=READ_TIMEOUT_S),
                 f"list nodes at {host}").items
    by_group: dict[str, list] = {}
    for node in nodes:
        by_group.setdefault((node.metadata.labels or {}).get(NODEGROUP_LABEL), []).append(node)
    groups = [(SYSTEM_NODEGROUP, env.system_nodegroup.min_size, env.system_nodegroup.instance_type, None, None)]
    groups += [(g.name, g.min_size, g.instance_type, g.efa_path, g.gpu_allocation) for g in env.training_nodegroups]

    rows = [nodes_row(name, min_size, by_group.get(name, [])) for name, min_size, *_ in groups]
    rows += [efa_path_row(g.name, g.efa_path, claim_template_name(g)) for g in env.gpu_nodegroups if g.efa_path]
    for name, _, instance, efa_path, gpu_path in groups:
        for node in by_group.get(name, []):
            if instance.is_gpu:
                rows.append(allocatable_row(node, instance, efa_path, gpu_path))
            rows.append(node_health_row(node, instance))
    rows += doctor_dra.rows(env, by_group, api_client)
    rows += workload_rows(env, apps)
    rows += doctor_controllers.rows(env, api_client, apps, now or datetime.now(timezone.utc))
    rows.append(claim_row(core))
    rows += [nccl_row(g.name, g.instance_type, core) for g in nccl_groups(env)]
    rows += run_rows(env, api_client, images, images_unknown)
    return rows


def _ready(node: Any) -> tuple[bool, str]:
    for cond in (node.status.conditions if node.status else None) or []:
        if cond.type == "Ready":
            return cond.status == "True", cond.reason or cond.status
    return False, "no Ready condition"


def nodes_row(group: str, min_size: int, nodes: list) -> Check:
    name = f"nodes {group}"
    not_ready = [f"{n.metadata.name} ({why})" for n in nodes for ok, why in [_ready(n)] if not ok]
    ready = len(nodes) - len(not_ready)
    if not_ready:
        return Check(name, FAIL, f"{ready}/{len(nodes)} Ready; NotReady: {', '.join(sorted(not_ready))}")
    if ready < min_size:
        return Check(name, FAIL, f"{ready} Ready node(s), minSize is {min_size}")
    return Check(name, PASS, f"{ready}/{len(nodes)} Ready" if nodes else f"no nodes (minSize {min_size})")


def efa_path_row(group: str, efa_path: str, template: str | None = None) -> Check:
    if efa_path == EFA_DRA:
        how = (f"DRA driver ({AWS_DRANET}): pods claim them from ResourceClaimTemplate "
               f"{TRAINING_NAMESPACE}/{template or efa_claim_template_name(group)}")
    else:
        how = f"device plugin ({EFA_DEVICE_PLUGIN}): pods request {EFA_RESOURCE}"
    return Check(f"efa {group}", PASS, how)


def expected_allocatable(instance: InstanceType, efa_path: str | None = None,
                         gpu_path: str | None = None) -> dict[str, tuple[str, int]]:
    """resource -> ("==" or ">=", amount) a GPU node of `instance` must report as allocatable. A DRA
    group's node advertises no extended resource of the devices DRA hands out: only a device plugin would."""
    expected = {GPU_RESOURCE: ("==", 0 if gpu_path == GPU_DRA else instance.gpus)}
    if instance.supports_efa:
        expected[EFA_RESOURCE] = ("==", 0 if efa_path == EFA_DRA else instance.efa_interfaces)
        expected[HUGEPAGES_RESOURCE] = (">=", EFA_NODE_HUGEPAGES * HUGEPAGE_MIB * 2**20)
    return expected


def _quantity(text: str | None) -> int:
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(text)) if text else 0


def _bytes(amount: int) -> str:
    return f"{amount // 2**20}Mi" if amount % 2**20 == 0 else str(amount)


def allocatable_row(node: Any, instance: InstanceType, efa_path: str | None = None,
                    gpu_path: str | None = None) -> Check:
    name = f"allocatable {node.metadata.name}"
    labelled = (node.metadata.labels or {}).get(INSTANCE_TYPE_LABEL)
    if labelled and labelled != instance.name:
        return Check(name, FAIL, f"node is {labelled}, its node group is configured as {instance.name}")
    have = (node.status.allocatable if node.status else None) or {}
    problems, seen = [], []
    for resource, (op, want) in expected_allocatable(instance, efa_path, gpu_path).items():
        got = _quantity(have.get(resource))
        show = _bytes if resource == HUGEPAGES_RESOURCE else str
        seen.append(f"{resource} {show(got)}")
        if (got != want) if op == "==" else (got < want):
            wanted = show(want) if op == "==" else f"at least {show(want)}"
            plugin = {EFA_RESOURCE: "EFA device plugin", GPU_RESOURCE: "NVIDIA device plugin"}.get(resource)
            both = f" (the {plugin} runs on this DRA node too)" if plugin and not want else ""
            problems.append(f"{resource} {show(got)}, expected {wanted} on {instance.name}{both}")
    if problems:
        return Check(name, FAIL, "; ".join(problems))
    return Check(name, PASS, ", ".join(seen))


def node_health_row(node: Any, instance: InstanceType) -> Check:
    name = f"node-health {node.metadata.name}"
    wanted = NODE_HEALTH_CONDITIONS + ((ACCELERATOR_CONDITION,) if instance.is_gpu else ())
    conditions = {c.type: c for c in (node.status.conditions if node.status else None) or []}
    problems = []
    for ctype in wanted:
        cond = conditions.get(ctype)
        if cond is None:
            problems.append(f"{ctype} not reported (is the eks-node-monitoring-agent add-on running?)")
        elif cond.status != "True":
            detail = ": ".join(p for p in (cond.reason, " ".join((cond.message or "").split())) if p)
            problems.append(f"{ctype} {cond.status}" + (f" ({detail})" if detail else ""))
    if problems:
        return Check(name, FAIL, "; ".join(problems))
    return Check(name, PASS, f"{', '.join(wanted)} True")


def workload_rows(env: Environment, apps: Any) -> list[Check]:
    rows = []
    if env.gpu_groups("devicePlugin"):
        rows.append(doctor_controllers.workload_row(apps, "DaemonSet", KUBE_SYSTEM_NAMESPACE, NVIDIA_DEVICE_PLUGIN))
    if env.gpu_groups(GPU_DRA):
        rows.append(doctor_controllers.workload_row(apps, "DaemonSet", KUBE_SYSTEM_NAMESPACE, NVIDIA_KUBELET_PLUGIN))
    if env.efa_groups("devicePlugin"):
        rows.append(doctor_controllers.workload_row(apps, "DaemonSet", KUBE_SYSTEM_NAMESPACE, EFA_DEVICE_PLUGIN))
    if env.efa_groups(EFA_DRA):
        rows.append(doctor_controllers.workload_row(apps, "DaemonSet", KUBE_SYSTEM_NAMESPACE, AWS_DRANET))
    rows.append(doctor_controllers.workload_row(apps, "Deployment", TRAINING_NAMESPACE, ETCD_SERVICE))
    return rows


def claim_row(core: Any) -> Check:
    row = f"pvc {TRAINING_NAMESPACE}/{FSX_CLAIM_NAME}"
    claim = read(lambda: core.read_namespaced_persistent_volume_claim(FSX_CLAIM_NAME, TRAINING_NAMESPACE,
                                                                      _request_timeout=READ_TIMEOUT_S),
                 f"read PersistentVolumeClaim {TRAINING_NAMESPACE}/{FSX_CLAIM_NAME}")
    if claim is None:
        return Check(row, FAIL, "not found")
    phase = claim.status.phase if claim.status else None
    if phase != "Bound":
        return Check(row, FAIL, f"{phase or 'no phase'}, not Bound (check the FSx CSI driver and the volume)")
    return Check(row, PASS, f"Bound to {claim.spec.volume_name}")


def nccl_row(group: str, instance: InstanceType, core: Any) -> Check:
    """The last sweep's verdict, from its pairs' launcher logs (ops/nccl.py, as `ops validate` judged them)."""
    row = f"nccl {group}"
    pods = call(lambda: core.list_namespaced_pod(TRAINING_NAMESPACE, label_selector=LAUNCHER_SELECTOR.format(group=group),
                                                 _request_timeout=READ_TIMEOUT_S),
                f"list the NCCL launcher pods of node group {group}").items
    pairs = [(pair, pod) for pod in pods for pair in [nccl.pair_of(pod.metadata.annotations)] if pair]
    if not pairs:
        return Check(row, WARN, f"no NCCL sweep has run on node group {group}; "
                                "run `python -m ops validate --dist dist/<env>`")
    when = max(str(pod.metadata.creation_timestamp or "unknown time") for _, pod in pairs)
    running = [pod.metadata.name for _, pod in pairs if (pod.status.phase if pod.status else None) in ("Pending", "Running")]
    if running:
        return Check(row, WARN, f"an NCCL sweep is running ({', '.join(sorted(running))}, started {when})")
    results = []
    for pair, pod in pairs:
        text = call(lambda: core.read_namespaced_pod_log(pod.metadata.name, TRAINING_NAMESPACE,
                                                         tail_lines=LOG_TAIL_LINES, _request_timeout=READ_TIMEOUT_S),
                    f"read the log of {pod.metadata.name}")
        verdict = nccl.judge(text or "", instance.nccl_busbw_floor_gbps)
        phase = pod.status.phase if pod.status else "unknown"
        if phase != "Succeeded":
            verdict = nccl.Verdict(False, f"launcher {pod.metadata.name} {phase}; {verdict.line}", verdict.busbw)
        results.append(nccl.PairResult(pair, verdict))
    sweep = nccl.sweep_verdict(results)
    return Check(row, PASS if sweep.ok else FAIL, f"{sweep.line} ({instance.name}, sweep of {when})")


def run_rows(env: Environment, api_client: Any, images: Mapping[str, str] | None, images_unknown: str) -> list[Check]:
    """One row per run that is not finished (a PyTorchJob under trainingApi v1, a TrainJob under v2):
    its phase, and whether it runs the spec `ops start` would create now (the Registry stack's
    image, the preset without --set)."""
    from config.presets import get_preset
    from k8s.pods.pytorchjob import PRESET_LABEL, SPEC_DIGEST_LABEL
    from ops.api_switch import RUN_KINDS

    kind = next(k for k in RUN_KINDS if k.api == env.training_api)
    jobs = list_objects(api_client, kind.group, kind.version, kind.plural, f"list the {kind.kind}s",
                        namespace=TRAINING_NAMESPACE)
    rows, current = [], {}
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        labels = job["metadata"].get("labels") or {}
        preset, name = labels.get(PRESET_LABEL), job["metadata"]["name"]
        if labels.get(VALIDATION_LABEL) or not preset:
            continue
        phase, suspended = _trainjob_phase(job) if kind.api == "v2" else _pytorchjob_phase(job)
        if phase in ("Succeeded", "Failed"):
            continue
        state = f"{phase}{', suspended' if suspended and phase != 'Suspended' else ''}"
        if images is None:
            rows.append(Check(f"run {name}", WARN, f"{state}; cannot compare with what `ops start {preset}` would "
                                                   f"create now: {images_unknown}"))
            continue
        if preset not in current:
            current[preset] = _current_run_name(env, preset, images[get_preset(preset).image_variant])
        if labels.get(SPEC_DIGEST_LABEL) and name == current[preset]:
            rows.append(Check(f"run {name}", PASS, f"{state}; the spec `ops start {preset}` creates now"))
        else:
            rows.append(Check(f"run {name}", WARN, f"{state}; older code or other settings than `ops start {preset}` "
                                                   f"would create now ({current[preset]})"))
    return rows


def _current_run_name(env: Environment, preset: str, image: str) -> str:
    if env.training_api == "v2":
        from k8s.pods.trainjob import render_trainjob_run

        return render_trainjob_run(env, preset, image=image)[1]["metadata"]["name"]
    from k8s.pods.pytorchjob import render_run

    return render_run(env, preset, image=image)["metadata"]["name"]


def _pytorchjob_phase(job: dict) -> tuple[str, bool]:
    """(phase as ops.kube.phase_of names it, whether runPolicy.suspend is set)."""
    conditions = [SimpleNamespace(type=c.get("type"), status=c.get("status"), message=c.get("message"))
                  for c in (job.get("status") or {}).get("conditions") or []]
    phase, _ = phase_of(SimpleNamespace(status=SimpleNamespace(conditions=conditions)))
    return phase, bool((job["spec"].get("runPolicy") or {}).get("suspend"))


def _trainjob_phase(job: dict) -> tuple[str, bool]:
    """(the phase of the TrainJob's own conditions, whether spec.suspend is set): one reading of
    Trainer's conditions, ops/trainjobs.py's. Doctor reads no Kueue Workload: a run Kueue holds back
    shows as Suspended here, and `ops status` says whether it is queued or stopped."""
    from ops.trainjobs import Observed

    phase, _ = Observed(job, "", None, None).phase()
    return phase, bool((job.get("spec") or {}).get("suspend"))
