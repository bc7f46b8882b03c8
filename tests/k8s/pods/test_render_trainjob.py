"""render_trainjob_run: a run under trainingApi v2 is a TrainingRuntime and a TrainJob whose pod is
the v1 PyTorchJob's worker pod, apart from a declared list of keys; the TrainJob never sets
resourcesPerNode; the JobSet's policies give the fault semantics the README states; both objects
satisfy the Trainer v2.3.0 CRDs with unknown fields rejected."""

from __future__ import annotations

import copy
import functools
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml

from config import ConfigError
from config.kubernetes import MAX_JOB_NAME
from k8s.pods.pytorchjob import SPEC_DIGEST_LABEL, presets_for, render_run
from k8s.pods.torchrun_env import RENDEZVOUS, TRAINER_INJECTED
from k8s.pods.trainjob import (
    JOBSET_NAME_LABEL, NODE, RESTART_ATTEMPT_ENV, node_pod_template, render_trainjob_run,
)
from k8s_walk import ENV_NAMES, closed

from tests.conftest import CONTRACTS_DIR

IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer@sha256:" + "a" * 64
TRAINER = CONTRACTS_DIR / "kubeflow-trainer-v2.3.0"
MERGE_SOURCE = TRAINER / "source-pkg-runtime-core-trainingruntime.go"

# Where the v2 pod differs from the v1 worker pod of the same preset, and why. Everything else (image,
# command, every other variable with its value, resources, security contexts, volumes, node
# selection, tolerations, grace period, labels) must be equal. A path that differs and is not here,
# or a row that no longer differs, fails the test.
DECLARED = {
    "spec.containers[0].name": "each API finds its container by name: `pytorch` (v1 operator), `node` (Trainer)",
    "spec.restartPolicy": "v1 restarts containers in place (OnFailure, from the replica spec); v2 never does "
                          "(podFailurePolicy requires Never): a failed pod restarts the whole JobSet",
    f"spec.containers[0].env[{RESTART_ATTEMPT_ENV}]": "the JobSet attempt, so each attempt gets its own rendezvous id",
    "spec.containers[0].env[TRAINER_RUN_ID]": "the run's id for the checkpoint lease, the same on every attempt "
                                              "(v1's rendezvous id already is)",
    **{f"spec.containers[0].env[{name}]": "v1's operator derives the rendezvous from elasticPolicy at pod creation; "
                                         "v2 has no elasticPolicy, so the runtime states it" for name in RENDEZVOUS},
}
# What each controller adds to the pods it creates from these templates (not in either template,
# so not part of the comparison; listed so the difference is complete):
CONTROLLER_ADDED = {
    "v1 (Training Operator 1.9.4)": "PET_NNODES=min:max, PET_NPROC_PER_NODE, PET_RDZV_* and PET_MAX_RESTARTS from "
                                    "elasticPolicy; the container port; labels training.kubeflow.org/*; a Service "
                                    "per worker",
    "v2 (Trainer 2.3.0 + JobSet 0.12 + Job)": f"{', '.join(TRAINER_INJECTED)}; port 29500; JOB_COMPLETION_INDEX; "
                                              f"labels {JOBSET_NAME_LABEL}, jobset.sigs.k8s.io/*, batch.kubernetes.io/*; "
                                              "hostname <run>-node-0-<index>, subdomain <run>",
}


def differences(a, b, path: str = "") -> set[str]:
    """The paths where two objects differ; an env list compares by variable name (`env[NAME]`)."""
    if isinstance(a, list) and isinstance(b, list) and path.endswith(".env"):
        a, b = ({e["name"]: e for e in side} for side in (a, b))
        return {re.sub(r"\.env\.([^.]+)", r".env[\1]", p) for p in differences(a, b, path)}
    if isinstance(a, dict) and isinstance(b, dict):
        out = set()
        for k in a.keys() | b.keys():
            where = f"{path}.{k}" if path else k
            out |= {where} if (k in a) != (k in b) else differences(a[k], b[k], where)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(*(differences(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))))
    return set() if a == b else {path}


def v1_pod(job: dict) -> dict:
    """The worker pod the v1 operator creates from the template (the replica's restartPolicy goes to
    the pod: v1.9.4 setRestartPolicy)."""
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    pod = copy.deepcopy(worker["template"])
    pod["spec"]["restartPolicy"] = worker["restartPolicy"]
    return pod


@pytest.fixture(scope="module")
def runs(environments):
    """(env, preset, v1 PyTorchJob, (TrainingRuntime, TrainJob)) for every cluster preset of every
    environment, both under the preset's name (a default run name ends in a digest of the objects,
    which differ between the APIs). The renderers do not read trainingApi: a preset renders both ways."""
    out = []
    for name in ENV_NAMES:
        env = environments[name]
        for preset in presets_for(env):
            out.append((name, preset, render_run(env, preset.name, image=IMAGE, job_name=preset.name),
                        render_trainjob_run(env, preset.name, image=IMAGE, job_name=preset.name)))
    assert len(out) > 10
    return out


def test_the_v2_pod_is_the_v1_worker_pod_apart_from_the_declared_keys(runs):
    for env, preset, job, (runtime, _) in runs:
        found = differences(v1_pod(job), node_pod_template(runtime))
        assert found == set(DECLARED), (
            f"{env}/{preset.name}: undeclared {sorted(found - set(DECLARED))}, stale {sorted(set(DECLARED) - found)}")


def test_the_difference_finder_sees_a_changed_resource_request(runs):
    _, _, job, (runtime, _) = runs[0]
    pod = node_pod_template(runtime)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    pod["spec"]["containers"][0]["env"][0]["value"] = "0"
    found = differences(v1_pod(job), pod) - set(DECLARED)
    assert found == {"spec.containers[0].resources.requests.cpu", "spec.containers[0].env[PYTHONUNBUFFERED].value"}


def test_the_trainjob_names_its_runtime_and_topology_and_never_sets_resources_per_node(runs, environments):
    for env, preset, job, (runtime, trainjob) in runs:
        trainer = trainjob["spec"]["trainer"]
        assert set(trainer) == {"numNodes", "numProcPerNode"}, f"{env}/{preset.name}: {trainer}"
        # v2 has no node range: an elastic preset runs at its upper bound (capped by the group, as in v1).
        assert trainer["numNodes"] == job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        assert trainer["numNodes"] == runtime["spec"]["mlPolicy"]["numNodes"]
        # Explicit: "auto" would start one process per requested CPU on a CPU pod.
        assert trainer["numProcPerNode"] == job["spec"]["elasticPolicy"]["nProcPerNode"]
        assert trainjob["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                                  "name": runtime["metadata"]["name"]}
        assert runtime["metadata"]["name"] == trainjob["metadata"]["name"]
        assert trainjob["metadata"]["labels"][SPEC_DIGEST_LABEL] == runtime["metadata"]["labels"][SPEC_DIGEST_LABEL]
        env_names = {e["name"] for e in node_pod_template(runtime)["spec"]["containers"][0]["env"]}
        # Trainer's torch plugin sets these itself and refuses a job that sets them.
        assert not env_names & set(TRAINER_INJECTED)


def test_a_changed_image_is_a_new_run_and_the_same_spec_the_same_name(dev):
    a = render_trainjob_run(dev, "cpu-ddp", image=IMAGE)
    assert render_trainjob_run(dev, "cpu-ddp", image=IMAGE) == a
    b = render_trainjob_run(dev, "cpu-ddp", image=IMAGE.replace("a" * 64, "b" * 64))
    assert a[1]["metadata"]["name"] != b[1]["metadata"]["name"]
    assert render_trainjob_run(dev, "cpu-ddp", image=IMAGE, job_name="mine")[1]["metadata"]["name"] == "mine"
    long = render_trainjob_run(dev, "efficientnetb7-imagenet", image=IMAGE)[1]["metadata"]["name"]
    # JobSet names pods <run>-node-0-<index>, a DNS label of at most 63 characters.
    assert long.startswith("efficientnetb7-imagenet-") and len(long) <= MAX_JOB_NAME


def test_the_jobset_policies_give_the_stated_fault_semantics(runs):
    for env, preset, job, (runtime, _) in runs:
        spec = runtime["spec"]["template"]["spec"]
        (node,) = spec["replicatedJobs"]
        job_spec = node["template"]["spec"]
        assert node["name"] == NODE and node["replicas"] == 1
        # Success only when every index completes: one rank exiting 0 early never marks the run done.
        assert spec["successPolicy"] == {"operator": "All"} and job_spec["completionMode"] == "Indexed"
        assert job_spec["template"]["spec"]["restartPolicy"] == "Never" and job_spec["backoffLimit"] == 0
        # Evicted, drained, preempted: the Job fails with reason PodFailurePolicy by rule 0; a
        # permanent status of the trainer container, by rule 1 ...
        assert job_spec["podFailurePolicy"]["rules"] == [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "node", "operator": "In", "values": [2, 65]}}]
        assert job_spec["podReplacementPolicy"] == "Failed"
        # ... rule 1 fails the JobSet; rule 0 restarts it without counting; a crash counts, up to the
        # preset's budget.
        policy = spec["failurePolicy"]
        assert policy["rules"] == [
            {"name": "permanent", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
             "onJobFailureMessagePatterns": ["matching FailJob rule at index 1$"]},
            {"name": "disruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
             "onJobFailureReasons": ["PodFailurePolicy"]}]
        # A JobSet restart is one restart of the whole gang: the same budget as v1's max_restarts.
        assert policy["maxRestarts"] == job["spec"]["elasticPolicy"]["maxRestarts"] == preset.max_restarts
        # No new pod while an old one may still be writing its checkpoint.
        assert policy["restartStrategy"] == "BlockingRecreate"


def _job_failure(job_spec: dict, exit_code: int, *, disrupted: bool) -> tuple[str, str]:
    """(reason, message) of the JobFailed condition when one pod of the Job fails so. The Job
    controller applies the first podFailurePolicy rule that matches and names its index in the
    message; with no rule, backoffLimit 0 fails the Job at its first failed pod (Kubernetes, "Pod
    failure policy" and "Handling retriable and non-retriable pod failures with Pod failure policy",
    https://kubernetes.io/docs/tasks/job/pod-failure-policy/, whose example message this follows)."""
    for index, rule in enumerate(job_spec["podFailurePolicy"]["rules"]):
        if disrupted and {"type": "DisruptionTarget", "status": "True"} in rule.get("onPodConditions", []):
            return "PodFailurePolicy", f"Pod training/x has condition DisruptionTarget matching FailJob rule at index {index}"
        codes = rule.get("onExitCodes")
        if codes and codes["containerName"] == NODE and (exit_code in codes["values"]) == (codes["operator"] == "In"):
            return ("PodFailurePolicy",
                    f"Container {NODE} for pod training/x failed with exit code {exit_code} matching FailJob rule at index {index}")
    assert job_spec["backoffLimit"] == 0
    return "BackoffLimitExceeded", "Job has reached the specified backoff limit"


def _jobset_action(policy: dict, reason: str, message: str) -> str:
    """JobSet v0.12.0: the first rule whose reasons (empty: any) and message patterns (RE2, empty:
    any) both match; none matching is RestartJobSet (FailurePolicy.rules in the contract's CRD)."""
    for rule in policy["rules"]:
        if reason in rule.get("onJobFailureReasons", [reason]) and \
                any(re.search(p, message) for p in rule.get("onJobFailureMessagePatterns", ["."])):
            return rule["action"]
    return "RestartJobSet"


@pytest.mark.parametrize(("exit_code", "disrupted", "action"), [
    (2, False, "FailJobSet"),  # a usage error, bad data, a final save refused by the lease's new owner
    (65, False, "FailJobSet"),  # checkpoints exist and none loads
    (1, False, "RestartJobSet"),  # a crash, or a peer that stopped first: counts against maxRestarts
    (75, False, "RestartJobSet"),  # a checkpoint read that failed for a cause not of the checkpoint's own
    (143, False, "RestartJobSet"),  # SIGTERM without a disruption (`kubectl delete pod`)
    (143, True, "RestartJobSetAndIgnoreMaxRestarts"),  # drained, evicted, preempted
    (2, True, "RestartJobSetAndIgnoreMaxRestarts"),  # a disruption wins over the status it died with
])
def test_a_permanent_status_fails_the_run_at_once_and_only_a_disruption_restarts_it_free(runs, exit_code, disrupted,
                                                                                        action):
    for env, preset, job, (runtime, _) in runs:
        spec = runtime["spec"]["template"]["spec"]
        (node,) = spec["replicatedJobs"]
        reason, message = _job_failure(node["template"]["spec"], exit_code, disrupted=disrupted)
        assert _jobset_action(spec["failurePolicy"], reason, message) == action, (env, preset.name, message)


def test_each_jobset_attempt_rendezvouses_under_its_own_id(runs):
    for env, preset, job, (runtime, _) in runs:
        env_list = node_pod_template(runtime)["spec"]["containers"][0]["env"]
        names = [e["name"] for e in env_list]
        value = {e["name"]: e.get("value") for e in env_list}
        # The kubelet expands $(VAR) only from variables defined earlier in the list.
        assert names.index(RESTART_ATTEMPT_ENV) < names.index("PET_RDZV_ID")
        assert names.index("TRAINER_RUN_ID") < names.index("PET_RDZV_ID")
        assert value["PET_RDZV_ID"] == f"$(TRAINER_RUN_ID)-$({RESTART_ATTEMPT_ENV})"
        assert value["TRAINER_RUN_ID"].startswith(runtime["metadata"]["name"] + "-")
        elastic = job["spec"]["elasticPolicy"]
        assert value["PET_RDZV_BACKEND"] == elastic["rdzvBackend"]
        assert value["PET_RDZV_ENDPOINT"] == f"{elastic['rdzvHost']}:{elastic['rdzvPort']}"
        assert value["PET_MAX_RESTARTS"] == str(elastic["maxRestarts"])


def test_c10d_rendezvous_meets_at_pod_zero_by_its_jobset_hostname(dev):
    runtime, trainjob = render_trainjob_run(dev, "cpu-ddp", image=IMAGE, overrides={"rendezvous": "c10d"})
    name = trainjob["metadata"]["name"]
    value = {e["name"]: e.get("value") for e in node_pod_template(runtime)["spec"]["containers"][0]["env"]}
    assert value["PET_RDZV_ENDPOINT"] == f"{name}-node-0-0.{name}:29400"
    assert value["PET_RDZV_BACKEND"] == "c10d"


def test_a_bad_override_is_the_same_one_line_error_as_under_v1(dev):
    with pytest.raises(ConfigError) as err:
        render_trainjob_run(dev, "cpu-ddp", image=IMAGE, overrides={"nodes_max": 99})
    assert err.value.line().startswith("config error: overrides.nodes_max: 99 nodes exceed node group")


def test_the_job_template_is_a_strict_batch_v1_job(runs, environments):
    for env, preset, _, (runtime, _) in runs[:3] + runs[-3:]:
        (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        kubernetes_validate.validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "check"},
                                      "spec": node["template"]["spec"]},
                                     environments[env].kubernetes_version, strict=True)


# --- the Trainer v2.3.0 CRDs, unknown fields rejected -------------------------------------------------

@functools.lru_cache(maxsize=None)
def _crd_schema(plural: str) -> dict:
    path = TRAINER / f"base-crds-trainer.kubeflow.org_{plural}.yaml"
    if not path.exists():
        pytest.skip(f"Kubeflow Trainer v2.3.0 contract not found at {path}: cannot check {plural}")
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return closed(version["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("plural, index", [("trainingruntimes", 0), ("trainjobs", 1)])
def test_runs_validate_against_the_trainer_v2_3_0_crds_with_unknown_fields_rejected(runs, plural, index):
    validator = jsonschema.Draft7Validator(_crd_schema(plural))
    for env, preset, _, objects in runs:
        errors = sorted(validator.iter_errors(objects[index]), key=lambda e: list(e.path))
        assert not errors, f"{env}/{preset.name}: {errors[0].message} at {list(errors[0].path)}"
    bad = copy.deepcopy(runs[0][3][index])
    bad["spec"]["trainr"] = {}
    assert list(validator.iter_errors(bad)), "the closed schema must reject an unknown field"


# --- why never resourcesPerNode: how v2.3.0 merges it (contract source) ---------------------------------

def _merge_source() -> str:
    if not MERGE_SOURCE.exists():
        pytest.skip(f"Kubeflow Trainer v2.3.0 merge source not found at {MERGE_SOURCE}")
    return MERGE_SOURCE.read_text()


def merge_v2_3_0(container_resources: dict, resources_per_node: dict | None) -> dict:
    """What v2.3.0 leaves in the JobSet's `node` container (a model of the code the next test reads):
    untouched without an override; with one, limits and requests merged key by key (the override
    winning), and only those two written back."""
    if resources_per_node is None:
        return container_resources
    merged = {}
    for part in ("limits", "requests"):
        if part in container_resources or part in resources_per_node:
            merged[part] = {**container_resources.get(part, {}), **resources_per_node.get(part, {})}
    return merged


def test_the_model_matches_how_v2_3_0_merges_resources_per_node():
    source = _merge_source()
    guarded = source[source.index("ResourcesPerNode != nil {"):]
    block = guarded[:guarded.index("opts = append(opts, runtime.WithPodSet(")]
    # Only when the TrainJob sets resourcesPerNode, and only on the `node` container.
    assert "if trainJob.Spec.Trainer != nil && trainJob.Spec.Trainer.ResourcesPerNode != nil {" in source
    assert "!= constants.Node" in block
    # The base is the runtime's limits and requests (claims not copied) ...
    assert re.findall(r"baseRes\.(\w+) = ", block) == ["Limits", "Requests"]
    assert "MergeResourceRequirements(\n\t\t\t\t\t\t\tbaseRes, *trainJob.Spec.Trainer.ResourcesPerNode)" in block
    # ... and only limits and requests go back into the JobSet's container.
    assert re.findall(r"applyRes\.(\w+) = ", block) == ["Limits", "Requests"]
    assert "applyPodSpec.Containers[k].Resources = applyRes" in block


def test_our_resources_reach_the_pod_whole_and_an_override_would_lose_the_efa_claim(runs):
    for env, preset, _, (runtime, trainjob) in runs:
        resources = node_pod_template(runtime)["spec"]["containers"][0]["resources"]
        assert merge_v2_3_0(resources, trainjob["spec"]["trainer"].get("resourcesPerNode")) == resources
    # The counter-example: a DRA container (EFA as a claim) with a TrainJob asking for more CPU.
    dra = {"requests": {"cpu": "96", "nvidia.com/gpu": "8", "hugepages-2Mi": "5120Mi"},
           "limits": {"nvidia.com/gpu": "8", "hugepages-2Mi": "5120Mi"}, "claims": [{"name": "efa"}]}
    merged = merge_v2_3_0(dra, {"requests": {"cpu": "100"}})
    assert "claims" not in merged and merged["requests"]["hugepages-2Mi"] == "5120Mi"


def test_every_jobset_attempt_is_the_same_run_to_the_checkpoint_lease(dev):
    """Each attempt rendezvouses under its own id, but the trainer's lease on the checkpoint folder
    must see one run: an attempt refused as "another run" would exit 2 and spend a restart."""
    from trainer.lease import Owner

    runtime, _ = render_trainjob_run(dev, "cpu-ddp", image=IMAGE)
    env_list = node_pod_template(runtime)["spec"]["containers"][0]["env"]

    def pod_env(attempt: str) -> dict:
        values = {e["name"]: e.get("value", "") for e in env_list}
        values[RESTART_ATTEMPT_ENV] = attempt
        values = {k: v.replace(f"$({RESTART_ATTEMPT_ENV})", attempt).replace("$(TRAINER_RUN_ID)", values["TRAINER_RUN_ID"])
                  for k, v in values.items()}
        # torchrun hands its workers the rendezvous id as TORCHELASTIC_RUN_ID.
        return {**values, "TORCHELASTIC_RUN_ID": values["PET_RDZV_ID"]}

    first, second = pod_env("0"), pod_env("1")
    assert first["PET_RDZV_ID"] != second["PET_RDZV_ID"]
    assert Owner.of_this_process(first).run == Owner.of_this_process(second).run
