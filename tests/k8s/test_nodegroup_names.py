"""Every Kubernetes name made from a node group's name is valid, for any name the config accepts.

EKS itself takes 1-63 letters, digits, '-' and '_' as a node group name (CreateNodegroup), but ours
also reaches Kubernetes: it is the value of the nodes' nodegroup label and a Kueue ResourceFlavor's
name, and object names are made from it (the EFA and devices ResourceClaimTemplates, the GPU check
Job, the NCCL MPIJob and the copies `ops validate` sweeps with, the NCCL sweep's NetworkPolicy, the
capacity-block stop CronJob). Those are lowercase DNS names with length limits, and `kubectl apply`
refuses an object whose name breaks them, so the config narrows the name (config/nodegroup_parser.py).
These tests take the longest name the config accepts, with every builder's option on (capacity
blocks, EFA and GPUs through DRA, Kueue, both training APIs), render every object and check each
name and label value that embeds it against Kubernetes' rules (apimachinery validation:
IsDNS1123Label, IsDNS1123Subdomain, IsValidLabelValue; a CronJob's name at most 52 characters,
because its controller adds 11 to name each Job).
"""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator

import pytest

from config import ConfigError, Environment, load_environment
from config.kubernetes import NODEGROUP_LABEL, nodegroup_labels
from k8s.pods.capacity_block_stop import stop_cronjob
from ops import nccl
from k8s_walk import raw_environments
from rendered import cluster_objects, pods

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_LABEL, MAX_SUBDOMAIN, MAX_CRONJOB_NAME = 63, 253, 52
# A Job's name is the value of its pods' job-name labels; a Kubeflow job's, of the Training
# Operator's and JobSet's labels on its pods.
LABEL_NAMED = {"Job", "MPIJob", "PyTorchJob", "TrainJob"}
BLOCK = "cr-0123456789abcdef0"
MAX_SIZE = 12  # the NCCL sweep's copies are numbered up to the group's node count; dev's VPC holds this many


def label(value: str) -> str | None:
    ok = len(value) <= MAX_LABEL and DNS1123_LABEL.fullmatch(value)
    return None if ok else f"must be a DNS-1123 label of at most {MAX_LABEL} characters"


def subdomain(value: str) -> str | None:
    ok = len(value) <= MAX_SUBDOMAIN and DNS1123_SUBDOMAIN.fullmatch(value)
    return None if ok else f"must be a DNS-1123 subdomain of at most {MAX_SUBDOMAIN} characters"


def label_value(value: str) -> str | None:
    ok = len(value) <= MAX_LABEL and LABEL_VALUE.fullmatch(value)
    return None if ok else f"must be a label value of at most {MAX_LABEL} characters"


def cronjob_name(value: str) -> str | None:
    if len(value) > MAX_CRONJOB_NAME:
        return f"must be at most {MAX_CRONJOB_NAME} characters (a CronJob's)"
    return subdomain(value)


def object_name_rule(kind: str) -> Callable[[str], str | None]:
    if kind == "CronJob":
        return cronjob_name
    return label if kind in LABEL_NAMED else subdomain


def raw_environment(names: tuple[str, str, str], training_api: str) -> dict:
    """dev with every builder that takes a group's name on: `names` are a GPU group with EFA through
    DRA, a p5 capacity-block group with GPUs and EFA through DRA, and a CPU group; Kueue queues."""
    raw = copy.deepcopy(raw_environments()["dev"])
    efa, block, cpu = names
    raw["kubernetesVersion"] = "1.35"
    raw["trainingApi"] = training_api
    raw["queueing"] = "kueue"
    raw["gpuNodegroups"] = [
        {"name": efa, "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": MAX_SIZE, "desiredSize": 0,
         "efaAllocation": "dra"},
        {"name": block, "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": MAX_SIZE, "desiredSize": 0,
         "capacity": {"type": "capacityBlock", "reservationId": BLOCK}, "efaAllocation": "dra",
         "gpuAllocation": "dra"},
    ]
    raw["cpuNodegroups"] = [{"name": cpu, "instanceType": "m5.2xlarge", "minSize": 0, "maxSize": MAX_SIZE,
                             "desiredSize": 0}]
    return raw


def accepted(names: tuple[str, str, str], training_api: str) -> Environment | None:
    """The environment, or None where the config refuses a name (any other refusal is the test's fault)."""
    try:
        return load_environment({"dev": raw_environment(names, training_api)}, "dev")
    except ConfigError as err:
        if not re.search(r"Nodegroups\[\d+\]\.name:", err.line()):
            raise
        return None


# Three names of n (at least 3) characters in each form; the config may refuse a form entirely.
FORMS = {
    "lowercase": lambda n: tuple(c + "a" * (n - 2) + "1" for c in "xyz"),
    "uppercase": lambda n: tuple(c + "A" * (n - 2) + "1" for c in "XYZ"),
    "underscore": lambda n: tuple(c + "_" * (n - 2) + "1" for c in "xyz"),
}


def longest_accepted(form: Callable[[int], tuple[str, str, str]], training_api: str) -> Environment | None:
    for n in range(MAX_LABEL, 2, -1):
        env = accepted(form(n), training_api)
        if env is not None:
            return env
    return None


def embedding(obj_or_value, names: tuple[str, ...], where: str = "") -> Iterator[tuple[str, str, str]]:
    """(where, key, string) for every string under a name or label key that contains one of `names`."""
    if isinstance(obj_or_value, dict):
        for key, value in obj_or_value.items():
            if isinstance(value, str) and any(n in value for n in names):
                yield f"{where}.{key}", key, value
            elif isinstance(value, dict) and key in ("labels", "matchLabels", "nodeSelector", "nodeLabels"):
                for k, v in value.items():
                    if isinstance(v, str) and any(n in v for n in names):
                        yield f"{where}.{key}.{k}", "label", v
            elif isinstance(value, list) and key in ("values", "resourceNames"):
                for i, v in enumerate(value):
                    if isinstance(v, str) and any(n in v for n in names):
                        yield f"{where}.{key}[{i}]", key, v
            else:
                yield from embedding(value, names, f"{where}.{key}")
    elif isinstance(obj_or_value, list):
        for i, item in enumerate(obj_or_value):
            yield from embedding(item, names, f"{where}[{i}]")


# Where a string holding a group's name is a name Kubernetes checks, and its rule; other keys
# (container env, scripts, annotations) are text.
KEY_RULES = {
    "label": label_value, "values": label_value,  # nodeSelector, matchLabels, node affinity values
    "resourceNames": cronjob_name,  # the stop CronJobs the capacity-block Role may delete
    "resourceClaimTemplateName": subdomain,
    "generateName": lambda v: subdomain(v + "abcde"),
}


def problems(objs: list[dict], names: tuple[str, ...]) -> tuple[list[str], set[str]]:
    """Broken names, and every object name seen that embeds a group name."""
    bad, seen = [], set()
    for obj in objs:
        kind, meta = obj["kind"], obj["metadata"]
        ident = f"{kind}/{meta.get('name') or meta.get('generateName')}"
        if any(n in meta.get("name", "") for n in names):
            seen.add(f"{kind}/{meta['name']}")
            if reason := object_name_rule(kind)(meta["name"]):
                bad.append(f"{ident} metadata.name: {reason}")
        for where, key, value in embedding(obj, names):
            if where == ".metadata.name":
                continue
            # A ClusterQueue's flavor references a ResourceFlavor by name.
            rule = subdomain if re.fullmatch(r".*\.flavors\[\d+\]\.name", where) else KEY_RULES.get(key)
            if key == "values" and ".matchExpressions[" not in where:
                continue  # matchFields: node names, not label values
            if rule and (reason := rule(value)):
                bad.append(f"{ident} {where} {value!r}: {reason}")
        for pod in pods(obj):
            for k, v in pod.labels.items():
                if any(n in v for n in names) and (reason := label_value(v)):
                    bad.append(f"{pod.where} pod label {k} {v!r}: {reason}")
        if kind == "MPIJob":
            # The Training Operator names the workers <job>-worker-<index> and the launcher
            # <job>-launcher: host names, so DNS labels.
            last = obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] - 1
            for pod_name in (f"{meta['name']}-worker-{last}", f"{meta['name']}-launcher"):
                if reason := label(pod_name):
                    bad.append(f"{ident} pod {pod_name}: {reason}")
    return bad, seen


def every_object(config: Environment) -> list[dict]:
    """What a deploy applies and ops creates, the NCCL sweep's copy with its largest index, and the
    capacity-block stop CronJob."""
    objs = cluster_objects(config)
    for template in [o for o in objs if o["kind"] == "MPIJob" and "-node-a" not in str(o)]:
        group = template["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"][NODEGROUP_LABEL]
        objs.append(nccl.pinned(template, ("node-a", "node-b"), config.nodegroup(group).max_size - 1, group))
    end = datetime(2026, 12, 8, 11, 30, tzinfo=timezone.utc)
    for group in config.gpu_nodegroups:
        if group.capacity.type == "capacityBlock":
            objs.append(stop_cronjob(config, group.name, reservation_id=BLOCK, end=end, image="kubectl:1",
                                     now=end - timedelta(days=7)))
    return objs


@pytest.mark.parametrize("training_api", ["v1", "v2"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_kubernetes_name_made_from_the_longest_accepted_node_group_name_is_valid(form, training_api):
    config = longest_accepted(FORMS[form], training_api)
    if config is None:
        assert form != "lowercase", "the config must accept some lowercase name"
        return  # the config refuses the form at any length (tests/config pins the message)
    names = tuple(g.name for g in config.training_nodegroups)
    bad, seen = problems(every_object(config), names)
    for group in config.training_nodegroups:
        gpu, efa = group.instance_type.is_gpu, group.instance_type.supports_efa
        labels = nodegroup_labels(group.name, "training", gpu=gpu, efa=efa, efa_allocation=group.efa_allocation,
                                  gpu_allocation=group.gpu_allocation)
        bad += [f"node label {k} {v!r}: {r}" for k, v in labels.items() if group.name in v and (r := label_value(v))]
    assert not bad, f"names {names} ({len(names[0])} characters):\n" + "\n".join(bad)
    # Every builder ran: the claim templates, the checks, the NCCL objects, the flavors, the CronJob.
    efa, block, cpu = names
    kinds = {s.split("/", 1)[0] for s in seen}
    assert {"ResourceClaimTemplate", "Job", "MPIJob", "NetworkPolicy", "ResourceFlavor", "CronJob"} <= kinds, seen
    assert {f"ResourceFlavor/{n}" for n in names} <= seen
    assert any(block in s and s.startswith("CronJob/") for s in seen)
    assert sum(s.startswith("ResourceClaimTemplate/") for s in seen) == 2
