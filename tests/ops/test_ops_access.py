"""Preflight's cluster-access rows against a real moto server (STS, IAM), a loopback stand-in for
checkip, and a Stubber only for IAM's policy simulator, which moto does not answer."""

from __future__ import annotations

import json
from dataclasses import replace

import boto3
import pytest

from config.environment import EndpointAccess
from ops import access
from ops import aws as ops_aws
from ops.checks import FAIL, PASS, WARN
from ops.envconfig import load
from ops_fakes import DEAD_ENDPOINT, checkip_server, isolated_aws_env, run_ops, stubbed

ACCOUNT = "222222222222"
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"  # prod's adminRoleArns in cdk.json
DEV_ROLE = f"arn:aws:iam::{ACCOUNT}:role/teams/Developer"


def trust(*principals: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": list(principals)}, "Action": "sts:AssumeRole"}]})


def make_role(arn: str, *trusted: str) -> None:
    name, path = arn.rsplit("/", 1)[1], "/" + "/".join(arn.split(":role/", 1)[1].split("/")[:-1]) + "/"
    boto3.client("iam", region_name="us-east-1").create_role(
        RoleName=name, Path=path.replace("//", "/"), AssumeRolePolicyDocument=trust(*(trusted or (ACCOUNT,))))


def clients_as(role_arn: str | None = None) -> ops_aws.AwsClients:
    """Clients on moto with the default credentials, or with a session of `role_arn`."""
    if role_arn is None:
        return ops_aws.clients("us-east-1")
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=role_arn, RoleSessionName="alice@example.com")["Credentials"]
    session = boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                            aws_session_token=creds["SessionToken"], region_name="us-east-1")
    return ops_aws.clients("us-east-1", session)


def simulator(decision: str | None, role: str = ADMIN, source: str = DEV_ROLE):
    client, stub = stubbed("iam")
    if decision:
        stub.add_response("simulate_principal_policy",
                          {"EvaluationResults": [{"EvalActionName": "sts:AssumeRole", "EvalDecision": decision}]},
                          {"PolicySourceArn": source, "ActionNames": ["sts:AssumeRole"], "ResourceArns": [role]})
    stub.activate()
    return client, stub


def rows(env, clients, checkip_url=DEAD_ENDPOINT, decision=None):
    clients = replace(clients)
    clients.simulator, stub = simulator(decision)
    found = {r.name: r for r in access.checks(env, clients, checkip_url)}
    stub.assert_no_pending_responses()
    return found


@pytest.fixture
def prod():
    return load("prod")


@pytest.fixture
def public(prod):
    return replace(prod, endpoint_access=EndpointAccess("public", ("198.51.100.0/24", "192.0.2.8/29")))


@pytest.mark.parametrize("answer, status, words", [
    ("198.51.100.23", PASS, "public IP 198.51.100.23 is inside publicCidrs (198.51.100.0/24)"),
    ("203.0.113.9", FAIL, "203.0.113.9 is outside endpointAccess.publicCidrs (198.51.100.0/24, 192.0.2.8/29): "
                          "add 203.0.113.9/32"),
    ("<html>captive portal</html>", WARN, "could not learn this machine's public IP"),
])
def test_a_public_endpoint_admits_this_machine_only_if_its_ip_is_in_public_cidrs(public, answer, status, words):
    """Amazon EKS User Guide, cluster-endpoint.html: with public access limited to CIDR blocks, a
    client outside them cannot reach the API server."""
    with checkip_server(answer) as url:
        row = access.endpoint_row(public, url)
    assert row.status == status and words in row.reason, row


def test_an_unreachable_ip_service_is_a_warning_not_a_crash(public):
    row = access.endpoint_row(public, DEAD_ENDPOINT)
    assert row.status == WARN
    assert "could not learn this machine's public IP" in row.reason and "198.51.100.0/24" in row.reason


def test_a_private_endpoint_says_how_to_reach_it(prod):
    row = access.endpoint_row(prod)
    assert row.status == WARN
    assert "only from inside the VPC" in row.reason and "SSM Session Manager" in row.reason


def test_an_admin_role_that_does_not_exist_fails(aws, prod):
    found = rows(prod, clients_as())
    assert found["admin role PlatformAdmin"].status == FAIL
    assert f"{ADMIN} does not exist" in found["admin role PlatformAdmin"].reason
    assert found["cluster admin"].status == FAIL


def test_an_admin_role_configured_without_its_path_fails_naming_the_real_arn(aws, prod):
    make_role(f"arn:aws:iam::{ACCOUNT}:role/platform/PlatformAdmin")
    row = rows(prod, clients_as())["admin role PlatformAdmin"]
    assert row.status == FAIL
    assert f"the role's ARN is arn:aws:iam::{ACCOUNT}:role/platform/PlatformAdmin" in row.reason


def test_an_admin_role_in_another_account_is_a_warning(aws, prod):
    other = replace(prod, admin_role_arns=("arn:aws:iam::999999999999:role/PlatformAdmin",))
    row = rows(other, clients_as())["admin role PlatformAdmin"]
    assert row.status == WARN and "account 999999999999" in row.reason


def test_the_admin_role_itself_passes_and_needs_no_role_to_assume(aws, prod):
    make_role(ADMIN)
    clients = clients_as(ADMIN)
    found = rows(prod, clients)
    assert found["admin role PlatformAdmin"].status == PASS
    assert found["cluster admin"].status == PASS
    assert f"you are {ADMIN}" in found["cluster admin"].reason
    assert access.kubeconfig_command(prod, access.caller(clients))[-1] == "us-east-1"  # no --role-arn


def test_a_caller_the_admin_roles_trust_policy_names_can_assume_it(aws, prod):
    make_role(DEV_ROLE)
    make_role(ADMIN, DEV_ROLE)
    row = rows(prod, clients_as(DEV_ROLE))["cluster admin"]
    assert row.status == PASS and "its trust policy names you" in row.reason


@pytest.mark.parametrize("decision, status", [("allowed", PASS), ("implicitDeny", FAIL)])
def test_when_the_trust_policy_names_the_account_the_callers_own_policies_decide(aws, prod, decision, status):
    """IAM User Guide, reference_policies_evaluation-logic.html: a trust policy naming the account
    delegates to the account, so the caller's identity policies must also allow sts:AssumeRole."""
    make_role(DEV_ROLE)
    make_role(ADMIN, f"arn:aws:iam::{ACCOUNT}:root")
    clients = clients_as(DEV_ROLE)
    row = rows(prod, clients, decision=decision)["cluster admin"]
    assert row.status == status, row
    assert access.kubeconfig_command(prod, access.caller(clients))[-2:] == ["--role-arn", ADMIN]


def test_a_caller_the_trust_policy_does_not_admit_fails_naming_the_way_out(aws, prod):
    make_role(DEV_ROLE)
    make_role(ADMIN, f"arn:aws:iam::{ACCOUNT}:role/SomeoneElse")
    row = rows(prod, clients_as(DEV_ROLE))["cluster admin"]
    assert row.status == FAIL
    assert f"{DEV_ROLE} is not an admin principal" in row.reason and "deployerPrincipalArn" in row.reason


def test_the_deployer_principal_passes_from_its_session_arn(aws, prod):
    """A session ARN (arn:aws:sts::...:assumed-role/NAME/SESSION) carries no path; the caller is
    matched to deployerPrincipalArn through the role IAM names."""
    make_role(DEV_ROLE)
    env = replace(prod, deployer_principal_arn=DEV_ROLE)
    clients = clients_as(DEV_ROLE)
    who = access.caller(clients)
    assert who.arn.startswith(f"arn:aws:sts::{ACCOUNT}:assumed-role/Developer/") and who.principal_arn == DEV_ROLE
    row = rows(env, clients)["cluster admin"]
    assert row.status == PASS and "deployerPrincipalArn" in row.reason


def test_whoami_names_the_callers_principal_and_its_admin_path(aws, tmp_path):
    make_role(DEV_ROLE)
    make_role(ADMIN, DEV_ROLE)
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=DEV_ROLE, RoleSessionName="alice")["Credentials"]
    env = isolated_aws_env(tmp_path, aws)
    env.update(AWS_ACCESS_KEY_ID=creds["AccessKeyId"], AWS_SECRET_ACCESS_KEY=creds["SecretAccessKey"],
               AWS_SESSION_TOKEN=creds["SessionToken"])
    result = run_ops(["whoami", "--env", "prod"], env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"caller     arn:aws:sts::{ACCOUNT}:assumed-role/Developer/alice"
    assert lines[1] == f"principal  {DEV_ROLE} (the ARN deployerPrincipalArn takes)"
    assert lines[2] == f"account    {ACCOUNT} = environments.prod.account"
    assert lines[3] == f"admin      PASS: you can assume {ADMIN} (its trust policy names you)"
    assert lines[4] == f"kubeconfig aws eks update-kubeconfig --name prod-training --region us-east-1 --role-arn {ADMIN}"


def test_whoami_for_another_account_exits_1(aws, tmp_path):
    result = run_ops(["whoami", "--env", "dev"], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 1
    assert f"account    {ACCOUNT}, but environments.dev.account is 111111111111" in result.stdout


@pytest.mark.parametrize("configured", [f"arn:aws:iam::{ACCOUNT}:role/teams/developer",
                                        f"arn:aws:iam::{ACCOUNT}:role/DEVELOPER"])
def test_the_deployer_principal_is_the_caller_whatever_the_case_of_its_name(aws, prod, configured):
    """IAM User Guide, reference_iam-quotas.html ("IAM name requirements"): names of users and roles
    are unique within the account and "are not distinguished by case". EKS stores the principal's
    role or user id with the access entry (EKS API Reference, AccessEntry: principalArn), so both
    spellings name the one role; config refuses listing it twice for the same reason."""
    make_role(DEV_ROLE)
    env = replace(prod, deployer_principal_arn=configured)
    row = rows(env, clients_as(DEV_ROLE))["cluster admin"]
    assert row.status == PASS and f"you are {configured} (deployerPrincipalArn)" in row.reason, row


def test_a_trust_policy_naming_the_caller_in_another_case_names_the_caller(aws, prod):
    make_role(DEV_ROLE)
    make_role(ADMIN, f"arn:aws:iam::{ACCOUNT}:role/teams/DEVELOPER")
    row = rows(prod, clients_as(DEV_ROLE))["cluster admin"]
    assert row.status == PASS and "its trust policy names you" in row.reason, row


@pytest.mark.parametrize("other", [f"arn:aws:iam::{ACCOUNT}:user/Developer", "arn:aws:iam::999999999999:role/Developer",
                                   f"arn:aws:iam::{ACCOUNT}:role/Developers"])
def test_a_principal_of_another_kind_account_or_name_is_not_the_caller(other):
    assert not access.same_principal(other, DEV_ROLE)


@pytest.mark.parametrize("partition", ["aws", "aws-cn", "aws-us-gov"])
def test_a_trust_policy_naming_the_account_root_is_read_in_the_callers_partition(partition):
    """IAM User Guide, reference_policies_elements_principal.html: arn:PARTITION:iam::ACCOUNT:root
    names the account. In China or GovCloud the partition is aws-cn or aws-us-gov, and such a trust
    policy was read as admitting no one: preflight failed a caller whose account the role trusts."""
    who = access.Caller(f"arn:{partition}:sts::{ACCOUNT}:assumed-role/Developer/alice", ACCOUNT,
                        f"arn:{partition}:iam::{ACCOUNT}:role/teams/Developer", "role")
    assert access.trust_admits(json.loads(trust(f"arn:{partition}:iam::{ACCOUNT}:root")), who) == "account"
    assert access.trust_admits(json.loads(trust(f"arn:{partition}:iam::999999999999:root")), who) is None
