"""What several ops commands share at the command line: flag groups with the typed options they
become, the value parsers, and the one step from an argparse Namespace to a command's options.

A flag group is a frozen dataclass whose `add_to(parser)` declares its flags; a command's Options
dataclass inherits the groups it uses, and ops/cli.py builds it from the parsed Namespace with
`typed()`, so no Namespace reaches a command's run() or the modules that do the work.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from config.kubernetes import TRAINING_NAMESPACE

T = TypeVar("T")


def typed(options: type[T], namespace: argparse.Namespace) -> T:
    """`options` (a dataclass) from the Namespace's values of the same names; the other values stay
    behind (the command's name, a subcommand's defaults for flags of its siblings)."""
    names = {f.name for f in dataclasses.fields(options) if f.init}  # type: ignore[arg-type]
    return options(**{k: v for k, v in vars(namespace).items() if k in names})


# --- value parsers -------------------------------------------------------------------------------

def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    # NaN fails every comparison, so `<= 0` alone let it through (a timer of NaN fires at once), and
    # past TIMEOUT_MAX (infinity included) threading.Timer raises in its own thread and never fires.
    if not 0 < value <= threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(f"must be positive and at most {threading.TIMEOUT_MAX:.0f}, got {text}")
    return value


def file_system_id(text: str) -> str:
    """An FSx file system id, as FSx writes them (preflight's --abandon-file-system)."""
    if not re.fullmatch(r"fs-[0-9a-f]{8,21}", text):
        raise argparse.ArgumentTypeError(f"must be a file system id such as fs-0123456789abcdef0, got {text!r}")
    return text


def role_arn(text: str) -> str:
    """An IAM role ARN (preflight's --assume-role), by the rule adminRoleArns is checked with."""
    from config.environment_parser import ROLE_ARN

    if not ROLE_ARN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be an IAM role ARN such as arn:aws:iam::123456789012:role/NAME, "
                                         f"got {text!r}")
    return text


def _checked(check: Callable[[str], str], text: str) -> str:
    """`check(text)`, its ConfigError a usage error that argparse names the flag in."""
    from config.errors import ConfigError

    try:
        return check(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(err.message) from None


def image_reference(text: str) -> str:
    """A user's --image (k8s/pods/images.py pinned_image_reference)."""
    from k8s.pods.images import pinned_image_reference

    return _checked(pinned_image_reference, text)


def run_name(text: str) -> str:
    """A user's run --name (k8s/pods/pytorchjob.py checked_job_name)."""
    from k8s.pods.pytorchjob import checked_job_name

    return _checked(checked_job_name, text)


def override(text: str) -> tuple[str, Any]:
    """One `--set KEY=VALUE`."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if key.startswith("env."):  # environment variables stay strings
        return key, value
    # Numbers stay numbers so node counts and restarts reach the renderer as ints.
    return key, int(value) if value.lstrip("-").isdigit() else value


def overrides(pairs: list[tuple[str, Any]] | tuple[tuple[str, Any], ...]) -> dict | None:
    """`--set` pairs as the renderer's overrides: env.NAME=VALUE pairs gather into `env`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key.startswith("env."):
            out.setdefault("env", {})[key[len("env."):]] = value
        else:
            out[key] = value
    return out or None


# --- flag groups ---------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class EnvOptions:
    """--env and --context-file: the environment a command works on."""
    env: str
    context_file: str | None = None

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--env", required=True, help="environment name in cdk.json context `environments`")
        parser.add_argument("--context-file", help="read environments from this file instead of cdk.json")

    def environment(self):
        """The typed Environment; ConfigError (one line) when it is unknown or invalid."""
        from ops.envconfig import load

        return load(self.env, self.context_file)

    def cluster_environment(self) -> Any:
        """A command for one environment acts on that environment's cluster only (ops.kube.check_cluster)."""
        return self.environment()


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """--kubeconfig and --context: how a command reaches the cluster."""
    kubeconfig: str | None = None
    context: str | None = None

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
        parser.add_argument("--context", help="kubeconfig context (default: current-context)")

    def api_client(self) -> Any:
        """A kubernetes ApiClient for the core, apps and batch APIs (ops/kube.py: one-line errors)."""
        from ops import kube

        return kube.api_client(self.kubeconfig, self.context, environment=self.cluster_environment())

    def cluster_environment(self) -> Any:
        """The environment whose cluster the context must point at (ops.kube.check_cluster), or None
        for any cluster."""
        return None


@dataclass(frozen=True, kw_only=True)
class KubeOptions(ClusterOptions):
    """The cluster, and --namespace: where a command's jobs live."""
    namespace: str = TRAINING_NAMESPACE

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        ClusterOptions.add_to(parser)
        parser.add_argument("--namespace", default=TRAINING_NAMESPACE, help=f"default {TRAINING_NAMESPACE}")

    def training_client(self) -> Any:
        """The Kubeflow SDK's client for the namespace (ops/kube.py: bounded, one-line errors)."""
        from ops import kube

        return kube.training_client(self.kubeconfig, self.context, self.namespace,
                                    environment=self.cluster_environment())


@dataclass(frozen=True, kw_only=True)
class RunsOptions(KubeOptions):
    """The cluster and namespace of `stop`, `status`, `logs` and `delete`, and --env: the runs of a
    trainingApi v2 environment are TrainJobs (queued by Kueue where it says so); without --env, or
    for a v1 environment, PyTorchJobs through the Kubeflow SDK."""
    env: str | None = None
    context_file: str | None = None

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        KubeOptions.add_to(parser)
        parser.add_argument("--env", help="environment name in cdk.json context `environments`: needed for a "
                                          "trainingApi v2 environment's TrainJobs (default: PyTorchJobs)")
        parser.add_argument("--context-file", help="read environments from this file instead of cdk.json")

    def cluster_environment(self) -> Any:
        """With --env, the runs are that environment's: its cluster only."""
        from ops.envconfig import load

        return load(self.env, self.context_file) if self.env else None

    def trainjobs(self) -> Any:
        """ops.trainjobs.TrainJobs on the cluster when --env names a trainingApi v2 environment, else
        None (the PyTorchJob verbs)."""
        if not self.env:
            if self.context_file is not None:
                from ops.errors import OpsError

                raise OpsError("--context-file is read only with --env NAME (the environment whose runs these are)")
            return None
        from ops.envconfig import load

        environment = load(self.env, self.context_file)
        if environment.training_api == "v1":
            return None
        from ops.trainjobs import TrainJobs

        return TrainJobs(self.api_client(), kueue=environment.queueing == "kueue")


@dataclass(frozen=True, kw_only=True)
class OutputOptions:
    """-o table|json (ops/output.py)."""
    output: str = "table"

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        from ops.output import add_output_flag

        add_output_flag(parser)

    @property
    def json(self) -> bool:
        return self.output == "json"


@dataclass(frozen=True, kw_only=True)
class RunOptions(EnvOptions, KubeOptions):
    """What `start` and `submit` share: the environment, the image, --set overrides and --dry-run."""
    image: str | None = None
    overrides: Sequence[tuple[str, Any]] = ()
    dry_run: bool = False

    @staticmethod
    def add_to(parser: argparse.ArgumentParser) -> None:
        EnvOptions.add_to(parser)
        parser.add_argument("--image", type=image_reference, help="trainer image URI (default: the image the environment's Registry stack "
                                            "published for the preset, from its CloudFormation outputs)")
        parser.add_argument("--set", dest="overrides", action="append", type=override, default=[],
                            metavar="KEY=VALUE", help="override a preset field, repeatable (keys below)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print what it would create, create nothing: the run's peers NetworkPolicy, then "
                                 "the run (under trainingApi v2 its TrainingRuntime, then its TrainJob)")
        KubeOptions.add_to(parser)

    @staticmethod
    def epilog() -> str:
        from config.overrides import help_lines

        return "--set keys (checked against the environment when the run is rendered):\n" + "\n".join(help_lines())

    def launch(self, preset: str, *, name: str | None, resume: bool) -> int:
        """Print the run (--dry-run), or create it (resume=False) or resume or create it (resume=True)."""
        from ops import runs

        manifest = runs.run_manifest(self.environment(), preset, name=name, image=self.image,
                                 overrides=overrides(self.overrides))
        if self.dry_run:
            print(runs.dry_run_text(manifest), end="")
            return 0
        for line in runs.start(self.training_client(), manifest, resume=resume):
            print(line)
        return 0
