"""`python -m ops <command>`: argument parsing and the one place errors become one line.

Exit codes: 0 done, 1 the command ran and found a problem (a preflight fail), 2 bad input or an
unmet precondition (printed as one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from config import ConfigError
from config.kubernetes import TRAINING_NAMESPACE
from ops.errors import OpsError

EXIT_PROBLEM, EXIT_USAGE = 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we promise one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = " ".join(self.prog.split()[1:])  # "ops plan" -> "plan"; "ops" -> ""
        hint = f"python -m ops {command} --help".replace("  ", " ")
        print(f"error: {message} (see `{hint}`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _override(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    # Numbers stay numbers so node counts and restarts reach the renderer as ints.
    return key, int(value) if value.lstrip("-").isdigit() else value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ops", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def with_env(p: argparse.ArgumentParser) -> None:
        p.add_argument("--env", required=True, help="environment name in cdk.json context `environments`")
        p.add_argument("--context-file", help="read environments from this file instead of cdk.json")

    def with_kube(p: argparse.ArgumentParser) -> None:
        p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
        p.add_argument("--context", help="kubeconfig context (default: current-context)")
        p.add_argument("--namespace", default=TRAINING_NAMESPACE, help=f"default {TRAINING_NAMESPACE}")

    p = sub.add_parser("preflight", help="check the account before a deploy")
    with_env(p)
    p = sub.add_parser("az-recommend", help="AZs (names and IDs) offering an instance type")
    p.add_argument("--instance-type", required=True)
    p.add_argument("--region", required=True)
    p = sub.add_parser("kubeconfig", help="write the cluster's kubeconfig entry (aws eks update-kubeconfig)")
    with_env(p)
    p.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    p.add_argument("--kubeconfig", help="file to update (default: KUBECONFIG or ~/.kube/config)")
    p = sub.add_parser("submit", help="render a preset's PyTorchJob and create it")
    with_env(p)
    p.add_argument("--preset", required=True)
    p.add_argument("--image", required=True, help="trainer image URI")
    p.add_argument("--name", help="job name (default: chosen by the chart code)")
    p.add_argument("--set", dest="overrides", action="append", type=_override, default=[],
                   metavar="KEY=VALUE", help="override a preset field, repeatable")
    p.add_argument("--dry-run", action="store_true", help="print the manifest, create nothing")
    with_kube(p)
    p = sub.add_parser("status", help="phase of one job, or of all jobs in the namespace")
    p.add_argument("name", nargs="?")
    with_kube(p)
    p = sub.add_parser("logs", help="worker 0's log (rank 0 logs the metrics)")
    p.add_argument("name")
    p.add_argument("-f", "--follow", action="store_true")
    with_kube(p)
    p = sub.add_parser("delete", help="delete a job")
    p.add_argument("name")
    with_kube(p)
    p = sub.add_parser("plan", help="scale plan on paper: addresses, checkpoint time, cost, limits")
    with_env(p)
    p.add_argument("--nodes", type=_positive_int, help="node count to plan for (default: maxSize)")
    p.add_argument("--preset", help="job preset (default: the first preset on a GPU group)")
    p.add_argument("--vcpu-quota", type=_positive_int, help="On-Demand vCPU quota to plan against")
    p = sub.add_parser("capacity-block", help="bring capacity-block groups up at the block's start, or to 0 "
                                              "before an update")
    p.add_argument("action", choices=["schedule", "scale-to-zero"])
    with_env(p)
    p.add_argument("--group", help="one capacity-block group (required for scale-to-zero)")
    p.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    p.add_argument("--if-any", action="store_true",
                   help="do nothing when the environment has no capacity-block groups (make deploy uses it)")
    p = sub.add_parser("data", help="start a data source's preparation Job (S3 to FSx, then prepare) and follow it")
    with_env(p)
    p.add_argument("--source", required=True, help="a name under the environment's dataSources")
    p.add_argument("--image", required=True, help="trainer image URI (the CPU variant)")
    p.add_argument("--dry-run", action="store_true", help="print the Job, create nothing")
    p.add_argument("--no-follow", action="store_true", help="create the Job and return")
    with_kube(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
    except OpsError as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # an AWS or Kubernetes failure outside a check: still one line
        from ops.aws import api_failure_types, explain

        if not isinstance(err, api_failure_types()):
            raise
        print(f"error: {explain(err)}", file=sys.stderr)
    return EXIT_USAGE


def _env(args: argparse.Namespace):
    from ops.envconfig import load

    return load(args.env, args.context_file)


def _preflight(args: argparse.Namespace) -> int:
    from ops import aws, preflight

    env = _env(args)
    rows = preflight.run(env, aws.clients(env.region))
    print(f"preflight {env.name}: account {env.account}, {env.region}, training AZ {env.training_availability_zone}")
    print(preflight.render(rows))
    return EXIT_PROBLEM if preflight.failed(rows) else 0


def _az_recommend(args: argparse.Namespace) -> int:
    from ops import aws, az

    aws.check_region(args.region)
    clients = aws.clients(args.region)
    aws.caller_account(clients.sts)  # no credentials: one clear line before any other call
    print(az.render(az.recommend(clients, args.instance_type, args.region)))
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    from ops import aws, kubeconfig

    env = _env(args)
    clients = aws.clients(env.region)
    aws.caller_account(clients.sts)
    cluster = kubeconfig.find_cluster(clients.eks, env, args.cluster_name)
    path = Path(args.kubeconfig) if args.kubeconfig else kubeconfig.default_path()
    context = kubeconfig.write(path, cluster, env.region)
    print(f"updated {path}: context {context} (cluster {cluster['name']}) is current")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from ops import kube

    env = _env(args)
    manifest = kube.render(env, args.preset, image=args.image, job_name=args.name,
                           overrides=dict(args.overrides) or None)
    if args.dry_run:
        import yaml

        print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return 0
    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    print(f"created PyTorchJob {kube.submit(client, manifest)}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from ops import kube

    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    print(kube.render_status(kube.status(client, args.name, args.namespace)))
    return 0


def _logs(args: argparse.Namespace) -> int:
    from ops import kube

    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    kube.logs(client, args.name, args.namespace, follow=args.follow)
    return 0


def _delete(args: argparse.Namespace) -> int:
    from ops import kube

    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    kube.delete(client, args.name, args.namespace)
    print(f"deleted PyTorchJob {args.namespace}/{args.name}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from ops import plan

    env = _env(args)
    print(plan.render(plan.build(env, args.preset, args.nodes, args.vcpu_quota)))
    return 0


def _capacity_block(args: argparse.Namespace) -> int:
    from ops import aws, capacity_blocks

    env = _env(args)
    if args.action == "scale-to-zero" and not args.group:
        raise OpsError("scale-to-zero needs --group: the capacity-block group to take to 0")
    if args.if_any and not args.group and not any(g.capacity.type == "capacityBlock" for g in env.gpu_nodegroups):
        return 0
    capacity_blocks.block_groups(env, args.group)  # a bad group is one line before any AWS call
    clients = aws.clients(env.region)
    aws.caller_account(clients.sts)
    if args.action == "scale-to-zero":
        print(capacity_blocks.scale_to_zero(env, clients, group=args.group, cluster_name=args.cluster_name))
        return 0
    results = capacity_blocks.schedule(env, clients, group=args.group, cluster_name=args.cluster_name)
    for result in results:
        print(f"{result.group}: {result.message}")
    return 0 if all(r.ok for r in results) else EXIT_PROBLEM


def _data(args: argparse.Namespace) -> int:
    from ops import data

    manifest = data.render(_env(args), args.source, image=args.image)
    if args.dry_run:
        import yaml

        print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return 0
    api = data.api_client(args.kubeconfig, args.context)
    name = data.start(api, manifest)
    print(f"created Job {manifest['metadata']['namespace']}/{name}")
    return 0 if args.no_follow else (EXIT_PROBLEM if data.follow(api, name, manifest["metadata"]["namespace"]) else 0)


_COMMANDS = {"preflight": _preflight, "az-recommend": _az_recommend, "kubeconfig": _kubeconfig,
             "submit": _submit, "status": _status, "logs": _logs, "delete": _delete, "plan": _plan,
             "capacity-block": _capacity_block, "data": _data}
