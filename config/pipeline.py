"""The pipeline's settings (cdk.json context `pipeline` and `promotion`), parsed and validated."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from config.environment import Environment, load_environment, parse_environments, read_account_and_region
from config.errors import ConfigError
from config.reader import ObjectReader, check_type, string_list

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
