"""Who can reach and administer the cluster, checked before a deploy builds one nobody can use.

Three questions, each a preflight row:
- Can this machine reach the API endpoint? Public: is its public IP (what checkip answers) inside
  `endpointAccess.publicCidrs`? Private: only from inside the VPC, and the row says how.
- Does each `adminRoleArns` role exist (IAM GetRole)?
- Is the caller an admin principal (one of those roles, or `deployerPrincipalArn`), or can it
  assume one? Assuming a role needs the role's trust policy to admit the caller (read from
  GetRole) and, unless that policy names the caller itself, the caller's own identity policies to
  allow sts:AssumeRole on it (IAM SimulatePrincipalPolicy, which evaluates identity policies only).
  IAM User Guide, "Policy evaluation logic" (reference_policies_evaluation-logic.html).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from config import Environment
from ops.aws import AwsClients, api_failure_types, caller_identity, error_code, explain
from ops.checks import FAIL, PASS, WARN, Check

CHECKIP_URL = "https://checkip.amazonaws.com"
CHECKIP_URL_ENV = "OPS_CHECKIP_URL"  # tests and proxies point the IP check elsewhere
CHECKIP_TIMEOUT_S = 5
_ARN = re.compile(r"^arn:(?P<partition>[\w-]+):(?P<service>iam|sts)::(?P<account>\d{12}):(?P<resource>.+)$")


@dataclass(frozen=True)
class Caller:
    """The identity behind the credentials. `principal_arn` is the IAM role or user ARN an access
    entry or a trust policy names (an assumed-role session normalised to its role, path included
    when IAM tells it); None for the root user and federated users."""

    arn: str
    account: str
    principal_arn: str | None
    kind: str  # role, user, root, federated


def _split(arn: str) -> tuple[str, str, str] | None:
    """(account, resource type, name) of an IAM/STS ARN; the name drops any path."""
    m = _ARN.match(arn)
    if not m:
        return None
    kind, _, rest = m["resource"].partition("/")
    return m["account"], kind, rest.rsplit("/", 1)[-1] if kind in ("role", "user") else rest


def _principal_key(arn: str) -> tuple[str, str, str] | None:
    split = _split(arn)
    return (split[0], split[1], split[2].lower()) if split else None


def same_principal(a: str, b: str) -> bool:
    """Same account, type and name: an assumed-role session's ARN carries no path, and IAM names
    are unique per account whatever their case (IAM User Guide, reference_iam-quotas.html), so
    role/Deployer and role/deployer are one role, as config's duplicate check holds too."""
    return a == b or (_principal_key(a) is not None and _principal_key(a) == _principal_key(b))


def caller(aws: AwsClients) -> Caller:
    identity = caller_identity(aws.sts)
    arn, account = identity["Arn"], identity["Account"]
    m = _ARN.match(arn)
    resource = m["resource"] if m else ""
    if resource.startswith("assumed-role/"):
        name = resource.split("/")[1]
        fallback = f"arn:{m['partition']}:iam::{account}:role/{name}"
        try:
            return Caller(arn, account, aws.iam.get_role(RoleName=name)["Role"]["Arn"], "role")
        except api_failure_types():
            return Caller(arn, account, fallback, "role")  # the path stays unknown
    if resource.startswith("user/"):
        # IAM answers arn:aws:iam::...:user/path/name; keep that form whatever the service part says.
        return Caller(arn, account, f"arn:{m['partition']}:iam::{account}:{resource}", "user")
    if resource == "root":
        return Caller(arn, account, None, "root")
    return Caller(arn, account, None, "federated")


def admin_match(env: Environment, who: Caller) -> str | None:
    """Which configured admin principal the caller is, if any."""
    if who.principal_arn is None:
        return None
    return next((a for a in env.admin_principal_arns if same_principal(a, who.principal_arn)), None)


# ---- endpoint ------------------------------------------------------------------------------

def public_ip(url: str | None = None) -> str:
    """This machine's public IPv4 address as checkip sees it; OSError or ValueError if unknown."""
    url = url or os.environ.get(CHECKIP_URL_ENV) or CHECKIP_URL
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"{url} is not an http(s) URL")
    with urllib.request.urlopen(url, timeout=CHECKIP_TIMEOUT_S) as response:  # noqa: S310 (scheme checked)
        text = response.read(64).decode("ascii", "replace").strip()
    return str(ipaddress.IPv4Address(text))


def endpoint_row(env: Environment, checkip_url: str | None = None) -> Check:
    access = env.endpoint_access
    if access.type == "private":
        return Check("API endpoint", WARN,
                     f"private: kubectl works only from inside the VPC of {env.name} (a machine in its private "
                     "subnets via SSM Session Manager, or a VPN, Direct Connect or Transit Gateway link into it); "
                     "the Validation stack's runner checks the cluster from there")
    cidrs = ", ".join(access.public_cidrs)
    try:
        ip = public_ip(checkip_url)
    except (OSError, ValueError) as err:
        reason = " ".join(str(getattr(err, "reason", err)).split())[:120]
        return Check("API endpoint", WARN, f"could not learn this machine's public IP ({reason}); make sure it is "
                                           f"inside endpointAccess.publicCidrs ({cidrs})")
    address = ipaddress.IPv4Address(ip)
    inside = [c for c in access.public_cidrs if address in ipaddress.IPv4Network(c)]
    if inside:
        return Check("API endpoint", PASS, f"this machine's public IP {ip} is inside publicCidrs ({inside[0]})")
    return Check("API endpoint", FAIL, f"this machine's public IP {ip} is outside endpointAccess.publicCidrs "
                                       f"({cidrs}): add {ip}/32 (or your network's range), or kubectl will time out")


# ---- admin roles and the caller -------------------------------------------------------------

@dataclass
class _Role:
    arn: str  # as configured
    real_arn: str | None = None  # as IAM has it; None: not found or not looked up
    trust: dict | None = None


def _look_up_roles(env: Environment, aws: AwsClients, who: Caller, rows: list[Check]) -> list[_Role]:
    roles = []
    for arn in env.admin_role_arns:
        name = f"admin role {_split(arn)[2]}"
        account = _split(arn)[0]
        role = _Role(arn)
        roles.append(role)
        if account != who.account:
            rows.append(Check(name, WARN, f"{arn} is in account {account}; these credentials are for {who.account}, "
                                          "where IAM cannot look it up"))
            continue
        try:
            found = aws.iam.get_role(RoleName=_split(arn)[2])["Role"]
        except api_failure_types() as err:
            if error_code(err) == "NoSuchEntity":
                rows.append(Check(name, FAIL, f"{arn} does not exist: create it, or fix adminRoleArns (an access "
                                              "entry for a missing role admits no one)"))
            else:
                rows.append(Check(name, WARN, f"could not check {arn}: {explain(err)}"))
            continue
        if found["Arn"] != arn:
            rows.append(Check(name, FAIL, f"the role's ARN is {found['Arn']}, adminRoleArns says {arn}: use the "
                                          "ARN with its path"))
            continue
        role.real_arn, role.trust = found["Arn"], _document(found.get("AssumeRolePolicyDocument"))
        rows.append(Check(name, PASS, f"{arn} exists"))
    return roles


def _document(doc: Any) -> dict | None:
    if isinstance(doc, dict):
        return doc
    if isinstance(doc, str):  # IAM returns it URL-encoded in the query API
        try:
            return json.loads(urllib.parse.unquote(doc))
        except json.JSONDecodeError:
            return None
    return None


def _listify(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def trust_admits(trust: dict | None, who: Caller) -> str | None:
    """'direct' when the trust policy names the caller's principal, 'account' when it names the
    caller's account (identity policies must then allow it too), None when it admits neither."""
    found = None
    caller_arn = _ARN.match(who.arn)
    account_root = f"arn:{caller_arn['partition'] if caller_arn else 'aws'}:iam::{who.account}:root"
    for statement in _listify((trust or {}).get("Statement", [])):
        actions = _listify(statement.get("Action", []))
        if statement.get("Effect") != "Allow" or not any(a in ("sts:AssumeRole", "sts:*", "*") for a in actions):
            continue
        principal = statement.get("Principal", {})
        names = ["*"] if principal == "*" else _listify(principal.get("AWS", [])) if isinstance(principal, dict) else []
        for name in names:
            if who.principal_arn and same_principal(name, who.principal_arn):
                return "direct"
            if name in ("*", who.account, account_root):
                found = "account"
    return found


def _identity_allows(aws: AwsClients, who: Caller, role_arn: str) -> bool:
    result = aws.simulator.simulate_principal_policy(
        PolicySourceArn=who.principal_arn, ActionNames=["sts:AssumeRole"], ResourceArns=[role_arn])
    return all(r.get("EvalDecision") == "allowed" for r in result.get("EvaluationResults", [])) and bool(
        result.get("EvaluationResults"))


def access_row(env: Environment, aws: AwsClients, who: Caller, roles: list[_Role]) -> Check:
    matched = admin_match(env, who)
    if matched:
        which = "deployerPrincipalArn" if matched == env.deployer_principal_arn else "an adminRoleArns role"
        return Check("cluster admin", PASS, f"you are {matched} ({which}): `{' '.join(kubeconfig_command(env, who))}`")
    if who.principal_arn is None:
        return Check("cluster admin", WARN, f"{who.arn} ({who.kind}) cannot be checked: deploy as an IAM role or user, "
                                            "or set deployerPrincipalArn")
    unsure = []
    for role in roles:
        if role.real_arn is None:
            continue
        admits = trust_admits(role.trust, who)
        if admits is None:
            continue
        if admits == "direct":
            return Check("cluster admin", PASS, f"you can assume {role.arn} (its trust policy names you)")
        try:
            if _identity_allows(aws, who, role.arn):
                return Check("cluster admin", PASS, f"you can assume {role.arn} (trusted account, and your "
                                                    "policies allow sts:AssumeRole)")
        except api_failure_types() as err:
            unsure.append(f"{role.arn}: {explain(err)}")
    if unsure:
        return Check("cluster admin", WARN, f"your account is trusted but your own policies could not be simulated "
                                            f"({'; '.join(unsure)})")
    return Check("cluster admin", FAIL, f"{who.principal_arn} is not an admin principal and cannot assume any of "
                                        "adminRoleArns: set deployerPrincipalArn to it, or get sts:AssumeRole on an "
                                        "admin role (its trust policy and your policies)")


def kubeconfig_command(env: Environment, who: Caller | None, role_arn: str | None = None) -> list[str]:
    """The update-kubeconfig command for this caller: `role_arn` when given; no role to assume when
    the caller is an admin principal itself (a role assuming itself needs its own trust); else the
    first admin role."""
    if role_arn:
        return env.update_kubeconfig_command(role_arn)
    if who is not None and admin_match(env, who):
        return env.update_kubeconfig_command()
    return env.update_kubeconfig_command(env.admin_role_arns[0] if env.admin_role_arns else None)


def admin_role_rows(env: Environment, aws: AwsClients, who: Caller) -> list[Check]:
    """One row per admin role: does it exist."""
    rows: list[Check] = []
    _look_up_roles(env, aws, who, rows)
    return rows


def admin_rows(env: Environment, aws: AwsClients, who: Caller) -> list[Check]:
    """One row per admin role (does it exist), then the caller's own path to cluster admin."""
    rows: list[Check] = []
    roles = _look_up_roles(env, aws, who, rows)
    return rows + [access_row(env, aws, who, roles)]


def checks(env: Environment, aws: AwsClients, checkip_url: str | None = None) -> list[Check]:
    return [endpoint_row(env, checkip_url), *admin_rows(env, aws, caller(aws))]


def whoami(env: Environment, aws: AwsClients) -> tuple[str, bool]:
    """The caller, the ARN an access entry would take for it, and its path to cluster admin; ok is
    False when the credentials are for another account than the environment's."""
    who = caller(aws)
    same = who.account == env.account
    principal = who.principal_arn or f"none ({who.kind}: access entries need an IAM role or user)"
    lines = [f"caller     {who.arn}",
             f"principal  {principal}" + (" (the ARN deployerPrincipalArn takes)" if who.principal_arn else ""),
             f"account    {who.account}" + (f" = environments.{env.name}.account" if same else
                                            f", but environments.{env.name}.account is {env.account}")]
    if same:
        admin = admin_rows(env, aws, who)[-1]
        lines.append(f"admin      {admin.status.upper()}: {admin.reason}")
        lines.append(f"kubeconfig {' '.join(kubeconfig_command(env, who))}")
    return "\n".join(lines), same
