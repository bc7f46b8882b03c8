"""PyTorchJobs through the Kubeflow Training Operator's own SDK (kubeflow-training).

The manifest comes from the k8s chart code, so `submit` creates exactly what the chart renders;
this module only turns it into the SDK's model and calls TrainingClient.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import stat
import subprocess
import types
from dataclasses import dataclass
from typing import Any, Callable

from config import Environment
from config.environment import CLUSTER_NAME_SUFFIX
from config.kubernetes import EFA_CHECK_FAILED, EFA_CHECK_PASSED, TRAINING_NAMESPACE
from config.paths import TEXT_LIMIT_BYTES, PathProblem, exists, file_status, read_yaml
from ops.errors import OpsError

PYTORCHJOB_MODEL = "KubeflowOrgV1PyTorchJob"
DEFAULT_KUBECONFIG = "~/.kube/config"  # the kubernetes client's, without --kubeconfig or KUBECONFIG
# Condition types the operator sets on a job.
_PHASES = ("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


def training_client(kubeconfig: str | None = None, context: str | None = None,
                    namespace: str = TRAINING_NAMESPACE, environment: Environment | None = None) -> Any:
    """With `environment` (the command's --env), the context must be that environment's cluster
    (check_cluster)."""
    check_kubeconfig(kubeconfig)
    if kubeconfig:
        _refuse_a_pipe_at_the_default_kubeconfig()
    from kubeflow.training import TrainingClient

    check_cluster(environment, kubeconfig, context)
    client = _from_kubeconfig(lambda: TrainingClient(config_file=kubeconfig, context=context, namespace=namespace),
                              kubeconfig)
    return guard(client)


def api_client(kubeconfig: str | None = None, context: str | None = None,
               environment: Environment | None = None) -> Any:
    """A plain kubernetes ApiClient (for the core and apps APIs), with the same one-line errors and
    the same check of `environment`'s cluster."""
    from kubernetes.config import new_client_from_config

    check_kubeconfig(kubeconfig)
    check_cluster(environment, kubeconfig, context)
    return guard(_from_kubeconfig(lambda: new_client_from_config(config_file=kubeconfig, context=context), kubeconfig))


def check_kubeconfig(kubeconfig: str | None, *, allow_empty: bool = False) -> None:
    """--kubeconfig (or each file of $KUBECONFIG) that exists must be a YAML mapping, or empty with
    `allow_empty` (a file `aws eks update-kubeconfig` fills). The client raises something different
    for a directory, a binary file and a YAML list, and not always an error it documents; here each
    is one line naming where the file came from."""
    for name, path in [("--kubeconfig", kubeconfig)] if kubeconfig else _default_kubeconfigs():
        try:
            if not exists(path, follow_symlinks=False):
                continue  # a missing one is the client's "no usable kubeconfig", which says how to make one
            documents = read_yaml(path)
        except PathProblem as problem:
            raise OpsError(f"{name}: {problem}") from None
        # read_yaml gives every document of the file: none for an empty one (or one of comments
        # only), None for each empty document.
        if all(document is None for document in documents):
            if allow_empty:
                continue
            raise OpsError(f"{name}: {path} is empty, no kubeconfig in it; `python -m ops kubeconfig --env NAME` "
                           "writes one")
        if len(documents) > 1:
            raise OpsError(f"{name}: {path} holds {len(documents)} YAML documents; a kubeconfig is one YAML mapping")
        if not isinstance(documents[0], dict):
            raise OpsError(f"{name}: {path} must hold a kubeconfig (a YAML mapping), got {type(documents[0]).__name__}")
        _check_token_files(name, path, documents[0])


def _default_kubeconfigs() -> list[tuple[str, str]]:
    """(name, path) of each file the client reads without --kubeconfig: KUBECONFIG's, else ~/.kube/config."""
    return [("KUBECONFIG", p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p] or \
        [(DEFAULT_KUBECONFIG, os.path.expanduser(DEFAULT_KUBECONFIG))]


def _refuse_a_pipe_at_the_default_kubeconfig() -> None:
    """Importing the Kubeflow SDK reads the default kubeconfig whatever --kubeconfig says (for
    TrainingClient's default namespace), and waits for ever on a named pipe there. Whatever else is
    wrong with that file the SDK passes over, so only a pipe is refused."""
    for name, path in _default_kubeconfigs():
        try:
            pipe = stat.S_ISFIFO(os.stat(path).st_mode)
        except OSError:
            continue  # the SDK falls back to its default namespace
        if pipe:
            raise OpsError(f"{name}: {path} is a named pipe, expected a regular file")


def _check_token_files(name: str, path: str, kubeconfig: dict) -> None:
    """The client reads a user's tokenFile whole with a plain open().read(): a named pipe there
    waits for ever, and /dev/zero fills the memory. A missing or unreadable one is the client's to
    report (one line through _from_kubeconfig); a token given inline wins over the file."""
    users = kubeconfig.get("users")
    for i, entry in enumerate(users if isinstance(users, list) else []):
        user = entry.get("user") if isinstance(entry, dict) else None
        token_file = user.get("tokenFile") if isinstance(user, dict) and "token" not in user else None
        if not isinstance(token_file, str) or not token_file:
            continue
        token_path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), token_file))
        try:
            found = file_status(token_path)
            if found is not None and found.st_size > TEXT_LIMIT_BYTES:
                raise PathProblem(f"{token_path} is larger than {TEXT_LIMIT_BYTES:,} bytes")
        except PathProblem as problem:
            raise OpsError(f"{name}: {path}: users[{i}].user.tokenFile: {problem}") from None


# The cluster entry `aws eks update-kubeconfig` (so `ops kubeconfig`) writes, and its context's
# default name: the cluster's ARN.
EKS_CLUSTER_ARN = re.compile(r"arn:aws[a-z-]*:eks:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):cluster/(?P<name>.+)")


def check_cluster(environment: Environment | None, kubeconfig: str | None, context: str | None) -> None:
    """With --env, a context (--context, else the current one) on the EKS cluster of another account,
    region or name is refused before any request: the environment's run would be rendered for one
    cluster and created on another, resuming from that cluster's checkpoints of the same preset.
    The cluster is known offline only where the context names it by its EKS ARN, as the AWS CLI
    writes it; a context whose cluster is named otherwise (an entry renamed by hand, a kind cluster)
    is taken as it is. In the environment's own account and region, another name is refused where
    it is one of ours (<env>-training: another environment's cluster); a cluster an earlier release
    created under a generated name (ops/kubeconfig.py finds those by their stack tag) is taken as
    it is. A kubeconfig the client cannot use is left to the client to report."""
    if environment is None:
        return
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import list_kube_config_contexts

    try:
        contexts, current = list_kube_config_contexts(kubeconfig)
        chosen = context or current["name"]
        [cluster] = [c["context"]["cluster"] for c in contexts if c["name"] == chosen]
    except (ConfigException, OSError, TypeError, KeyError, AttributeError, ValueError, IndexError):
        return
    arn = EKS_CLUSTER_ARN.fullmatch(cluster) if isinstance(cluster, str) else None
    if arn is None or ((arn["account"], arn["region"]) == (environment.account, environment.region)
                       and (arn["name"] == environment.cluster_name or not arn["name"].endswith(CLUSTER_NAME_SUFFIX))):
        return
    chosen_by = "--context" if context else "the current context"
    raise OpsError(f"--env {environment.name}: {chosen_by} {chosen!r} points at cluster {cluster}, not "
                   f"{environment.name}'s cluster {environment.cluster_name} (account {environment.account}, "
                   f"{environment.region}); run `python -m ops kubeconfig --env {environment.name}` or pass "
                   f"--context of {environment.name}'s cluster")


# The kubernetes client runs a kubeconfig's exec credential command (`aws eks get-token`, one STS
# call) and waits for it without a bound (kubernetes/config/exec_provider.py, ExecProvider.run:
# communicate()). Long enough for an interactive plugin's prompt (an MFA code).
CREDENTIAL_TIMEOUT_S = 120.0


def _credential_command(argv, **popen) -> subprocess.Popen:
    """ExecProvider's Popen: the command in a process group of its own that dies with ops
    (ops.proc.start), whose communicate() gives up after CREDENTIAL_TIMEOUT_S, ends the group and
    raises what the client logs for a failed command ("exec: ...")."""
    from kubernetes.config.config_exception import ConfigException

    from ops import proc

    child = proc.start(argv, **popen)
    wait = child.communicate

    def communicate(input=None, timeout=None):
        try:
            return wait(input, timeout=CREDENTIAL_TIMEOUT_S if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            proc.stop(child)
            raise ConfigException(f"exec: {argv[0]} did not answer within {CREDENTIAL_TIMEOUT_S:g} s") from None

    child.communicate = communicate
    return child


def _bound_credential_commands() -> None:
    from kubernetes.config import exec_provider

    if exec_provider.subprocess is subprocess:  # the module's only uses: Popen and PIPE
        exec_provider.subprocess = types.SimpleNamespace(Popen=_credential_command, PIPE=subprocess.PIPE)


def _from_kubeconfig(make: Callable[[], Any], kubeconfig: str | None) -> Any:
    from kubernetes.config.config_exception import ConfigException

    _bound_credential_commands()

    # The kubernetes client logs a failed credential command (`aws eks get-token`) through the root
    # logger and carries on without a token; that call would also turn on logging for every
    # library (urllib3's retry warnings). Catch the record and say what it means instead.
    records = _Records()
    logging.getLogger().addHandler(records)
    try:
        client = make()
    # The loader indexes into the YAML as it finds it: a kubeconfig of the wrong shape (clusters: 3)
    # fails with whatever Python raised on the way, not only ConfigException.
    except (ConfigException, OSError, TypeError, KeyError, AttributeError, ValueError, IndexError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        first = first if isinstance(err, (ConfigException, OSError)) else f"{type(err).__name__}: {first}"
        where = f" in --kubeconfig {kubeconfig}" if kubeconfig else ""
        raise OpsError(f"no usable kubeconfig{where} ({first}); run `python -m ops kubeconfig --env NAME` first") from None
    finally:
        logging.getLogger().removeHandler(records)
    failed = [m for m in records.messages if m.startswith("exec:")]
    if failed and "did not answer within" in failed[0]:
        raise OpsError(f"the kubeconfig's credential command {failed[0].removeprefix('exec: ')}: run it alone to "
                       "see what it waits for (`aws eks get-token --cluster-name NAME` for the kubeconfig "
                       "`python -m ops kubeconfig` writes)")
    if failed:
        raise OpsError(f"the kubeconfig's credential command failed ({' '.join(failed[0].split())[:200]}): "
                       "the AWS credentials have expired or are missing; refresh them (`aws sso login`, or new "
                       "keys) and retry")
    return client


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


# Seconds to wait for a TCP connection to the API server: an endpoint that admits nobody from
# here (publicCidrs, a private endpoint) drops packets, and the client's default waits forever.
CONNECT_TIMEOUT_S = 10
# Seconds for each read: a command is answered in bounded time even by a wedged API server (the
# client's own default waits forever). The guard below applies it to every read that is not a
# stream, and the reports (ops.kube_reads) pass it with each call.
READ_TIMEOUT_S = 30
# The longest Retry-After (429 from API priority and fairness, 503 from an API server starting) that
# is waited for, up to three times as urllib3 retries: its own Retry waits whatever the header says,
# and `Retry-After: 3600` held `ops status` for three hours. A longer wait is the answer: one line
# saying when to retry (api_error_line).
RETRY_AFTER_CAP_S = 10


def _retries() -> Any:
    return _capped_retry()(total=3, raise_on_status=False)


@functools.cache
def _capped_retry() -> type:
    import urllib3

    class CappedRetry(urllib3.Retry):
        def increment(self, method: str | None = None, url: str | None = None, response: Any = None,
                      *args: Any, **kwargs: Any) -> Any:
            wait = self.get_retry_after(response) if response is not None else None
            if wait is not None and wait > RETRY_AFTER_CAP_S:
                # With raise_on_status off, urllib3 hands this response back instead of retrying.
                raise urllib3.exceptions.MaxRetryError(None, url or "", None)
            return super().increment(method, url, response, *args, **kwargs)

    return CappedRetry


def guard(client: Any) -> Any:
    """Put `_Reach` under the HTTP of a TrainingClient or a kubernetes ApiClient, so an unreachable or
    refusing API server is one line naming the endpoint and the likely cause. Every API object of a
    TrainingClient shares one ApiClient."""
    api_client = client.custom_api.api_client if hasattr(client, "custom_api") else client
    rest = api_client.rest_client
    if not isinstance(rest.pool_manager, _Reach):
        rest.pool_manager = _Reach(rest.pool_manager, api_client.configuration.host)
    return client


class _Reach:
    """Stands between the kubernetes REST client and its urllib3 pool manager."""

    def __init__(self, pool_manager: Any, endpoint: str):
        self.pool_manager, self.endpoint = pool_manager, endpoint

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        import urllib3

        if kwargs.get("timeout") is None:
            # A streamed answer (`logs -f`, a watch: preload_content=False) may rightly stay open as long
            # as the pod runs; any other answer comes whole, and a server that accepts the connection
            # but never answers held `status`, `stop` and `delete` forever.
            read = None if kwargs.get("preload_content") is False else READ_TIMEOUT_S
            kwargs["timeout"] = urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=read)
        kwargs.setdefault("retries", _retries())
        try:
            response = self.pool_manager.request(method, url, **kwargs)
        except urllib3.exceptions.HTTPError as err:
            raise OpsError(unreachable(self.endpoint, err)) from None
        if response.status in (401, 403):
            raise OpsError(refused(self.endpoint, response.status, method, url))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool_manager, name)


_REACH_HINT = ("if the endpoint is public, this machine's IP must be in endpointAccess.publicCidrs; "
               "if it is private, connect from inside the VPC (VPN, bastion) or use the validation runner")


def unreachable(endpoint: str, err: Exception) -> str:
    """One line for a transport failure: which endpoint, what happened, the likely cause."""
    import urllib3

    reason = getattr(err, "reason", None) or err
    text = str(reason).lower()
    if isinstance(reason, urllib3.exceptions.NameResolutionError) or "name or service not known" in text \
            or "nodename nor servname" in text or "failed to resolve" in text:
        return (f"cannot resolve the Kubernetes API endpoint {endpoint}: a private endpoint's name resolves "
                "only inside the VPC; otherwise the cluster is gone or the kubeconfig is stale "
                "(`python -m ops kubeconfig --env NAME`)")
    if isinstance(reason, urllib3.exceptions.SSLError) or "certificate" in text:
        return (f"TLS with the Kubernetes API endpoint {endpoint} failed ({type(reason).__name__}): the kubeconfig's "
                "certificate authority is not this cluster's; rerun `python -m ops kubeconfig --env NAME`")
    if isinstance(reason, urllib3.exceptions.ProtocolError):
        # The endpoint answered, then the connection went: the way there is open.
        cause = reason.args[-1] if reason.args else reason
        what = getattr(cause, "strerror", None) or " ".join(str(cause).split())[:120]
        return (f"the connection to the Kubernetes API endpoint {endpoint} broke mid-answer ({what}): the API server "
                "or a load balancer before it dropped it (a restart, an upgrade); retry")
    # Before the timeout test: urllib3's NewConnectionError subclasses ConnectTimeoutError.
    if "refused" in text:
        what = "connection refused"
    elif isinstance(reason, urllib3.exceptions.ReadTimeoutError):
        what = f"no answer within {READ_TIMEOUT_S:g} s"
    elif isinstance(reason, (urllib3.exceptions.ConnectTimeoutError, TimeoutError)) or "timed out" in text:
        what = f"no answer within {CONNECT_TIMEOUT_S} s"
    else:
        what = " ".join(str(reason).split())[:120]
    return f"cannot reach the Kubernetes API endpoint {endpoint} ({what}): {_REACH_HINT}"


def refused(endpoint: str, status: int, method: str, url: str) -> str:
    from urllib.parse import urlsplit

    path = urlsplit(url).path
    if status == 401:
        return (f"the Kubernetes API endpoint {endpoint} rejected the credentials (HTTP 401 on {method} {path}): "
                "the AWS credentials behind the kubeconfig token have expired or are missing; refresh them "
                "(`aws sso login`, or new keys) and retry")
    return (f"the Kubernetes API endpoint {endpoint} denied {method} {path} (HTTP 403): this identity has no "
            "access entry with that right; use a role from adminRoleArns or ask for an access entry")


def api_error_line(err: Any) -> str:
    """An ApiException as `HTTP <status> <the server's message>` on one line."""
    import json

    message = err.reason or ""
    try:
        message = json.loads(err.body).get("message", message) if err.body else message
    except (ValueError, AttributeError):
        pass
    wait = (err.headers or {}).get("Retry-After") if err.status in (429, 503) else None
    asks = f" (the API server asks to retry in {wait} s)" if wait and wait.isdigit() else ""
    return f"HTTP {err.status} {' '.join(str(message).split())}{asks}"


def api_call(fn: Callable[[], Any]) -> Any:
    """A call on the plain kubernetes client (core, batch): an API failure becomes one line."""
    from kubernetes.client.exceptions import ApiException

    try:
        return fn()
    except ApiException as err:
        raise OpsError(f"Kubernetes API: {api_error_line(err)}") from None


# A list of PyTorchJobs answered 404: the cluster has no such CRD, as under trainingApi v2.
NO_PYTORCHJOBS = ("this cluster has no PyTorchJob API: on a trainingApi v2 environment runs are TrainJobs, "
                  "which the run verbs find with --env NAME")


# The Job controller labels each pod with its Job's name (Kubernetes 1.27+).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def job_phase(job: Any) -> tuple[str, str]:
    """A batch/v1 Job's phase (Complete, Failed, Suspended, Running, Pending) and its condition's message."""
    conditions = [c for c in ((job.status.conditions if job.status else None) or []) if c.status == "True"]
    for kind in ("Complete", "Failed", "Suspended"):
        for c in conditions:
            if c.type == kind:
                return kind, " ".join((c.message or c.reason or "").split())
    return ("Running" if job.status and job.status.active else "Pending"), ""


def to_model(manifest: dict) -> Any:
    """The SDK model for a rendered manifest: create_job accepts only its own model classes."""
    from kubeflow.training import ApiClient

    class _Response:  # what ApiClient.deserialize reads: a .data JSON string
        data = json.dumps(manifest)

    return ApiClient().deserialize(_Response(), PYTORCHJOB_MODEL)


def _check_lossless(manifest: dict, job: Any) -> None:
    """The SDK's models silently drop fields they do not know; refuse rather than create a job
    that differs from what the chart rendered."""
    from kubernetes.client import ApiClient

    if ApiClient().sanitize_for_serialization(job) != manifest:
        raise OpsError("the kubeflow-training SDK model would drop fields of the rendered PyTorchJob; "
                       "check `submit --dry-run` against the SDK version")


def render(env: Any, preset: str, *, image: str, job_name: str | None, overrides: dict | None) -> dict:
    """The run of `preset` with the `--set` overrides applied (k8s/pods/pytorchjob.py render_run: named
    PRESET-<spec digest> unless `job_name`). Its pod template is validated against the PodSpec
    schema of the environment's Kubernetes version (k8s/pods/podspec.py), unknown fields rejected: the
    operator would drop them silently. A failure is a ConfigError."""
    from k8s.pods.pytorchjob import render_run

    return render_run(env, preset, image=image, job_name=job_name, overrides=overrides)


def submit(client: Any, manifest: dict) -> str:
    """Create the job and its peers NetworkPolicy (k8s/pods/network_policy.py: its workers may reach
    each other and no other job's). The policy comes first, so no pod of the job starts without it,
    and is then owned by the job, so it goes when the job is deleted."""
    from kubernetes.client import NetworkingV1Api

    from k8s.pods.network_policy import job_peers_policy

    job = to_model(manifest)
    _check_lossless(manifest, job)
    namespace = job.metadata.namespace or client.namespace
    name = job.metadata.name
    networking = NetworkingV1Api(client.custom_api.api_client)
    peers = job_peers_policy({**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}})
    created_peers = _create_unless_present(
        lambda: networking.create_namespaced_network_policy(namespace, peers))
    try:
        _call(lambda: client.create_job(job=job, namespace=namespace),
              {409: "a run of this name (this spec) exists: `ops start PRESET --env ENV` resumes it; "
                    "`ops submit --name` names another"})
    except OpsError:
        if created_peers:  # never one that belongs to a job already there
            api_call(lambda: networking.delete_namespaced_network_policy(peers["metadata"]["name"], namespace))
        raise
    uid = _call(lambda: client.get_job(name, namespace)).metadata.uid
    owner = {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], "name": name, "uid": uid}
    api_call(lambda: networking.patch_namespaced_network_policy(
        peers["metadata"]["name"], namespace, {"metadata": {"ownerReferences": [owner]}}))
    return f"{namespace}/{name}"


def _create_unless_present(create: Callable[[], Any]) -> bool:
    """True if it created the object; False if one of that name was there already."""
    from kubernetes.client.exceptions import ApiException

    try:
        create()
    except ApiException as err:
        if err.status == 409:
            return False
        raise OpsError(f"Kubernetes API: {api_error_line(err)}") from None
    return True


def set_suspended(client: Any, name: str, suspend: bool, namespace: str | None = None) -> str:
    """Resume (`ops start`) or suspend (`ops stop`) a PyTorchJob through runPolicy.suspend. A merge
    patch of that one field: the run's spec stays as it was created. Returns what happened, in words."""
    namespace = namespace or client.namespace
    job = _call(lambda: client.get_job(name, namespace=namespace),
                {404: f"`python -m ops status` lists the jobs in {namespace}"})
    phase, _ = phase_of(job)
    if phase in ("Succeeded", "Failed"):
        raise OpsError(f"PyTorchJob {namespace}/{name} has finished ({phase}); a finished run does not run "
                       f"again: `python -m ops delete {name}`, then `python -m ops start PRESET --env ENV`")
    run_policy = job.spec.run_policy if job.spec else None
    suspended = bool(run_policy and run_policy.suspend)
    if suspended == suspend:
        return f"PyTorchJob {namespace}/{name} is already {'suspended' if suspend else 'started'} ({phase})"
    patch = {"spec": {"runPolicy": {"suspend": suspend}}}
    _call(lambda: client.update_job(patch, name, namespace=namespace))
    return f"PyTorchJob {namespace}/{name} {'suspended: its pods stop' if suspend else 'resumed: its pods start'}"


@dataclass(frozen=True)
class JobStatus:
    name: str
    phase: str
    message: str
    created: str


def phase_of(job: Any) -> tuple[str, str]:
    conditions = [c for c in ((job.status.conditions if job.status else None) or [])
                  if c.status == "True" and c.type in _PHASES]
    if not conditions:
        return "Pending", ""
    # A finished job keeps its Running condition True beside Succeeded/Failed; the end state wins,
    # otherwise the operator appends conditions in order and the last one is current.
    ended = [c for c in conditions if c.type in ("Succeeded", "Failed")]
    latest = (ended or conditions)[-1]
    return latest.type, " ".join((latest.message or "").split())


def status(client: Any, name: str | None = None, namespace: str | None = None) -> list[JobStatus]:
    jobs = [_call(lambda: client.get_job(name, namespace=namespace))] if name else \
        _call(lambda: client.list_jobs(namespace=namespace), {404: NO_PYTORCHJOBS})
    rows = []
    for job in jobs:
        phase, message = phase_of(job)
        created = job.metadata.creation_timestamp
        rows.append(JobStatus(job.metadata.name, phase, message, str(created) if created else "-"))
    from k8s.pods.names import PYTORCH_CONTAINER
    from ops.pod_notes import with_pod_notes

    return with_pod_notes(rows, name, lambda selector: api_call(lambda: client.core_api.list_namespaced_pod(
        namespace or client.namespace, label_selector=selector)).items, container=PYTORCH_CONTAINER, flags="")


def render_status(rows: list[JobStatus]) -> str:
    return render_table(rows, (("phase", 10), ("created", 25), ("message", 0)), "no PyTorchJobs")


def render_table(rows: list, columns: tuple[tuple[str, int], ...], empty: str) -> str:
    """`ops status`'s table: NAME as wide as the longest name, then each (attribute, width) column,
    the last one unpadded; `empty` when there is no row."""
    if not rows:
        return empty
    width = max(4, *(len(r.name) for r in rows))

    def line(name: str, values: list[str]) -> str:
        cells = [f"{v:<{w}}" for v, (_, w) in zip(values[:-1], columns[:-1])]
        return "  ".join([f"{name:<{width}}", *cells, values[-1]])

    return "\n".join([line("NAME", [c.upper() for c, _ in columns]),
                      *(line(r.name, [str(getattr(r, c)) for c, _ in columns]) for r in rows)])


def logs(client: Any, name: str, namespace: str | None = None, follow: bool = False,
         echo: Callable[[str], None] = print) -> None:
    """Worker 0's log (rank 0 logs the metrics). Our PyTorchJobs have only Worker replicas, and
    the operator marks no pod of those as master. With follow the SDK streams each line."""
    leader = {"replica_type": "worker", "replica_index": 0}
    pods = _call(lambda: client.get_job_pods(name, namespace=namespace, is_master=False, **leader))
    if not pods:
        job = _call(lambda: client.get_job(name, namespace=namespace),
                    {404: f"`python -m ops status` lists the jobs in {namespace or client.namespace}"})
        phase, _ = phase_of(job)
        if phase in ("Succeeded", "Failed"):
            # cleanPodPolicy Running (k8s/pods/pytorchjob.py) deletes the pods still running when a
            # run ends.
            raise OpsError(log_in_cloudwatch(f"job {name}", phase, "worker 0", f"{name}-worker-0"))
        raise OpsError(f"job {name} has no worker 0 pod (yet); see `python -m ops status {name}`")
    if all(p.status is not None and p.status.phase == "Pending" for p in pods):
        from k8s.pods.names import PYTORCH_CONTAINER
        from ops.pod_notes import waits_because

        why = waits_because(pods[0], PYTORCH_CONTAINER)
        raise OpsError(f"worker pod {pods[0].metadata.name} is Pending{f': it {why}' if why else ''}; its log starts "
                       "when it runs")
    if follow:
        # Not the SDK's get_job_logs(follow=True): it reads each stream in a thread of its own, and a
        # stream that fails there (a reset, the pod deleted) leaves it waiting for lines forever.
        from kubeflow.training.constants import constants

        pod = next(p for p in pods if p.status is None or p.status.phase != "Pending")
        follow_log(client.core_api, pod.metadata.name, namespace or client.namespace,
                   constants.JOB_PARAMETERS[constants.PYTORCHJOB_KIND]["container"], echo,
                   again=f"`python -m ops logs {name} -f`")
        return
    found, _ = _call(lambda: client.get_job_logs(name, namespace=namespace, is_master=False, **leader))
    echo_logs(found, echo)


def log_in_cloudwatch(run: str, phase: str, pod: str, streams: str) -> str:
    """Where the log of an ended run's pod that is gone stays: the CloudWatch add-on has shipped each
    container's log as it was written."""
    return (f"{run} has ended ({phase}) and its {pod} pod is gone; its log stays in CloudWatch Logs: "
            f"group /aws/containerinsights/ENV-training/application, the streams that name {streams}")


def follow_log(core: Any, pod: str, namespace: str, container: str, echo: Callable[[str], None], *,
               again: str, prefix: bool = True) -> None:
    """Echo `pod`'s log line by line as it is written, until the container ends. A stream the API
    server refuses, or one that breaks on the way (a reset, the API server or kubelet restarting),
    is one line after what came through; `again` is the command that follows it anew."""
    import urllib3

    response = api_call(lambda: core.read_namespaced_pod_log(pod, namespace, container=container, follow=True,
                                                          _preload_content=False))
    head = f"[{pod}] " if prefix else ""
    pending = b""
    try:
        for chunk in response.stream(4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                echo(head + line.decode(errors="replace"))
    except urllib3.exceptions.HTTPError as err:
        reason = getattr(err, "reason", None) or (err.args[-1] if err.args else err)
        raise OpsError(f"the log stream of pod {pod} broke ({' '.join(str(reason).split())[:120]}); {again} "
                       "follows it again, from the log's start") from None
    finally:
        response.release_conn()
    if pending:
        echo(head + pending.decode(errors="replace"))


def echo_logs(found: dict[str, str], echo: Callable[[str], None]) -> None:
    """Each pod's log lines, prefixed with the pod's name. The trainer's EFA verdict
    (trainer/nccl_net.py) comes first: it explains whatever follows."""
    lines = [f"[{pod}] {line}" for pod, text in found.items() for line in text.splitlines()]
    for line in lines:
        if EFA_CHECK_FAILED in line or EFA_CHECK_PASSED in line:
            echo(f"==> {line}")
    for line in lines:
        echo(line)


def delete(client: Any, name: str, namespace: str | None = None) -> None:
    _call(lambda: client.delete_job(name, namespace=namespace))


def _call(fn: Callable[[], Any], hints: dict[int, str] | None = None) -> Any:
    """SDK failures arrive as RuntimeError wrapping the API error's multi-line text; keep one line.
    `_Reach`'s OpsError (unreachable, 401/403) is wrapped by the SDK too: it wins. `hints` adds
    what to do for an HTTP status."""
    try:
        return fn()
    except (RuntimeError, TimeoutError) as err:
        inner = err
        while inner is not None and not isinstance(inner, OpsError):
            inner = inner.__cause__ or inner.__context__
        if inner is not None:
            raise OpsError(str(inner)) from None
        hint = (hints or {}).get(getattr(err.__cause__, "status", None))
        raise OpsError(_one_line(err) + (f"; {hint}" if hint else "")) from None


def _one_line(err: Exception) -> str:
    # The SDK raises some of its errors inside the handler of the API's, not from it (its log reads)
    cause = err.__cause__ if err.__cause__ is not None or err.__suppress_context__ else err.__context__
    status_code = getattr(cause, "status", None)
    if status_code is not None:
        head = str(err).split(". Error:", 1)[0]
        return f"{head}: {api_error_line(cause)}"
    return " ".join(str(err).split())[:300]
