"""Preflight's guard against switching `trainingApi` on a live cluster while runs of the old API exist.

A deploy renders the run CRD of the configured API only: under v1 PyTorchJob (kubeflow.org), under v2
TrainJob (trainer.kubeflow.org; k8s/addons/training_operator_crds.py, trainer_v2_crds.py). What a switch
does to the old kind's runs differs by direction:
- v2 -> v1: the Trainer CRDs' chart leaves the template, CloudFormation deletes it, and the API server
  deletes every object of a deleted CRD ("When you delete a CustomResourceDefinition, the server will
  uninstall the RESTful API endpoint and delete all custom objects stored in it":
  https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
  #delete-a-customresourcedefinition). Every TrainJob goes, with its status and history.
- v1 -> v2: the PyTorchJob CRD leaves a chart that stays (the operator keeps MPIJob), and the kubectl
  handler's `apply --prune` never prunes CRDs, so the CRD and its runs stay, but the operator no
  longer runs PyTorchJobs: they are left unmanaged (no restarts, no status) until deleted by hand.
Checkpoints on FSx stay either way. So before a deploy, the cluster's current API is read from the run
CRDs it serves, and a switch with runs of the old kind left is a failing row. The same check runs
inside CloudFormation for the pipeline path (cdk_constructs/training_drain.py).

The cluster is reached through the kubeconfig (--kubeconfig, --context, as `ops doctor`), and only
after its server is checked to be the environment's cluster endpoint: a current-context left on
another environment's cluster would judge the wrong runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from config import Environment
from k8s.pods import pytorchjob, trainjob
from ops.aws import api_failure_types, explain
from ops.checks import FAIL, PASS, WARN, Check
from ops.errors import OpsError
from ops.kube_reads import READ_TIMEOUT_S, list_objects, read

ROW = "trainingApi"
RUNS_NAMED = 5


@dataclass(frozen=True)
class RunKind:
    api: str  # the trainingApi value whose runs these are
    group: str
    version: str
    kind: str

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}"


def _kind(api: str, api_version: str, kind: str) -> RunKind:
    group, version = api_version.split("/")
    return RunKind(api, group, version, kind)


RUN_KINDS = (_kind("v1", pytorchjob.API_VERSION, pytorchjob.KIND), _kind("v2", trainjob.API_VERSION, trainjob.KIND))


def rows(env: Environment, eks: Any, connect: Callable[[], Any]) -> list[Check]:
    """One row: whether this deploy switches the cluster's training API, and whether runs would be
    lost by it. `connect` builds the kubernetes ApiClient (ops.kube.api_client); it is called only
    when the environment's cluster exists."""
    from ops.kubeconfig import NoCluster, find_cluster

    try:
        cluster = find_cluster(eks, env)
    except NoCluster:
        return [Check(ROW, PASS, f"{env.training_api}: no cluster of {env.name} yet, so no runs to lose")]
    except OpsError as err:
        return [Check(ROW, WARN, f"could not tell which cluster is {env.name}'s ({err}); {_unchecked(env)}")]
    except api_failure_types() as err:
        return [Check(ROW, WARN, f"could not look up the cluster: {explain(err)}; {_unchecked(env)}")]
    try:
        return [switch_row(env, connect(), cluster.get("endpoint") or "")]
    except OpsError as err:
        return [Check(ROW, WARN, f"could not read the cluster ({err}); {_unchecked(env)}")]


def _unchecked(env: Environment) -> str:
    return (f"if this deploy changes trainingApi to {env.training_api}, first stop and delete every run of "
            "the other API (`python -m ops status`), or the deploy deletes them")


def switch_row(env: Environment, api_client: Any, endpoint: str) -> Check:
    """The row for a reachable cluster whose API endpoint is `endpoint` (EKS DescribeCluster)."""
    host = api_client.configuration.host
    if endpoint and _same_endpoint(host, endpoint) is False:
        return Check(ROW, WARN, f"the kubeconfig context points at {host}, not {env.cluster_name} ({endpoint}); "
                                f"pass --context (or run `python -m ops kubeconfig --env {env.name}`); "
                                f"{_unchecked(env)}")
    served = [k for k in RUN_KINDS if _serves(api_client, k)]
    wanted = next(k for k in RUN_KINDS if k.api == env.training_api)
    leaving = [k for k in served if k.api != env.training_api]
    if not leaving:
        now = "serves no run CRD yet" if not served else f"runs {wanted.api} ({wanted.crd})"
        return Check(ROW, PASS, f"{env.training_api}: the cluster {now}; nothing to switch")
    problems, removed = [], []
    for kind in leaving:
        runs = _runs(api_client, kind)
        if runs:
            shown = ", ".join(runs[:RUNS_NAMED]) + (f" and {len(runs) - RUNS_NAMED} more" if len(runs) > RUNS_NAMED else "")
            problems.append(f"{len(runs)} {kind.kind}(s) exist ({shown})")
        removed.append(f"deletes the {kind.kind} CRD {kind.crd} and with it every one of them" if kind.api == "v2"
                       else f"leaves the {kind.kind}s unmanaged (the operator stops running them; the CRD "
                            f"{kind.crd} stays)")
    field = f"environments.{env.name}.trainingApi"
    old = "/".join(k.api for k in leaving)
    if problems:
        return Check(ROW, FAIL, f"{field} is {env.training_api}, the cluster runs {old}, and {'; '.join(problems)}: "
                                f"the deploy {'; it '.join(removed)}. Stop and "
                                f"delete them first (`python -m ops stop RUN`, then `python -m ops delete RUN`) or keep "
                                f"trainingApi {old}; their checkpoints on FSx are kept, so each preset's new run "
                                f"resumes from them")
    return Check(ROW, PASS, f"switching {old} -> {env.training_api}: no run of {old} exists "
                            f"({', '.join(k.crd for k in leaving)})")


def _same_endpoint(host: str, endpoint: str) -> bool:
    def norm(url: str) -> str:
        return url.strip().rstrip("/").lower()
    return norm(host) == norm(endpoint)


def _serves(api_client: Any, kind: RunKind) -> bool:
    from kubernetes.client import ApiextensionsV1Api

    # Only whether it exists: the answer is not decoded into the client's model.
    return read(lambda: ApiextensionsV1Api(api_client).read_custom_resource_definition(
        kind.crd, _preload_content=False, _request_timeout=READ_TIMEOUT_S), f"read CRD {kind.crd}") is not None


def _runs(api_client: Any, kind: RunKind) -> list[str]:
    """Every object of the kind in every namespace (the CRD's deletion takes them all), as
    `name` in the training namespace and `namespace/name` elsewhere."""
    from config.kubernetes import TRAINING_NAMESPACE

    names = []
    for item in list_objects(api_client, kind.group, kind.version, kind.plural, f"list the {kind.kind}s"):
        meta = item.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name", "?")
        names.append(name if namespace == TRAINING_NAMESPACE else f"{namespace}/{name}")
    return sorted(names)
