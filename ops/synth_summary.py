"""`python -m ops synth-summary --env dev`: synthesize offline and print what a deploy would create.

What a user checks before paying: the stacks and their resource counts, each node group (instance
type, zone, sizes, EFA interfaces, capacity), FSx (capacity, throughput, zone), and the addresses
the training subnet needs with every group at maxSize against what it has. Node groups and FSx
are read back from the synthesized templates, so the summary shows what will be deployed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from config import Environment, paths
from config.eks_versions import BY_VERSION as EKS_VERSIONS
from config.kubernetes import NODEGROUP_LABEL
from config.outputs import CLUSTER_STACK_ID, NETWORK_STACK_ID, STORAGE_STACK_ID
from ops import cost, envconfig, proc
from ops.errors import OpsError
from ops.output import records, to_json
from ops.prices import EKS_CLUSTER_HOURLY_USD, EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD

REPO_ROOT = Path(__file__).resolve().parent.parent
CDK = REPO_ROOT / "node_modules" / ".bin" / "cdk"
# A prod synth takes about a minute on a 2-core machine; this bounds a wedged node or python.
SYNTH_TIMEOUT_S = 900
JSII_QUIET = {"JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}


def synth_command(env_name: str, outdir: Path) -> list[str]:
    return [str(CDK), "synth", "--no-notices", "--no-version-reporting", "--quiet",
            "-c", f"env={env_name}", "--output", str(outdir)]


# ---- reading the cloud assembly -------------------------------------------------------------

class Assembly:
    """The stage's templates in a cloud assembly directory, by stack id (Network, Cluster, ...)."""

    def __init__(self, outdir: Path, env_name: str):
        stage_dir = outdir / f"assembly-{env_name}"
        manifest = json.loads((stage_dir / "manifest.json").read_text())
        self.templates: dict[str, dict] = {}
        self.sizes: dict[str, int] = {}
        for artifact in manifest["artifacts"].values():
            if artifact["type"] != "aws:cloudformation:stack":
                continue
            name = artifact.get("displayName", "").split("/")[-1]
            path = stage_dir / artifact["properties"]["templateFile"]
            self.templates[name] = json.loads(path.read_text())
            self.sizes[name] = path.stat().st_size

    def resources(self, stack: str, type_: str) -> dict[str, dict]:
        return {k: r for k, r in self.templates.get(stack, {}).get("Resources", {}).items() if r["Type"] == type_}

    def subnet_zone(self, ref) -> str:
        """The zone of a subnet given as a Ref or an import from the Network stack."""
        if isinstance(ref, dict) and "Fn::ImportValue" in ref:
            export = ref["Fn::ImportValue"]
            for output in self.templates.get(NETWORK_STACK_ID, {}).get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == export:
                    ref = output["Value"]
        logical = ref.get("Ref") if isinstance(ref, dict) else None
        subnet = self.templates.get(NETWORK_STACK_ID, {}).get("Resources", {}).get(logical or "", {})
        return subnet.get("Properties", {}).get("AvailabilityZone", "?")


# ---- the summary ----------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows)]
    fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip(), *(fmt.format(*map(str, row)).rstrip() for row in rows)]


def _nodegroup_rows(asm: Assembly) -> list[list[str]]:
    rows = []
    templates = asm.templates.get(CLUSTER_STACK_ID, {}).get("Resources", {})
    for props in (r["Properties"] for r in asm.resources(CLUSTER_STACK_ID, "AWS::EKS::Nodegroup").values()):
        launch = templates.get(props.get("LaunchTemplate", {}).get("Id", {}).get("Ref", ""), {})
        data = launch.get("Properties", {}).get("LaunchTemplateData", {})
        efa = sum(1 for i in data.get("NetworkInterfaces", []) if i.get("InterfaceType", "").startswith("efa"))
        capacity = props.get("CapacityType", "ON_DEMAND")
        if "CapacityReservationSpecification" in data:
            target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"]
            capacity += f" {target}"
        if "Placement" in data:
            capacity += " +placement group"
        zones = sorted({asm.subnet_zone(s) for s in props.get("Subnets", [])})
        scaling = props["ScalingConfig"]
        # The launch template names the instance type (cdk_constructs/node_launch_template.py).
        types = props.get("InstanceTypes") or [data.get("InstanceType", "?")]
        rows.append([props["Labels"].get(NODEGROUP_LABEL, "?"), ",".join(types),
                     ",".join(zones), scaling["MinSize"], scaling["MaxSize"], scaling["DesiredSize"], efa, capacity])
    return rows


def _fsx_lines(asm: Assembly) -> list[str]:
    lines = []
    for fs in asm.resources(STORAGE_STACK_ID, "AWS::FSx::FileSystem").values():
        props = fs["Properties"]
        lustre = props["LustreConfiguration"]
        capacity, per_tib = props["StorageCapacity"], lustre["PerUnitStorageThroughput"]
        zones = ",".join(asm.subnet_zone(s) for s in props["SubnetIds"])
        backups = lustre.get("AutomaticBackupRetentionDays", 0)
        lines.append(f"  {lustre['DeploymentType']} {capacity} GiB, {per_tib} MB/s/TiB = {capacity / 1024 * per_tib:.0f} MB/s, "
                     f"zone {zones}, {lustre.get('DataCompressionType', 'no')} compression, "
                     f"backups {f'{backups} days' if backups else 'off'}, on stack delete: {fs.get('DeletionPolicy', 'Delete')}")
    for dra in asm.resources(STORAGE_STACK_ID, "AWS::FSx::DataRepositoryAssociation").values():
        p = dra["Properties"]
        ways = [w for w, key in (("import", "AutoImportPolicy"), ("export", "AutoExportPolicy")) if key in p.get("S3", {})]
        lines.append(f"  {p['FileSystemPath']} <-> {p['DataRepositoryPath']} (auto {' and '.join(ways)})")
    return lines or ["  none"]


def _support_line(asm: Assembly) -> str:
    """The control plane's Kubernetes version, upgrade policy and what each costs, read from the template."""
    [cluster] = asm.resources(CLUSTER_STACK_ID, "AWS::EKS::Cluster").values() or [{"Properties": {}}]
    props = cluster["Properties"]
    version = props.get("Version", "?")
    # The EKS API's default when the template says nothing.
    policy = props.get("UpgradePolicy", {}).get("SupportType", "EXTENDED")
    row = EKS_VERSIONS.get(version)
    standard = f"${EKS_CLUSTER_HOURLY_USD:.2f}/hour"
    if row is None:
        return f"Kubernetes {version}: not in the recorded EKS calendar. Upgrade policy {policy}"
    head = f"Kubernetes {version}: EKS standard support until {row.end_of_standard_support}. Upgrade policy {policy}: "
    if policy == "STANDARD":
        return head + (f"the control plane costs {standard} and EKS upgrades it to the next version when "
                       "standard support ends")
    return head + (f"the control plane costs {standard} until then, then "
                   f"${EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD:.2f}/hour in extended support until "
                   f"{row.end_of_extended_support}")


def _admin_rows(config: Environment) -> list[list[str]]:
    """Each cluster-admin principal, its account, and whether that is another account than the
    environment's: a role there is administered by whoever controls that account."""
    rows = []
    for arn in config.admin_principal_arns:
        account = arn.split(":")[4]
        rows.append([arn, account, "ANOTHER ACCOUNT" if account != config.account else "this account"])
    return rows


ADMIN_HEADERS = ["principal", "account", "whose"]
IP_HEADERS = ["group", "max nodes", "IPs/node", "IPs"]
STACK_HEADERS = ["stack", "resources", "template KB"]
NODEGROUP_HEADERS = ["name", "instance", "zones", "min", "max", "desired", "EFA", "capacity"]


def _ip_rows(config: Environment) -> list[list]:
    system = config.system_nodegroup
    rows = [["system (if all in this zone)", system.max_size, system.instance_type.ips_per_node,
             system.max_size * system.instance_type.ips_per_node]]
    rows += [[g.name, g.max_size, g.instance_type.ips_per_node, g.max_size * g.instance_type.ips_per_node]
             for g in config.training_nodegroups]
    return rows


def summary_data(config: Environment, outdir: Path) -> dict:
    """What the summary shows, as data: `synth-summary -o json` prints it, `summarize` renders it."""
    asm = Assembly(outdir, config.name)
    needed, available = config.training_subnet_ips_at_max(), config.private_subnet_capacity
    return {
        "environment": {"name": config.name, "account": config.account, "region": config.region,
                        "kubernetes_version": config.kubernetes_version, "removal_policy": config.removal_policy},
        "outdir": str(outdir),
        "support": _support_line(asm),
        "stacks": records(STACK_HEADERS, [[f"{config.name}/{name}", len(t.get("Resources", {})),
                                           round(asm.sizes[name] / 1024, 1)] for name, t in asm.templates.items()]),
        "nodegroups": records(NODEGROUP_HEADERS, _nodegroup_rows(asm)),
        "cluster_admins": records(ADMIN_HEADERS, _admin_rows(config)),
        "fsx": [line.strip() for line in _fsx_lines(asm)],
        "training_subnet": {"availability_zone": config.training_availability_zone,
                            "mask": config.private_subnet_mask, "ips_needed_at_max": needed,
                            "ips_usable": available, "groups": records(IP_HEADERS, _ip_rows(config))},
        "cost": {"prices": cost.price_note(config),
                 "scenarios": [{"name": sc.name, "hourly_usd": round(sc.hourly, 2),
                                "monthly_usd": round(sc.monthly, 2), "partial": sc.partial,
                                "items": [{"item": i.label, "hourly_usd": i.hourly} for i in sc.items]}
                               for sc in cost.scenarios(config)]},
    }


def _rows(items: list[dict]) -> list[list]:
    return [list(item.values()) for item in items]


def summarize(config: Environment, outdir: Path) -> str:
    data = summary_data(config, outdir)
    env, subnet = data["environment"], data["training_subnet"]
    lines = [f"Environment {env['name']}: account {env['account']}, region {env['region']}, "
             f"Kubernetes {env['kubernetes_version']}, removalPolicy {env['removal_policy']}",
             f"Synthesized offline into {outdir}", data["support"], "", "Stacks"]
    lines += _table(STACK_HEADERS, [[s, r, f"{kb:.1f}"] for s, r, kb in _rows(data["stacks"])])
    lines += ["", "Node groups", *_table(NODEGROUP_HEADERS, _rows(data["nodegroups"]))]
    lines += ["", "Cluster admins (access entries with AmazonEKSClusterAdminPolicy)",
              *_table(ADMIN_HEADERS, _rows(data["cluster_admins"]))]
    foreign = [a["principal"] for a in data["cluster_admins"] if a["whose"] != "this account"]
    if foreign:
        lines.append(f"  WARNING: {len(foreign)} admin principal(s) belong to another account than {env['account']}: "
                     "whoever controls that account administers this cluster")
    lines += ["", "FSx for Lustre", *(f"  {line}" for line in data["fsx"]), ""]
    needed, available = subnet["ips_needed_at_max"], subnet["ips_usable"]
    lines += [f"IP addresses in the training subnet ({subnet['availability_zone']}, /{subnet['mask']}): "
              f"{needed} needed at maxSize of {available} usable ({100 * needed / available:.0f}%)",
              *_table(IP_HEADERS, _rows(subnet["groups"])), "", *cost.render(config)]
    return "\n".join(lines)


def cdk_synth(env_name: str, outdir: Path) -> subprocess.CompletedProcess:
    try:
        return proc.run(synth_command(env_name, outdir), cwd=REPO_ROOT, env={**os.environ, **JSII_QUIET},
                        timeout=SYNTH_TIMEOUT_S)
    except FileNotFoundError:
        raise OpsError(f"{CDK.relative_to(REPO_ROOT)} not found; run `make install` first") from None
    except subprocess.TimeoutExpired:
        raise OpsError(f"cdk synth of {env_name} did not finish in {SYNTH_TIMEOUT_S} s") from None


def make_outdir(outdir: Path) -> None:
    """Created here, not by cdk: node's recursive mkdir never returns for a path it cannot create
    whose parent exists (under /proc it alternates ENOENT and EEXIST forever, nodejs/node#27198
    and its kin), and that hung synth-summary with no output."""
    try:
        paths.output_dir(outdir)
    except paths.PathProblem as problem:
        raise OpsError(f"--outdir: {problem}") from None


def synth_and_summarize(env_name: str, outdir: Path, *, as_json: bool) -> int:
    """0 with the summary; 1 when `cdk synth` fails (its checks, cdk-nag among them, stop it).
    A bad environment is a ConfigError before any synth (the CLI prints one line, exit 2)."""
    config = envconfig.load(env_name)
    envconfig.load_pipeline_settings()  # app.py reads the pipeline on every synth: a bad one stops here
    make_outdir(outdir)
    result = cdk_synth(env_name, outdir)
    if result.returncode != 0:
        print(f"error: cdk synth failed (exit {result.returncode}):", file=sys.stderr)
        print(result.stderr.strip()[-4000:], file=sys.stderr)
        return 1
    print(to_json(summary_data(config, outdir)) if as_json else summarize(config, outdir))
    return 0
