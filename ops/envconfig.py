"""Read an environment from cdk.json context, the same source app.py reads.

The CLI cannot use `app.node.try_get_context` (no CDK app runs here), so it reads the
`context.environments` object from the file and hands it to the one parser in config/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from config import Environment, load_environment
from config.pipeline import PipelineSettings, load_pipeline
from ops.errors import OpsError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONTEXT_FILE = REPO_ROOT / "cdk.json"


def read_context(context_file: str | Path | None = None) -> dict:
    """The CDK context object of `context_file` (default cdk.json)."""
    path = Path(context_file) if context_file else DEFAULT_CONTEXT_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise OpsError(f"context file {path} not found") from None
    except json.JSONDecodeError as err:
        raise OpsError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(data, dict):
        raise OpsError(f"{path} must hold a JSON object")
    # A cdk.json keeps environments under "context"; a bare context file may hold them at the top.
    context = data.get("context", data)
    return context if isinstance(context, dict) else {}


def read_environments(context_file: str | Path | None = None) -> Any:
    return read_context(context_file).get("environments")


def load_pipeline_settings(context_file: str | Path | None = None) -> PipelineSettings | None:
    """The pipeline's settings as app.py parses them; None when no pipeline is configured."""
    context = read_context(context_file)
    if context.get("pipeline") is None:
        return None
    return load_pipeline(context["pipeline"], context.get("promotion"), context.get("environments"))


def load(env_name: str, context_file: str | Path | None = None) -> Environment:
    """The typed Environment; ConfigError (one line via .line()) when it is unknown or invalid."""
    return load_environment(read_environments(context_file), env_name)
