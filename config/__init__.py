"""Pure-Python configuration: the environment schema, the instance-type table, the job presets.

No CDK imports here: the trainer image and the ops CLI read these modules too.
"""

from config.environment import Environment, Nodegroup
from config.environment_parser import load_environment
from config.errors import ConfigError
from config.instance_types import INSTANCE_TYPES, InstanceType

__all__ = ["ConfigError", "Environment", "INSTANCE_TYPES", "InstanceType", "Nodegroup", "load_environment"]
