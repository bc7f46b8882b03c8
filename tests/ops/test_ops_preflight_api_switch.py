"""preflight refuses a deploy that would switch a live cluster's trainingApi under its runs
(ops/api_switch.py). The environment's cluster comes from a moto server's EKS; the cluster itself is
the recording fake API server under the real kubernetes client."""

from __future__ import annotations

import pytest

from kube_fakes import FakeApiServer, api_client_on
from ops import api_switch
from ops.aws import clients
from ops.checks import FAIL, PASS, WARN
from ops.envconfig import load
from ops.errors import OpsError
from ops_fakes import write_context

PYTORCHJOBS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"
TRAINJOBS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainjobs.trainer.kubeflow.org"
PYTORCHJOBS = "/apis/kubeflow.org/v1/pytorchjobs"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/trainjobs"


@pytest.fixture(scope="module")
def moto_eks(moto_endpoint):
    return clients("us-west-2").eks


def environment(tmp_path, api: str):
    return load("dev", str(write_context(tmp_path, "dev", trainingApi=api)))


def deploy_cluster(eks, env) -> str:
    """The environment's cluster in moto's EKS; its endpoint."""
    eks.create_cluster(name=env.cluster_name, roleArn=f"arn:aws:iam::{env.account}:role/cluster",
                       resourcesVpcConfig={"subnetIds": []})
    return eks.describe_cluster(name=env.cluster_name)["cluster"]["endpoint"]


def cluster(endpoint: str, *, crds=(), runs=None) -> tuple[FakeApiServer, object]:
    """A fake cluster at `endpoint` serving the run CRDs `crds` and the objects `runs` (path -> items)."""
    server = FakeApiServer()
    for path in crds:
        server.on("GET", path, {"kind": "CustomResourceDefinition", "metadata": {"name": path.rsplit("/", 1)[1]}})
    for path, items in (runs or {}).items():
        server.on("GET", path, {"kind": "List", "items": items})
    client = api_client_on(server)
    client.configuration.host = endpoint.rstrip("/")  # as a kubeconfig names it
    return server, client


def run(namespace: str, name: str) -> dict:
    return {"metadata": {"namespace": namespace, "name": name}}


def test_switching_to_v2_with_pytorchjobs_left_fails_naming_the_field_the_runs_and_what_to_do(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    endpoint = deploy_cluster(moto_eks, env)
    _, client = cluster(endpoint, crds=[PYTORCHJOBS_CRD], runs={PYTORCHJOBS: [
        run("training", "llama3-8b-fsdp-84736190"), run("team-b", "cpu-ddp-1")]})
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == FAIL and "\n" not in row.reason, row.reason
    for words in ("environments.dev.trainingApi is v2", "the cluster runs v1", "2 PyTorchJob(s) exist",
                  "llama3-8b-fsdp-84736190", "team-b/cpu-ddp-1", "pytorchjobs.kubeflow.org",
                  "python -m ops stop RUN", "python -m ops delete RUN", "checkpoints on FSx are kept", "resumes",
                  "leaves the PyTorchJobs unmanaged", "the CRD pytorchjobs.kubeflow.org stays"):
        assert words in row.reason, row.reason


def test_switching_back_to_v1_with_trainjobs_left_fails(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v1")
    endpoint = deploy_cluster(moto_eks, env)
    _, client = cluster(endpoint, crds=[TRAINJOBS_CRD], runs={TRAINJOBS: [run("training", "cpu-ddp-0a1b2c3d")]})
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == FAIL
    assert "environments.dev.trainingApi is v1, the cluster runs v2" in row.reason
    assert "1 TrainJob(s) exist (cpu-ddp-0a1b2c3d)" in row.reason and "trainjobs.trainer.kubeflow.org" in row.reason
    assert "deletes the TrainJob CRD trainjobs.trainer.kubeflow.org and with it every one of them" in row.reason


def test_many_runs_are_counted_and_the_first_named(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    endpoint = deploy_cluster(moto_eks, env)
    _, client = cluster(endpoint, crds=[PYTORCHJOBS_CRD],
                        runs={PYTORCHJOBS: [run("training", f"run-{i}") for i in range(8)]})
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert "8 PyTorchJob(s) exist (run-0, run-1, run-2, run-3, run-4 and 3 more)" in row.reason


def test_a_switch_with_no_run_of_the_old_api_passes_and_says_what_goes(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    endpoint = deploy_cluster(moto_eks, env)
    server, client = cluster(endpoint, crds=[PYTORCHJOBS_CRD], runs={PYTORCHJOBS: []})
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == PASS
    assert "switching v1 -> v2: no run of v1 exists" in row.reason and "pytorchjobs.kubeflow.org" in row.reason
    # Read-only: preflight never changes the cluster.
    assert {c.method for c in server.calls} == {"GET"}


@pytest.mark.parametrize("api, crds", [("v1", [PYTORCHJOBS_CRD]), ("v2", [TRAINJOBS_CRD]), ("v2", [])])
def test_no_switch_passes_without_listing_runs(aws, moto_eks, tmp_path, api, crds):
    env = environment(tmp_path, api)
    endpoint = deploy_cluster(moto_eks, env)
    server, client = cluster(endpoint, crds=crds)
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == PASS and "nothing to switch" in row.reason
    assert not [c for c in server.calls if "customresourcedefinitions" not in c.path]


def test_before_the_first_deploy_there_is_no_cluster_to_ask(aws, moto_eks, tmp_path):
    def never():
        raise AssertionError("connected although no cluster exists")

    [row] = api_switch.rows(environment(tmp_path, "v2"), moto_eks, never)
    assert row.status == PASS and "no cluster of dev yet" in row.reason


def test_a_kubeconfig_on_another_cluster_is_not_judged(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    deploy_cluster(moto_eks, env)
    server, client = cluster("https://another-cluster.example", crds=[PYTORCHJOBS_CRD],
                             runs={PYTORCHJOBS: [run("training", "a")]})
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == WARN and "points at https://another-cluster.example" in row.reason
    assert "--context" in row.reason and not server.calls


def test_an_unreachable_cluster_warns_what_a_switch_would_delete(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    deploy_cluster(moto_eks, env)

    def unreachable():
        raise OpsError("cannot reach the Kubernetes API endpoint https://x: timed out")

    [row] = api_switch.rows(env, moto_eks, unreachable)
    assert row.status == WARN and "cannot reach" in row.reason
    assert "stop and delete every run of the other API" in row.reason


def test_a_refused_read_is_a_warning_naming_it(aws, moto_eks, tmp_path):
    env = environment(tmp_path, "v2")
    endpoint = deploy_cluster(moto_eks, env)
    server, client = cluster(endpoint)
    server.on("GET", PYTORCHJOBS_CRD, {"kind": "Status", "message": "etcd timed out"}, status=500)
    [row] = api_switch.rows(env, moto_eks, lambda: client)
    assert row.status == WARN and "read CRD pytorchjobs.kubeflow.org: HTTP 500 etcd timed out" in row.reason
