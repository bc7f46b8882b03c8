"""Read an environment from cdk.json context, the same source app.py reads.

The CLI cannot use `app.node.try_get_context` (no CDK app runs here), so it reads the
`context.environments` object from the file and hands it to the one parser in config/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config import ConfigError, Environment, load_environment
from config.paths import PathProblem, read_json
from config.pipeline import PipelineSettings, pipeline_settings
from ops.errors import OpsError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONTEXT_FILE = REPO_ROOT / "cdk.json"


def read_context(context_file: str | Path | None = None) -> dict:
    """The CDK context object of `context_file` (default cdk.json)."""
    path = Path(context_file) if context_file else DEFAULT_CONTEXT_FILE
    try:
        data = read_json(path)
    except PathProblem as problem:
        raise OpsError(f"--context-file: {problem}" if context_file else str(problem)) from None
    # A cdk.json keeps environments under "context"; a bare context file may hold them at the top.
    context = data.get("context", data)
    return context if isinstance(context, dict) else {}


def read_environments(context_file: str | Path | None = None) -> Any:
    return read_context(context_file).get("environments")


def load_pipeline_settings(context_file: str | Path | None = None) -> PipelineSettings | None:
    """The pipeline's settings as app.py parses them; None when no pipeline is configured."""
    context = read_context(context_file)
    return pipeline_settings(context.get("pipeline"), context.get("promotion"), context.get("environments"))


def load(env_name: str, context_file: str | Path | None = None) -> Environment:
    """The typed Environment; ConfigError (one line via .line()) when it is unknown or invalid."""
    try:
        return load_environment(read_environments(context_file), env_name)
    except ConfigError as err:
        if not context_file:
            raise
        # The field's path alone would send the reader to cdk.json; say which file holds it.
        raise ConfigError(f"--context-file {context_file}: {err.path}", err.message) from None
