"""`python -m ops <command>`: argument parsing and the one place errors become one line.

Exit codes, the same for every command:
  0  done, and every check it made passed
  1  the command ran and a check failed (a preflight fail, a limit OVER in plan, a validation
     check, a local job that failed, cdk synth stopped by a check)
  2  usage or configuration error, or an unmet precondition (no credentials or kubeconfig,
     API server unreachable, a tool missing): one line on stderr, never a traceback
A bug (an unexpected exception) exits 1 with one line naming the command and the file in the
temporary directory ($TMPDIR, else /tmp) that holds the full trace: ops-crash-<time>-<random>.txt.
Commands that print tables take `-o json` for one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from config import ConfigError, paths
from config.kubernetes import EXIT_INTERRUPTED, EXIT_USAGE, TRAINING_NAMESPACE
from ops.errors import OpsError, report_crash
from ops.output import add_output_flag, to_json

EXIT_PROBLEM = 1  # a check failed, or a crash


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
    if key.startswith("env."):  # environment variables stay strings
        return key, value
    # Numbers stay numbers so node counts and restarts reach the renderer as ints.
    return key, int(value) if value.lstrip("-").isdigit() else value


def _overrides(pairs: list[tuple[str, Any]]) -> dict | None:
    """`--set` pairs as the renderer's overrides: env.NAME=VALUE pairs gather into `env`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key.startswith("env."):
            out.setdefault("env", {})[key[len("env."):]] = value
        else:
            out[key] = value
    return out or None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ops", description=__doc__.splitlines()[0],
                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
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
    add_output_flag(p)
    p = sub.add_parser("az-recommend", help="AZs (names and IDs) offering an instance type")
    p.add_argument("--instance-type", required=True)
    p.add_argument("--region", required=True)
    add_output_flag(p)
    p = sub.add_parser("kubeconfig", help="write the cluster's kubeconfig entry (aws eks update-kubeconfig)")
    with_env(p)
    p.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    p.add_argument("--kubeconfig", help="file to update (default: KUBECONFIG or ~/.kube/config)")
    p.add_argument("--role-arn", help="role kubectl assumes (default: none if you are an admin principal, "
                                      "else the first of adminRoleArns)")
    p = sub.add_parser("whoami", help="the caller's identity and which path to cluster admin applies")
    with_env(p)
    from config.overrides import help_lines
    from config.presets import PRESETS

    set_epilog = "--set keys (checked against the environment when the run is rendered):\n" + "\n".join(help_lines())

    def with_run(p: argparse.ArgumentParser) -> None:
        with_env(p)
        p.add_argument("--image", help="trainer image URI (default: the image the environment's Registry stack "
                                       "published for the preset, from its CloudFormation outputs)")
        p.add_argument("--set", dest="overrides", action="append", type=_override, default=[],
                       metavar="KEY=VALUE", help="override a preset field, repeatable (keys below)")
        p.add_argument("--dry-run", action="store_true",
                       help="print what it would create, create nothing: the run's peers NetworkPolicy, then the run")
        with_kube(p)

    p = sub.add_parser("start", help="start a preset's run of the deployed code: resume it, or create it",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=set_epilog)
    p.add_argument("preset", choices=PRESETS, metavar="PRESET", help=f"one of {', '.join(PRESETS)}")
    with_run(p)
    p = sub.add_parser("submit", help="create a preset's run (named PRESET-<spec digest> unless --name)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=set_epilog)
    p.add_argument("--preset", required=True, choices=PRESETS, metavar="PRESET",
                   help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--name", help="run name (default: PRESET-<digest of its spec, image included>)")
    with_run(p)
    p = sub.add_parser("stop", help="suspend a run, or every active run of a preset: its pods stop, the run stays")
    p.add_argument("target", metavar="RUN|PRESET", help="a PyTorchJob's name, or a preset")
    with_kube(p)
    p = sub.add_parser("status", help="phase of one job, or of all jobs in the namespace")
    p.add_argument("name", nargs="?")
    add_output_flag(p)
    with_kube(p)
    p = sub.add_parser("logs", help="worker 0's log (rank 0 logs the metrics)")
    p.add_argument("name")
    p.add_argument("-f", "--follow", action="store_true")
    with_kube(p)
    p = sub.add_parser("delete", help="delete a job")
    p.add_argument("name")
    with_kube(p)
    p = sub.add_parser("plan", help="scale plan on paper: addresses, checkpoint time, cost, limits (exit 1 if OVER)")
    with_env(p)
    p.add_argument("--nodes", type=_positive_int, help="node count to plan for (default: maxSize)")
    p.add_argument("--preset", choices=PRESETS, metavar="PRESET",
                   help="job preset (default: the first preset on a GPU group)")
    p.add_argument("--vcpu-quota", type=_positive_int, help="On-Demand vCPU quota to plan against")
    add_output_flag(p)
    p = sub.add_parser("capacity-block", help="bring capacity-block groups up at the block's start, or to 0 "
                                              "before an update")
    p.add_argument("action", choices=["schedule", "scale-to-zero"])
    with_env(p)
    p.add_argument("--group", help="one capacity-block group (required for scale-to-zero)")
    p.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    p.add_argument("--if-any", action="store_true",
                   help="do nothing when the environment has no capacity-block groups (make deploy uses it)")
    p = sub.add_parser("doctor", help="check a live cluster: nodes, devices, add-ons, storage, node health, NCCL")
    with_env(p)
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: current-context)")
    add_output_flag(p)
    from ops import model  # `ops model token|download|status|logs`: Hugging Face models onto FSx

    model.add_parser(sub, with_env, with_kube)
    p = sub.add_parser("data", help="start a data source's preparation Job (S3 to FSx, then prepare) and follow it")
    with_env(p)
    p.add_argument("--source", required=True, help="a name under the environment's dataSources")
    p.add_argument("--image", help="trainer image URI (default: the CPU image the environment's Registry stack "
                                    "published)")
    p.add_argument("--dry-run", action="store_true", help="print the Job, create nothing")
    p.add_argument("--no-follow", action="store_true", help="create the Job and return")
    with_kube(p)
    _add_module_commands(sub)
    return parser


def _add_module_commands(sub: Any) -> None:
    """Commands whose parser and logic live in their own module (ops/local.py, ...)."""
    from ops import local, stacks, synth_summary, validate

    p = sub.add_parser("local", help="run a CPU job preset on this machine under torchrun and a real etcd")
    local.add_arguments(p)
    p = sub.add_parser("validate", help="post-deploy GPU checks and NCCL tests through kubectl (the pipeline's runner)")
    validate.add_arguments(p)
    p = sub.add_parser("stacks", help="the cdk stack pattern of an environment; with --deploy, refused where the "
                                      "pipeline deploys it")
    stacks.add_arguments(p)
    p = sub.add_parser("synth-summary", help="offline cdk synth, then what a deploy would create")
    synth_summary.add_arguments(p)
    add_output_flag(p)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
    except OpsError as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:  # an AWS or Kubernetes failure outside a check: still one line
        from ops.aws import api_failure_types, explain

        if not isinstance(err, api_failure_types()):
            report_crash(" ".join(a for a in (args.command, getattr(args, "model_command", None)) if a), argv, err)
            return EXIT_PROBLEM
        print(f"error: {explain(err)}", file=sys.stderr)
    return EXIT_USAGE


def _env(args: argparse.Namespace):
    from ops.envconfig import load

    return load(args.env, args.context_file)


def _preflight(args: argparse.Namespace) -> int:
    from ops import aws, preflight

    env = _env(args)
    rows = preflight.run_for_deploy(env, aws.clients(env.region))
    return _check_report(args, rows, {"environment": env.name, "account": env.account, "region": env.region},
                         f"preflight {env.name}: account {env.account}, {env.region}, "
                         f"training AZ {env.training_availability_zone}")


def _check_report(args: argparse.Namespace, rows: list, about: dict, title: str) -> int:
    """A pass/warn/fail table as text or one JSON document; exit 1 when any row failed."""
    from ops import checks

    if args.output == "json":
        print(to_json({**about, "checks": rows, "failed": checks.failed(rows)}))
    else:
        print(title)
        print(checks.render(rows))
    return EXIT_PROBLEM if checks.failed(rows) else 0


def _az_recommend(args: argparse.Namespace) -> int:
    from ops import aws, az

    aws.check_region(args.region)
    clients = aws.clients(args.region)
    aws.caller_account(clients.sts)  # no credentials: one clear line before any other call
    recommendation = az.recommend(clients, args.instance_type, args.region)
    print(to_json(recommendation) if args.output == "json" else az.render(recommendation))
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    from ops import access, aws, kubeconfig

    env = _env(args)
    if args.kubeconfig:  # the AWS CLI updates it at the end: a file it cannot write or parse is found first
        try:
            paths.output_file(args.kubeconfig)
        except paths.PathProblem as problem:
            raise OpsError(f"--kubeconfig: {problem}") from None
        from ops.kube import check_kubeconfig

        check_kubeconfig(args.kubeconfig)
    clients = aws.clients(env.region)
    who = access.caller(clients)  # no credentials: one line before any other call
    cluster = kubeconfig.find_cluster(clients.eks, env, args.cluster_name)
    command = access.kubeconfig_command(env, who, role_arn=args.role_arn)
    command[command.index("--name") + 1] = cluster["name"]
    print(f"$ {' '.join(command)}")
    print(kubeconfig.update(command, args.kubeconfig))
    return 0


def _whoami(args: argparse.Namespace) -> int:
    from ops import access, aws

    env = _env(args)
    report, ok = access.whoami(env, aws.clients(env.region))
    print(report)
    return 0 if ok else EXIT_PROBLEM


def _run_manifest(args: argparse.Namespace) -> dict:
    """The run `start`/`submit` would create: the preset's, for the image the environment's
    Registry stack published (or --image), with the --set overrides."""
    from ops import kube

    env = _env(args)
    preset = args.preset
    name = getattr(args, "name", None)
    image = args.image
    if not image:
        from config.presets import get_preset
        from ops import images

        kube.render(env, preset, image="-", job_name=name, overrides=_overrides(args.overrides))  # bad --set first
        image = images.published_image(env, get_preset(preset).image_variant)
    return kube.render(env, preset, image=image, job_name=name, overrides=_overrides(args.overrides))


def _start_or_submit(args: argparse.Namespace) -> int:
    from ops import kube, runs

    manifest = _run_manifest(args)
    if args.dry_run:
        import yaml

        from k8s.pods.network_policy import job_peers_policy

        # In the order kube.submit creates them: no pod of the run starts before its peers may reach it.
        print(yaml.safe_dump_all([job_peers_policy(manifest), manifest], sort_keys=False), end="")
        return 0
    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    for line in runs.start(client, manifest, resume=args.command == "start"):
        print(line)
    return 0


def _stop(args: argparse.Namespace) -> int:
    from ops import kube, runs

    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    for line in runs.stop(client, args.target, args.namespace):
        print(line)
    return 0


def _status(args: argparse.Namespace) -> int:
    from ops import kube

    client = kube.training_client(args.kubeconfig, args.context, args.namespace)
    rows = kube.status(client, args.name, args.namespace)
    print(to_json(rows) if args.output == "json" else kube.render_status(rows))
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
    result = plan.build(env, args.preset, args.nodes, args.vcpu_quota)
    print(to_json(plan.as_data(result)) if args.output == "json" else plan.render(result))
    return EXIT_PROBLEM if result.exceeded else 0


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


def _doctor(args: argparse.Namespace) -> int:
    from ops import doctor, images, kube

    env = _env(args)
    published, unknown = images.published_images(env)
    rows = doctor.run(env, kube.api_client(args.kubeconfig, args.context), images=published, images_unknown=unknown)
    return _check_report(args, rows, {"environment": env.name, "cluster": env.cluster_name},
                         f"doctor {env.name}: cluster {env.cluster_name}")


def _model(args: argparse.Namespace) -> int:
    from ops import model

    return model.run(args, lambda: _env(args))


def _data(args: argparse.Namespace) -> int:
    from ops import data, images, kube

    env = _env(args)
    data.source(env, args.source)  # an unknown source is one line before any AWS call
    manifest = data.render(env, args.source, image=args.image or images.published_image(env, "cpu"))
    if args.dry_run:
        import yaml

        print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return 0
    api = kube.api_client(args.kubeconfig, args.context)
    name = data.start(api, manifest)
    print(f"created Job {manifest['metadata']['namespace']}/{name}")
    return 0 if args.no_follow else (EXIT_PROBLEM if data.follow(api, name, manifest["metadata"]["namespace"]) else 0)


def _module_command(module: str) -> Any:
    def handler(args: argparse.Namespace) -> int:
        import importlib

        return importlib.import_module(f"ops.{module}").run(args)
    return handler


_COMMANDS = {
    "local": _module_command("local"), "validate": _module_command("validate"),
    "synth-summary": _module_command("synth_summary"), "stacks": _module_command("stacks"),
    "preflight": _preflight, "az-recommend": _az_recommend, "kubeconfig": _kubeconfig, "whoami": _whoami,
    "submit": _start_or_submit, "start": _start_or_submit, "stop": _stop, "status": _status, "logs": _logs,
    "delete": _delete, "plan": _plan, "capacity-block": _capacity_block, "doctor": _doctor,
    "model": _model, "data": _data,
}
