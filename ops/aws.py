"""boto3 clients for the ops commands, and one-line explanations of AWS API failures.

Every client honours AWS_ENDPOINT_URL (botocore reads it), so tests point the whole CLI at a
moto server on loopback without any code path of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
from botocore.parsers import ResponseParserError

from ops.errors import OpsError

# Preflight is interactive: a few quick retries beat botocore's long default back-off, and a
# bounded timeout means an unreachable endpoint turns into a warn instead of a hang.
CLIENT_CONFIG = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20)

NO_CREDENTIALS = ("no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                  "AWS_SECRET_ACCESS_KEY, or run `aws sso login`")

_PERMISSION_CODES = {
    "AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException",
    "AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException", "ExpiredToken",
    "ExpiredTokenException", "SignatureDoesNotMatch",
}
_THROTTLING_CODES = {
    "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
    "RequestThrottled", "SlowDown",
}
_UNSUPPORTED_CODES = {"UnsupportedOperation", "InvalidAction", "NotImplemented", "OptInRequired",
                      "NoSuchResourceException"}


def error_code(err: Exception) -> str | None:
    if isinstance(err, ClientError):
        return err.response.get("Error", {}).get("Code")
    return None


def explain(err: Exception) -> str:
    """A one-line reason for an API failure a check cannot get past."""
    if isinstance(err, ClientError):
        code = error_code(err) or "Unknown"
        message = " ".join(str(err.response.get("Error", {}).get("Message", "")).split())
        if message.startswith("<"):  # an HTML error page, not an AWS error body
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            message = f"HTTP {status} with a non-AWS body"
        message = message[:160]
        operation = err.operation_name
        if code in _PERMISSION_CODES:
            return f"{operation} not permitted ({code}): grant it to this role or ask an admin"
        if code in _THROTTLING_CODES:
            return f"{operation} throttled ({code}); run preflight again in a minute"
        if code in _UNSUPPORTED_CODES:
            return f"{operation} not available here ({code}: {message})"
        return f"{operation} failed ({code}: {message})"
    if isinstance(err, NoCredentialsError):
        return NO_CREDENTIALS
    if isinstance(err, ResponseParserError):
        return "the endpoint answered something that is not an AWS response (unsupported operation?)"
    # Connection and timeout errors: keep the message short and on one line.
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:160]}"


@dataclass
class AwsClients:
    """The clients the ops commands use. `reservations` is its own EC2 client because capacity
    reservations and blocks are a separate concern (and an API moto does not answer), so they can
    be served by a different endpoint or a Stubber without touching the rest of EC2. `addons` is
    an EKS client of its own for the same reason (add-on versions and schemas)."""

    sts: Any
    ec2: Any
    reservations: Any
    quotas: Any
    eks: Any
    fsx: Any
    addons: Any
    autoscaling: Any = None  # the Auto Scaling groups behind managed node groups (ops capacity-block)
    iam: Any = None  # admin roles and the caller's own role (preflight's access rows, ops whoami)
    simulator: Any = None  # IAM's policy simulator, its own client: moto does not answer it
    ssm: Any = None  # the CDK bootstrap version parameter
    cloudformation: Any = None  # the CDKToolkit stack, the environment's Cluster stack
    logs: Any = None  # log groups a destroyed cluster left under the names its stack creates


def session(region: str) -> boto3.Session:
    return boto3.Session(region_name=region)


def clients(region: str, boto_session: boto3.Session | None = None) -> AwsClients:
    s = boto_session or session(region)

    def make(service: str) -> Any:
        try:
            return s.client(service, region_name=region, config=CLIENT_CONFIG)
        except NoRegionError:
            raise OpsError(f"no region for {service}; pass --region") from None

    return AwsClients(sts=make("sts"), ec2=make("ec2"), reservations=make("ec2"),
                      quotas=make("service-quotas"), eks=make("eks"), fsx=make("fsx"), addons=make("eks"),
                      autoscaling=make("autoscaling"), iam=make("iam"), simulator=make("iam"), ssm=make("ssm"),
                      cloudformation=make("cloudformation"), logs=make("logs"))


def assumed_credentials(sts: Any, role_arn: str, session_name: str, duration_s: int) -> dict:
    """AssumeRole's Credentials for `role_arn`; OpsError with the one-line reason when it cannot be assumed."""
    try:
        return sts.assume_role(RoleArn=role_arn, RoleSessionName=session_name,
                               DurationSeconds=duration_s)["Credentials"]
    except api_failure_types() as err:
        raise OpsError(explain(err)) from None


def credentials_session(credentials: dict, region: str) -> boto3.Session:
    """A session that signs with AssumeRole's `credentials`; it still honours AWS_ENDPOINT_URL."""
    return boto3.Session(aws_access_key_id=credentials["AccessKeyId"],
                         aws_secret_access_key=credentials["SecretAccessKey"],
                         aws_session_token=credentials["SessionToken"], region_name=region)


def caller_identity(sts: Any) -> dict:
    """GetCallerIdentity's answer (Account, Arn, UserId); OpsError when there are no credentials."""
    try:
        return sts.get_caller_identity()
    except NoCredentialsError:
        raise OpsError(NO_CREDENTIALS) from None


def caller_account(sts: Any) -> str:
    """The account the credentials belong to; OpsError when there are none."""
    return caller_identity(sts)["Account"]


def known_regions() -> list[str]:
    """Regions botocore's bundled endpoint data knows for EC2 (offline, no API call)."""
    return boto3.Session().get_available_regions("ec2")


def check_region(region: str) -> None:
    if region not in known_regions():
        raise OpsError(f"unknown region {region!r}; expected one such as us-east-1 or us-west-2")


def paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict]:
    items: list[dict] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(key, []))
    return items


def api_failure_types() -> tuple[type[Exception], ...]:
    """What a check catches to turn into a warn: any API answer or transport failure. A garbled
    body (an endpoint answering HTML, e.g. a proxy or a stand-in that lacks the operation) raises
    ResponseParserError, which is not a BotoCoreError."""
    return (ClientError, BotoCoreError, ResponseParserError)
