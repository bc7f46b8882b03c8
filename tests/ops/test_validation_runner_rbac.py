"""The validation runner's RBAC is exactly what `ops validate` asks of the API server, under either
training API.

`python -m ops validate` runs as the runner runs it, with the real kubectl and the smoke run's image
in its environment, against a recording API server on loopback (tests/ops/kube_http.py) holding two
Ready nodes in every group a check needs and last run's checks (the single NCCL MPIJob of earlier
releases, and a pair of the last sweep), which linger after a delete as objects do on a cluster.
The server makes each created job's pods as the controllers would, and the NCCL launchers log a
passing all_reduce_perf table. Under trainingApi v2 it serves the kinds of such a cluster: Trainer's
TrainingRuntime and TrainJob, MPIJobs, and no PyTorchJob. Every request kubectl makes becomes the (verb, group, resource) the
RBAC authorizer judges; the rules the chart binds to the runner's group
(k8s/validation_runner_rbac.py) must allow each one and grant nothing else, and no Secret.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from config.kubernetes import JOBSET_NAME_LABEL, NODEGROUP_LABEL, TRAINING_NAMESPACE, VALIDATION_RUNNER_GROUP
from kube_http import RESOURCES, RESOURCES_V2, RbacRequest, RecordingApiServer, rbac_requests
from ops import envconfig
from tests.conftest import REPO_ROOT

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs a kubectl binary on PATH (the runner installs one)")
RESOURCE_OF = {"Job": ("batch/v1", "jobs"), "MPIJob": ("kubeflow.org/v1", "mpijobs"),
               "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"),
               "TrainingRuntime": ("trainer.kubeflow.org/v1alpha1", "trainingruntimes"),
               "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjobs")}
# The smoke run's kind under each training API.
SMOKE_RESOURCE = {"v1": "pytorchjobs", "v2": "trainjobs"}
JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
NCCL_PASS = (REPO_ROOT / "tests" / "ops" / "fixtures" / "nccl" / "p5-pass.log").read_text()


@pytest.fixture(scope="module", params=["v1", "v2"])
def training_api(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def config(training_api):
    return dataclasses.replace(envconfig.load("dev"), training_api=training_api)


@pytest.fixture(scope="module")
def validation_objects(config):
    from k8s.pods.validation import validation_objects

    return validation_objects(config)


@pytest.fixture(scope="module")
def runner_rbac(config) -> list[dict]:
    """What the chart binds to the runner's group in this environment."""
    from k8s.addons import runner_rbac as addon

    return addon.ADDON.objects(config, None)


def pods_of(kind: str, job: dict) -> list[dict]:
    """The pod a controller makes first, labelled as it labels them: a Job's, an MPIJob's
    launcher (with the sweep's annotations), a PyTorchJob's worker 0, a TrainJob's node 0 (JobSet's);
    a TrainingRuntime makes none."""
    name = job["metadata"]["name"]
    spec = {"containers": [{"name": "main", "image": "i"}]}
    if kind == "TrainingRuntime":
        return []
    if kind == "TrainJob":
        return [{"metadata": {"name": f"{name}-node-0-0-abcde", "labels": {JOBSET_NAME_LABEL: name}}, "spec": spec}]
    if kind == "Job":
        return [{"metadata": {"name": f"{name}-0", "labels": {"job-name": name}}, "spec": spec}]
    if kind == "MPIJob":
        template = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].get("metadata", {})
        return [{"metadata": {"name": f"{name}-launcher", "annotations": template.get("annotations", {}),
                              "labels": {**template.get("labels", {}), JOB_NAME: name, REPLICA_TYPE: "launcher"}},
                 "spec": spec}]
    return [{"metadata": {"name": f"{name}-worker-0", "labels": {JOB_NAME: name, REPLICA_TYPE: "worker"}}, "spec": spec}]


def pod_log(pod: dict) -> str:
    return NCCL_PASS if pod["metadata"].get("labels", {}).get(REPLICA_TYPE) == "launcher" else "PASS\n"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, training_api, validation_objects) -> tuple[subprocess.CompletedProcess,
                                                                          list[RbacRequest]]:
    from ops import nccl
    from ops.validate import checks_from_objects

    tmp = tmp_path_factory.mktemp("runner")
    dist = tmp / "dist" / "validation"
    dist.mkdir(parents=True)
    (dist / "cluster-validation.yaml").write_text(yaml.safe_dump_all(validation_objects))
    server = RecordingApiServer(linger=True, logs=pod_log, pods_for=pods_of,
                                resources=RESOURCES_V2 if training_api == "v2" else RESOURCES)
    try:
        checks = checks_from_objects(validation_objects)
        for group in sorted({c.nodegroup for c in checks}):
            for index in range(2):
                server.add("v1", "nodes", "", {"metadata": {"name": f"{group}-{index}", "labels": {NODEGROUP_LABEL: group}},
                                               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        last_run = [obj for c in checks for obj in c.objects()]
        last_run += [nccl.pinned(c.manifest, (f"{c.nodegroup}-0", f"{c.nodegroup}-1"), 0, c.nodegroup)
                     for c in checks if c.kind == "MPIJob"]
        for obj in last_run:
            server.add(*RESOURCE_OF[obj["kind"]], TRAINING_NAMESPACE, obj)
            for pod in pods_of(obj["kind"], obj):
                server.add("v1", "pods", TRAINING_NAMESPACE, pod)
        env = {**os.environ, "KUBECONFIG": str(server.kubeconfig(tmp / "kubeconfig")), "HOME": str(tmp),
               "PATH": f"{os.path.dirname(KUBECTL)}:{os.environ['PATH']}", "TRAINER_IMAGE_CPU": "registry/trainer:cpu"}
        done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(dist.parent), "--timeout", "60"],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    finally:
        server.close()
    return done, rbac_requests(server.requests)


def _allows(rule: dict, request: RbacRequest) -> bool:
    return (request.group in rule["apiGroups"] or "*" in rule["apiGroups"]) \
        and (request.resource in rule["resources"] or "*" in rule["resources"]) \
        and (request.verb in rule["verbs"] or "*" in rule["verbs"]) \
        and (not rule.get("resourceNames") or request.name in rule["resourceNames"])


def _grants(rbac: list[dict]) -> list[tuple[str, dict]]:
    """(namespace, or "" for the whole cluster; rule) for every rule bound to the runner's group."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in rbac
             if o["kind"] in ("Role", "ClusterRole")}
    grants = []
    for binding in (o for o in rbac if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "Group" and s["name"] == VALIDATION_RUNNER_GROUP for s in binding["subjects"]):
            continue
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        grants += [(namespace, rule) for rule in role["rules"]]
    return grants


def test_validate_runs_every_check_through_the_real_kubectl(recorded, training_api):
    done, requests = recorded
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "validation finished: 5 passed, 0 failed, 0 skipped"
    assert {(r.verb, r.resource) for r in requests} >= {
        ("create", "mpijobs"), ("create", "jobs"), ("create", SMOKE_RESOURCE[training_api]), ("get", "pods/log")}
    # The last sweep's pairs went by their group label before the new sweep's were created.
    assert any(r.verb == "delete" and r.resource == "mpijobs" and r.name.endswith("-0") for r in requests)


def test_every_request_validate_makes_is_allowed_to_the_runner_group(recorded, runner_rbac):
    _, requests = recorded
    grants = _grants(runner_rbac)
    refused = [r for r in requests
               if not any(_allows(rule, r) for ns, rule in grants if ns in ("", r.namespace))]
    assert not refused, refused


def test_the_runner_group_is_granted_nothing_validate_does_not_use(recorded, runner_rbac):
    _, requests = recorded
    used = {(r.verb, r.group, r.resource, r.namespace) for r in requests}
    for namespace, rule in _grants(runner_rbac):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert any((verb, group, resource) == u[:3] and (not namespace or u[3] == namespace)
                               for u in used), f"{verb} {group or 'core'}/{resource} in {namespace or 'cluster'} is unused"


@pytest.mark.parametrize("training_api", ["v2"], indirect=True)
def test_a_trainer_v2_runner_may_not_touch_pytorchjobs_and_creates_the_runtime_before_its_trainjob(
        recorded, runner_rbac):
    """A v2 cluster has no PyTorchJob kind; Trainer's webhook refuses a TrainJob whose runtime is missing."""
    _, requests = recorded
    assert not [r for r in requests if r.resource == "pytorchjobs"]
    assert not [rule for _, rule in _grants(runner_rbac) if "pytorchjobs" in rule["resources"]]
    creates = [r.resource for r in requests if r.verb == "create" and r.group == "trainer.kubeflow.org"]
    assert creates == ["trainingruntimes", "trainjobs"]
    deletes = [r.resource for r in requests if r.verb == "delete" and r.group == "trainer.kubeflow.org"]
    assert deletes == ["trainjobs", "trainingruntimes"], "the TrainJob goes before the runtime it holds"


def test_nothing_bound_to_the_runner_touches_a_secret_or_uses_a_wildcard(runner_rbac):
    for _, rule in _grants(runner_rbac):
        assert not {"secrets", "*"} & set(rule["resources"]) and "*" not in rule["verbs"], rule
        assert "*" not in rule["apiGroups"], rule
    assert {ns for ns, _ in _grants(runner_rbac)} == {"", TRAINING_NAMESPACE}


def test_the_cluster_wide_grant_is_only_listing_nodes(runner_rbac):
    cluster = [rule for ns, rule in _grants(runner_rbac) if ns == ""]
    assert cluster == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]

