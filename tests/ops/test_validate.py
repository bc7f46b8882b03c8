"""Post-deploy validation: which checks run for which Ready nodes, and the verdict it returns.

The objects come from k8s/pods/validation.py as dist/ and the runner carry them; the cluster is a
stand-in `kubectl` on PATH that answers from a JSON state file and records every call (there is no
cluster here). Under trainingApi v2 the smoke run is a TrainingRuntime and its TrainJob; those tests
run the runner's copy of the code (ops and config only) with the system python3, as CodeBuild does."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from config.kubernetes import NODEGROUP_LABEL
from ops import envconfig
from ops.errors import OpsError
from ops.validate import checks_from_objects, plan, ready_nodes_by_group
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def dev_objects():
    from k8s.pods.validation import validation_objects

    return validation_objects(envconfig.load("dev"))


@pytest.fixture(scope="module")
def v2_objects():
    from k8s.pods.validation import validation_objects

    return validation_objects(dataclasses.replace(envconfig.load("dev"), training_api="v2"))


@pytest.fixture(scope="module")
def checks(dev_objects):
    return {(c.kind, c.nodegroup): c for c in checks_from_objects(dev_objects)}


def test_every_gpu_group_gets_a_one_node_check_efa_groups_a_two_node_nccl_test_and_cpu_the_smoke_run(checks):
    assert sorted(checks) == [("Job", "p4d"), ("Job", "p5"), ("MPIJob", "p4d"), ("MPIJob", "p5"), ("PyTorchJob", "cpu")]
    assert checks["Job", "p5"].nodes_needed == 1
    assert checks["MPIJob", "p5"].nodes_needed == 2
    assert checks["PyTorchJob", "cpu"].nodes_needed == 2
    assert checks["PyTorchJob", "cpu"].placeholders() == ["TRAINER_IMAGE_CPU"]


def test_groups_without_enough_ready_nodes_are_skipped_with_a_reason(checks):
    runnable, skipped = plan(list(checks.values()), {"p5": ["a", "b"], "p4d": ["c"]}, {"TRAINER_IMAGE_CPU": "img:1"})
    assert {(c.kind, c.nodegroup) for c in runnable} == {("Job", "p5"), ("MPIJob", "p5"), ("Job", "p4d")}
    assert len(skipped) == 2
    assert any("node group p4d has 1 Ready node(s), needs 2" in r for r in skipped)
    assert any("node group cpu has 0 Ready node(s), needs 2" in r for r in skipped), \
        "prod's CPU group at desiredSize 0: the smoke run is skipped, never left Pending"


def test_the_smoke_run_takes_its_image_from_the_environment_or_is_skipped_saying_so(checks):
    smoke = checks["PyTorchJob", "cpu"]
    [ready], _ = plan([smoke], {"cpu": ["a", "b"]}, {"TRAINER_IMAGE_CPU": "registry/trainer:cpu-1"})
    container = ready.manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry/trainer:cpu-1"
    assert "${" not in json.dumps(ready.manifest).replace("$(", "")
    runnable, [reason] = plan([smoke], {"cpu": ["a", "b"]}, {})
    assert not runnable and "TRAINER_IMAGE_CPU not set" in reason


@pytest.mark.parametrize("value", ['a"b:1', "a\\b:1", "img:1\n"])
def test_a_placeholder_value_reaches_the_object_as_it_was_exported(checks, value):
    """The values are filled into the objects' JSON text: 'a"b:1' broke it (a crash report)."""
    [ready], _ = plan([checks["PyTorchJob", "cpu"]], {"cpu": ["a", "b"]}, {"TRAINER_IMAGE_CPU": value})
    assert ready.manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == value


def test_only_ready_labelled_nodes_count():
    def node(name, group, ready):
        return {"metadata": {"name": name, "labels": {NODEGROUP_LABEL: group}},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    nodes = {"items": [node("b", "p5", True), node("c", "p5", False), node("a", "p5", True), node("d", "p4d", True),
                       {"metadata": {}, "status": {}}]}
    assert ready_nodes_by_group(nodes) == {"p5": ["a", "b"], "p4d": ["d"]}


FAKE_KUBECTL = textwrap.dedent("""\
    #!{python}
    import json, os, sys
    state_path = os.environ["FAKE_CLUSTER"]
    state = json.load(open(state_path))
    args = sys.argv[1:]
    state["calls"].append(" ".join(args))
    json.dump(state, open(state_path, "w"))
    if args[:2] == ["get", "nodes"]:
        print(json.dumps({{"items": [
            {{"metadata": {{"name": f"{{g}}-node-{{i}}", "labels": {{"{label}": g}}}},
              "status": {{"conditions": [{{"type": "Ready", "status": "True"}}]}}}}
            for g, n in state["nodes"].items() for i in range(n)]}}))
    elif args[0] == "get":
        name = args[2]
        outcome = state["outcomes"].get(name, "Complete")
        print(json.dumps({{"status": {{"conditions": [{{"type": outcome, "status": "True"}}]}}}}))
    elif args[0] == "logs":
        selector = dict(kv.split("=", 1) for kv in args[args.index("-l") + 1].split(","))
        job = selector.get("training.kubeflow.org/job-name") or selector.get("jobset.sigs.k8s.io/jobset-name", "")
        print(state["logs"].get(job, "PASS"))
    elif args[0] == "create":
        state["created"].append(json.loads(sys.stdin.read()))
        json.dump(state, open(state_path, "w"))
""")
NCCL_LOGS = Path(__file__).parent / "fixtures" / "nccl"


# The runner's interpreter: CodeBuild's python3 with PyYAML and nothing else of ours installed.
SYSTEM_PYTHON = "/usr/bin/python3"


def _system_python() -> str:
    has_yaml = os.path.exists(SYSTEM_PYTHON) and subprocess.run(
        [SYSTEM_PYTHON, "-c", "import yaml"], capture_output=True, timeout=60).returncode == 0
    return SYSTEM_PYTHON if has_yaml else sys.executable


def fake_cluster(tmp_path: Path, objects: list[dict], *, python: str = sys.executable, cwd: Path = REPO_ROOT):
    """run(nodes, outcomes, environ, logs) -> (`ops validate` done, kubectl calls) against the fake
    kubectl, with `objects` as dist/<env>/validation/ holds them; `run.created` the objects created."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable, label=NODEGROUP_LABEL))
    kubectl.chmod(0o755)
    dist = tmp_path / "dist"
    (dist / "validation").mkdir(parents=True)
    (dist / "validation" / "cluster-validation.yaml").write_text(yaml.safe_dump_all(objects))
    state = tmp_path / "cluster.json"

    def run(nodes: dict, outcomes: dict | None = None, environ: dict | None = None, logs: dict | None = None):
        healthy = (NCCL_LOGS / "p5-pass.log").read_text()
        logs = {**{f"nccl-allreduce-{g}-{i}": healthy for g in ("p4d", "p5") for i in range(8)}, **(logs or {})}
        state.write_text(json.dumps({"nodes": nodes, "outcomes": outcomes or {}, "logs": logs,
                                     "calls": [], "created": []}))
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_CLUSTER": str(state), **(environ or {})}
        if cwd != REPO_ROOT:
            env.pop("PYTHONPATH", None)
        done = subprocess.run([python, "-m", "ops", "validate", "--dist", str(dist), "--timeout", "60"],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        recorded = json.loads(state.read_text())
        run.created = recorded["created"]
        return done, recorded["calls"]
    return run


@pytest.fixture
def cluster(tmp_path, dev_objects):
    return fake_cluster(tmp_path, dev_objects)


@pytest.fixture
def v2_cluster(tmp_path, v2_objects):
    """A trainingApi v2 environment's validation, run as the runner runs it: from a copy of only the
    sources the runner carries (stacks/validation.py RUNNER_SOURCES), with the system python3."""
    from stacks.validation import RUNNER_SOURCES

    source = tmp_path / "runner"
    for package in RUNNER_SOURCES:
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    return fake_cluster(tmp_path, v2_objects, python=_system_python(), cwd=source)


def test_a_stage_without_nodes_passes_with_every_check_skipped(cluster):
    done, calls = cluster({"system": 2})
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("skipped:") == 5
    assert not any(c.startswith("create") for c in calls)


def test_checks_rerun_and_a_failed_check_fails_the_stage(cluster, checks):
    gpu_check = checks["Job", "p5"].name
    done, calls = cluster({"p5": 2}, {gpu_check: "Failed"})
    assert done.returncode == 1
    assert f"Job {gpu_check} on p5: failed" in done.stdout
    # A check that passed on an earlier deploy is deleted and created again, in that order.
    deleted = calls.index(f"delete job {gpu_check} -n training --ignore-not-found --wait=true")
    assert calls[deleted + 1] == "create -f -"


def test_all_checks_passing_passes_and_each_is_created_as_rendered_to_run(cluster, dev_objects):
    """No deploy applies these objects, so none is suspended: validate creates each to run."""
    done, calls = cluster({"p5": 2, "p4d": 2, "cpu": 2}, environ={"TRAINER_IMAGE_CPU": "registry/trainer:cpu-1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("validation finished: 5 passed, 0 failed, 0 skipped")
    names = [o["metadata"]["name"] for o in cluster.created]
    assert names == ["gpu-check-p4d-" + names[0].rsplit("-", 1)[1], names[1], "nccl-allreduce-p4d-0",
                     "nccl-allreduce-p5-0", "validation-cpu-ddp"]
    for obj in cluster.created:
        assert "suspend" not in (obj["spec"].get("runPolicy", {}) if obj["kind"] != "Job" else obj["spec"])
    assert "delete pytorchjob validation-cpu-ddp -n training --ignore-not-found --wait=true" in calls


def test_the_nccl_sweep_pins_a_test_to_each_pair_and_names_the_slow_node(cluster):
    """Four p5 nodes: two rounds of two disjoint pairs; node 2 is slow in both of its pairs."""
    slow = (NCCL_LOGS / "p5-fail-sockets.log").read_text()
    done, calls = cluster({"p5": 4}, logs={"nccl-allreduce-p5-1": slow, "nccl-allreduce-p5-2": slow})
    assert done.returncode == 1, done.stdout + done.stderr
    pairs = {o["metadata"]["name"]: o["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]
             ["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0]
             ["values"] for o in cluster.created if o["kind"] == "MPIJob"}
    assert pairs == {"nccl-allreduce-p5-0": ["p5-node-0", "p5-node-1"], "nccl-allreduce-p5-1": ["p5-node-2", "p5-node-3"],
                     "nccl-allreduce-p5-2": ["p5-node-1", "p5-node-2"], "nccl-allreduce-p5-3": ["p5-node-3", "p5-node-0"]}
    [line] = [l for l in done.stdout.splitlines() if l.startswith("NCCL sweep on p5")]
    assert line.startswith("NCCL sweep on p5 (4 nodes, p5.48xlarge): failed: slow node p5-node-2 (every pair with it failed)")
    # The last sweep's pairs go first, then the pairs of the first round are created.
    cleared = calls.index("delete mpijob -n training -l eks-distributed-training.io/nccl-group=p5 --ignore-not-found "
                          "--wait=true")
    assert calls[cleared + 1] == "delete mpijob nccl-allreduce-p5 -n training --ignore-not-found --wait=true"
    assert calls[cleared + 2:cleared + 4] == ["create -f -", "create -f -"]
    assert any(c.startswith("logs -n training -l training.kubeflow.org/job-name=nccl-allreduce-p5-3,"
                            "training.kubeflow.org/replica-type=launcher --tail=-1") for c in calls)


def test_a_pair_whose_mpijob_failed_fails_even_with_a_good_table(cluster):
    done, _ = cluster({"p5": 2}, {"nccl-allreduce-p5-0": "Failed"})
    assert done.returncode == 1
    assert "nccl-allreduce-p5-0 p5-node-0<->p5-node-1: FAIL: MPIJob nccl-allreduce-p5-0 failed; 441.3 GB/s" in done.stdout


def test_missing_dist_folder_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(tmp_path / "nope")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--dist: no cluster-validation YAML" in done.stderr


@pytest.mark.parametrize("obj", [
    {"kind": "Job", "metadata": {"name": "gpu-check"}},
    {"kind": "PyTorchJob", "metadata": {"name": "smoke"}, "spec": []},
    {"kind": "MPIJob", "metadata": {"name": "nccl"}, "spec": {"mpiReplicaSpecs": {"Worker": {"template": None}}}},
    {"kind": "Job", "metadata": ["gpu-check"], "spec": {"template": {"spec": {"nodeSelector": {NODEGROUP_LABEL: "p5"}}}}},
])
def test_a_validation_object_not_of_the_shape_make_synth_writes_is_one_line_naming_dist(tmp_path, obj):
    """A hand-edited or truncated dist/ file: the checks indexed into it and `ops validate` reported
    a bug in ops (KeyError: 'spec')."""
    from ops.validate import load_checks

    (tmp_path / "cluster-validation.yaml").write_text(yaml.safe_dump(obj))
    with pytest.raises(OpsError) as err:
        load_checks(tmp_path)
    assert str(err.value).startswith(f"--dist: {obj['kind']} ") and "\n" not in str(err.value)
    assert "is not of the shape make synth writes" in str(err.value)


def test_kubectl_missing_is_one_line_and_exit_2(tmp_path, dev_objects):
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "90-cluster-validation.yaml").write_text(yaml.safe_dump_all(dev_objects))
    env = {**os.environ, "PATH": str(tmp_path / "empty-bin")}
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(dist)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: kubectl not found on PATH; install it and run `aws eks update-kubeconfig` first"]


def test_a_non_positive_timeout_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(tmp_path), "--timeout", "0"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--timeout" in done.stderr


def test_prods_smoke_run_is_neither_deployed_nor_left_pending_on_its_empty_cpu_group():
    """prod's CPU group has desiredSize 0 and no autoscaler: an unsuspended cpu-ddp deployed there
    sat Pending forever. Now no chart holds it, and validation skips it until the group has nodes."""
    import cdk8s

    from k8s.charts import EnvironmentCharts
    from k8s.pods.validation import validation_objects
    from k8s.addons import ClusterValues

    prod = envconfig.load("prod")
    assert prod.nodegroup("cpu").desired_size == 0
    charts = EnvironmentCharts(prod, ClusterValues.placeholders(), app=cdk8s.App())
    assert not [o for docs in charts.manifests().values() for o in docs if o["kind"] == "PyTorchJob"]
    checks = checks_from_objects(validation_objects(prod))
    ready = {g.name: [f"{g.name}-{i}" for i in range(g.desired_size)] for g in prod.training_nodegroups}
    runnable, skipped = plan(checks, ready, {"TRAINER_IMAGE_CPU": "img:1"})
    assert not runnable
    assert "PyTorchJob validation-cpu-ddp: node group cpu has 0 Ready node(s), needs 2" in skipped


def run_twice(smoke, monkeypatch) -> list[dict]:
    """What two validations in a row, stamped an hour apart, create for `smoke` (the cluster passes it)."""
    from ops import validate

    created = []
    monkeypatch.setattr(validate, "kubectl", lambda *args, stdin=None: created.append(json.loads(stdin)) if stdin else "")
    monkeypatch.setattr(validate, "_await", lambda kind, names, namespace, timeout_s: ["passed"])
    stamps = iter(["20261126-010000", "20261126-020000"])
    monkeypatch.setattr(validate, "stamp", lambda: next(stamps))
    assert validate.run_check(smoke, 60) and validate.run_check(smoke, 60)
    return created


def test_each_validation_gives_the_smoke_run_a_snapshot_and_rendezvous_of_its_own(checks, monkeypatch):
    """dist/ names one fixed snapshot file: a smoke run that found the last validation's snapshot
    resumed at its final epoch and exited 0 without training a step, so it proved nothing."""
    from ops.validate import flag_value, worker_container

    smoke = checks["PyTorchJob", "cpu"]
    dist_snapshot = flag_value(worker_container(smoke.manifest)["command"], "--snapshot-path")
    created = run_twice(smoke, monkeypatch)
    snapshots = [flag_value(worker_container(job)["command"], "--snapshot-path") for job in created]
    assert snapshots == [dist_snapshot.replace("snapshot.pt", "run-20261126-010000/snapshot.pt"),
                         dist_snapshot.replace("snapshot.pt", "run-20261126-020000/snapshot.pt")]
    assert len({job["spec"]["elasticPolicy"]["rdzvId"] for job in created}) == 2
    # Nothing else of the run changes, and dist's object is left as it was.
    strip = lambda job: [a for a in worker_container(job)["command"] if "snapshot.pt" not in a]  # noqa: E731
    assert strip(created[0]) == strip(created[1]) == strip(smoke.manifest)
    assert flag_value(worker_container(smoke.manifest)["command"], "--snapshot-path") == dist_snapshot


# --- trainingApi v2: the smoke run is a TrainingRuntime and its TrainJob -----------------------------

def test_a_v2_smoke_run_is_its_runtime_and_trainjob_found_on_the_cpu_group(v2_objects):
    [smoke] = [c for c in checks_from_objects(v2_objects) if c.kind in ("PyTorchJob", "TrainJob")]
    assert (smoke.kind, smoke.name, smoke.nodegroup, smoke.nodes_needed) == ("TrainJob", "validation-cpu-ddp", "cpu", 2)
    assert [o["kind"] for o in smoke.objects()] == ["TrainingRuntime", "TrainJob"]
    assert smoke.placeholders() == ["TRAINER_IMAGE_CPU"], "the image lives in the runtime"
    [ready], _ = plan([smoke], {"cpu": ["a", "b"]}, {"TRAINER_IMAGE_CPU": "registry/trainer:cpu-1"})
    assert "${" not in json.dumps(ready.objects()).replace("$(", "")


def test_a_v2_trainjob_whose_runtime_is_not_in_dist_is_one_line_and_exit_2(tmp_path, v2_objects):
    dist = tmp_path / "validation"
    dist.mkdir()
    (dist / "cluster-validation.yaml").write_text(
        yaml.safe_dump_all([o for o in v2_objects if o["kind"] != "TrainingRuntime"]))
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "--dist: TrainJob validation-cpu-ddp uses TrainingRuntime validation-cpu-ddp, which is not beside it" in line


def test_under_v2_the_runner_creates_the_runtime_then_the_trainjob_and_reads_the_trainjobs_pods(v2_cluster):
    done, calls = v2_cluster({"p5": 2, "p4d": 2, "cpu": 2}, environ={"TRAINER_IMAGE_CPU": "registry/trainer:cpu-1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("validation finished: 5 passed, 0 failed, 0 skipped")
    assert "TrainJob validation-cpu-ddp on cpu: passed" in done.stdout
    smoke = [c for c in calls if "validation-cpu-ddp" in c or c == "create -f -"]
    assert [c for c in calls if "validation-cpu-ddp" in c] == [
        # The last validation's run goes, the TrainJob first: the runtime is in use until it has gone.
        "delete trainjob validation-cpu-ddp -n training --ignore-not-found --wait=true",
        "delete trainingruntime validation-cpu-ddp -n training --ignore-not-found --wait=true",
        "get trainjob validation-cpu-ddp -n training -o json",
        "logs -n training -l jobset.sigs.k8s.io/jobset-name=validation-cpu-ddp --tail=50 --all-containers",
    ], smoke
    runtime, trainjob = v2_cluster.created[-2:]
    assert (runtime["kind"], trainjob["kind"]) == ("TrainingRuntime", "TrainJob")
    assert trainjob["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"] == "validation-cpu-ddp"
    assert not [o for o in v2_cluster.created if o["kind"] == "PyTorchJob"]
    assert not any("pytorchjob" in c for c in calls), "a v2 cluster has no PyTorchJob kind"


def test_under_v2_a_failed_trainjob_fails_the_stage(v2_cluster):
    done, _ = v2_cluster({"cpu": 2}, {"validation-cpu-ddp": "Failed"}, environ={"TRAINER_IMAGE_CPU": "img:1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TrainJob validation-cpu-ddp on cpu: failed" in done.stdout


def test_each_v2_validation_gives_the_smoke_run_a_snapshot_and_run_id_of_its_own(v2_objects, monkeypatch):
    """As under v1. A TrainJob's pods rendezvous under TRAINER_RUN_ID and JobSet's restart attempt, so
    a fresh run id is a fresh rendezvous, and every restart of one validation keeps it (the trainer's
    checkpoint lease takes the folder over for the same run id)."""
    from config.kubernetes import RUN_ID_ENV
    from ops.validate import flag_value, worker_container

    [smoke] = [c for c in checks_from_objects(v2_objects) if c.kind == "TrainJob"]
    created = run_twice(smoke, monkeypatch)
    runtimes = [o for o in created if o["kind"] == "TrainingRuntime"]
    assert [o["kind"] for o in created] == ["TrainingRuntime", "TrainJob"] * 2
    snapshots = [flag_value(worker_container(r)["command"], "--snapshot-path") for r in runtimes]
    assert snapshots == [f"/fsx/checkpoints/.validation/cpu-ddp/run-{s}/snapshot.pt"
                         for s in ("20261126-010000", "20261126-020000")]
    env = [{e["name"]: e.get("value") for e in worker_container(r)["env"]} for r in runtimes]
    assert [e[RUN_ID_ENV] for e in env] == ["validation-cpu-ddp-run-20261126-010000",
                                            "validation-cpu-ddp-run-20261126-020000"]
    assert env[0]["PET_RDZV_ID"] == f"$({RUN_ID_ENV})-$(JOBSET_RESTART_ATTEMPT)", "the attempt keeps its own round"
    # The TrainJob is dist's, and dist's runtime is left as it was.
    assert created[1] == created[3] == smoke.manifest
    assert flag_value(worker_container(smoke.runtime)["command"], "--snapshot-path") == \
        "/fsx/checkpoints/.validation/cpu-ddp/snapshot.pt"


def test_the_runner_reads_trainer_names_it_cannot_import():
    """ops/validate.py runs without the k8s package: its copies of k8s/pods/trainjob.py's names."""
    from k8s.pods import trainjob
    from ops import validate

    assert validate.TRAINER_NODE == trainjob.NODE
    assert validate.POD_LABEL["TrainJob"] == trainjob.JOBSET_NAME_LABEL
