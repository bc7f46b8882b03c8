"""The pipeline's settings (cdk.json context `pipeline` and `promotion`), parsed and validated."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from config.environment import Environment
from config.environment_parser import load_environment, parse_environments, read_account_and_region
from config.errors import ConfigError
from config.outputs import PIPELINE_STACK_ID
from config.reader import ObjectReader, check_type, string_list

_CONNECTION_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:(codeconnections|codestar-connections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]{36}$",
    re.ASCII,
)
_REPOSITORY = re.compile(r"^[\w.-]+/[\w.-]+$", re.ASCII)
_BRANCH = re.compile(r"^[\w./-]{1,255}$")
# The CDK bootstrap's qualifier. cdk.json sets no `@aws-cdk/core:bootstrapQualifier`, so every stack
# synthesizes with DefaultStackSynthesizer's default and each account's bootstrap roles carry it.
BOOTSTRAP_QUALIFIER = "hnb659fds"


@dataclass(frozen=True)
class PipelineSettings:
    account: str
    region: str
    connection_arn: str
    repository: str
    branch: str
    stages: tuple[Environment, ...]  # in promotion order

    @property
    def cross_account(self) -> bool:
        """KMS keys for cross-account artifacts are needed only when some account differs."""
        return any(env.account != self.account for env in self.stages)


def load_pipeline(raw: Any, promotion: Any, environments: Any) -> PipelineSettings:
    r = ObjectReader(raw, "pipeline")
    account, region = read_account_and_region(r)
    connection = r.required_match(
        "connectionArn", _CONNECTION_ARN, "a CodeConnections ARN (arn:aws:codeconnections:<region>:<account>:connection/<uuid>)")
    repository = r.required_match("repository", _REPOSITORY, "owner/name")
    branch = r.required_match("branch", _BRANCH, "a branch name")
    r.finish()

    if promotion is None:
        raise ConfigError("promotion", "is required with pipeline: list environment names in promotion order")
    names = string_list(check_type(promotion, list, "promotion"), "promotion")
    if not names:
        raise ConfigError("promotion", "must list at least one environment")
    defined = parse_environments(environments)
    for i, name in enumerate(names):
        if name not in defined:
            raise ConfigError(f"promotion[{i}]", f"{name!r} is not an environment; defined are {', '.join(sorted(defined))}")
        if name in names[:i]:
            raise ConfigError(f"promotion[{i}]", f"{name!r} is listed twice")
    stages = tuple(load_environment(defined, name) for name in names)
    return PipelineSettings(account, region, connection, repository, branch, stages)


def pipeline_settings(raw: Any, promotion: Any, environments: Any) -> PipelineSettings | None:
    """The pipeline as context `pipeline` and `promotion` configure it; None without a pipeline.
    `promotion` alone is refused: with `pipeline` misspelt or removed it would do nothing, and
    `make deploy` of the environments it lists would no longer be stopped."""
    if raw is None:
        if promotion is not None:
            raise ConfigError("promotion", "is set but pipeline is not; add the pipeline section (account, region, "
                                           "connectionArn, repository, branch) or remove promotion")
        return None
    return load_pipeline(raw, promotion, environments)


def owned_by_pipeline(settings: PipelineSettings | None, env_name: str) -> bool:
    """An environment belongs to the pipeline when a pipeline is configured and `promotion` lists it:
    the pipeline deploys it, and `make deploy` leaves it alone unless forced."""
    return settings is not None and any(env.name == env_name for env in settings.stages)


def stack_selector(settings: PipelineSettings | None, env_name: str) -> str:
    """The cdk CLI pattern for the environment's stacks. For an environment the pipeline owns, the
    pipeline's own stage (`Pipeline/prod/*`): a deploy by hand then ships exactly the templates the
    pipeline ships, construct paths, tags and Kubernetes prune labels included. Otherwise app.py's
    stage (`dev/*`). Both carry the same stack names (`<env>-<stack id>`), so either pattern
    addresses the one set of CloudFormation stacks the environment has."""
    return f"{PIPELINE_STACK_ID}/{env_name}/*" if owned_by_pipeline(settings, env_name) else f"{env_name}/*"


def lookup_role_name(account: str, region: str) -> str:
    """The read-only role `cdk bootstrap` creates in every account and region (its template's
    LookupRole: the ReadOnlyAccess managed policy, kms:Decrypt denied, trusted by the accounts given
    to --trust and --trust-for-lookup). The pipeline's preflight step reads each environment as it."""
    return f"cdk-{BOOTSTRAP_QUALIFIER}-lookup-role-{account}-{region}"
