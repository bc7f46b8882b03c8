"""The pipeline's settings (cdk.json context `pipeline` and `promotion`), parsed and validated."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from config.environment import Environment, load_environment, parse_environments
from config.errors import ConfigError
from config.reader import ObjectReader, check_type, string_list

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_CONNECTION_ARN = re.compile(
    r"^arn:aws(-[a-z]+)*:(codeconnections|codestar-connections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]{36}$"
)
_REPOSITORY = re.compile(r"^[\w.-]+/[\w.-]+$")
_BRANCH = re.compile(r"^[\w./-]{1,255}$")


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
    account = r.required("account", str)
    if not _ACCOUNT.match(account):
        raise ConfigError(r.at("account"), f"must be a 12-digit AWS account id, got {account!r}")
    region = r.required("region", str)
    if not _REGION.match(region):
        raise ConfigError(r.at("region"), f"must be an AWS region such as us-west-2, got {region!r}")
    connection = r.required("connectionArn", str)
    if not _CONNECTION_ARN.match(connection):
        raise ConfigError(r.at("connectionArn"),
                          "must be a CodeConnections ARN (arn:aws:codeconnections:<region>:<account>:connection/<uuid>)")
    repository = r.required("repository", str)
    if not _REPOSITORY.match(repository):
        raise ConfigError(r.at("repository"), f"must be owner/name, got {repository!r}")
    branch = r.required("branch", str)
    if not _BRANCH.match(branch):
        raise ConfigError(r.at("branch"), f"must be a branch name, got {branch!r}")
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
