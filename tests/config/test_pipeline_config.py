"""The pipeline settings: promotion order and the source connection are validated like environments."""

import copy
import json

import pytest

from config import ConfigError
from config.pipeline import load_pipeline, pipeline_settings
from tests.conftest import REPO_ROOT

CONTEXT = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def load(pipeline=None, promotion=None):
    return load_pipeline(
        CONTEXT["pipeline"] if pipeline is None else pipeline,
        CONTEXT["promotion"] if promotion is None else promotion,
        CONTEXT["environments"],
    )


def error_of(**kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        load(**kwargs)
    return err.value.line()


def with_pipeline(**changes):
    raw = copy.deepcopy(CONTEXT["pipeline"])
    raw.update(changes)
    return raw


def test_committed_pipeline_promotes_dev_then_prod_across_accounts():
    settings = load()
    assert [env.name for env in settings.stages] == ["dev", "prod"]
    assert settings.cross_account


def test_single_account_pipeline_needs_no_cross_account_keys():
    dev_account = CONTEXT["environments"]["dev"]["account"]
    assert not load(pipeline=with_pipeline(account=dev_account), promotion=["dev"]).cross_account


def test_promotion_names_must_be_defined_environments():
    assert error_of(promotion=["dev", "staging"]) == (
        "config error: promotion[1]: 'staging' is not an environment; defined are dev, prod"
    )


def test_promotion_must_not_repeat_an_environment():
    assert error_of(promotion=["dev", "dev"]) == "config error: promotion[1]: 'dev' is listed twice"


def test_promotion_must_not_be_empty():
    assert error_of(promotion=[]) == "config error: promotion: must list at least one environment"


def test_connection_arn_must_be_a_codeconnections_arn():
    line = error_of(pipeline=with_pipeline(connectionArn="arn:aws:s3:::bucket"))
    assert line.startswith("config error: pipeline.connectionArn: must be a CodeConnections ARN")


def test_unknown_pipeline_key_is_rejected():
    line = error_of(pipeline=with_pipeline(brnach="main"))
    assert line.startswith("config error: pipeline.brnach: unknown key; allowed keys are")


def test_repository_must_be_owner_slash_name():
    assert error_of(pipeline=with_pipeline(repository="just-a-name")) == (
        "config error: pipeline.repository: must be owner/name, got 'just-a-name'"
    )


@pytest.mark.parametrize("key, value, allowed", [
    ("account", "333333333333\n", "a 12-digit AWS account id"),
    ("branch", "main\n", "a branch name"),
    ("repository", "example-org/eks-distributed-training\n", "owner/name"),
    ("repository", "example-org/tr\u00e4ining", "owner/name"),
])
def test_a_pipeline_value_must_match_its_pattern_whole_and_in_ascii(key, value, allowed):
    """Python's `$` also matches before a final newline, and `\\w` matches any script's letters."""
    assert error_of(pipeline=with_pipeline(**{key: value})) == (
        f"config error: pipeline.{key}: must be {allowed}, got {value!r}")


def test_promotion_without_a_pipeline_is_refused_not_ignored():
    """A misspelt or removed `pipeline` would otherwise leave `promotion` doing nothing, and
    `make deploy` of a promoted environment unguarded."""
    with pytest.raises(ConfigError) as err:
        pipeline_settings(None, CONTEXT["promotion"], CONTEXT["environments"])
    assert err.value.line() == ("config error: promotion: is set but pipeline is not; add the pipeline section "
                                "(account, region, connectionArn, repository, branch) or remove promotion")
    assert pipeline_settings(None, None, CONTEXT["environments"]) is None
    assert [e.name for e in pipeline_settings(CONTEXT["pipeline"], ["dev"], CONTEXT["environments"]).stages] == ["dev"]
