"""The ops commands: one module each, found here by scanning this package.

A module `name_with_underscores.py` is the command `name-with-underscores`. Its contract:
  HELP         the one line `python -m ops --help` shows for it
  EPILOG       optional: text shown as written after its own --help
  Options      a frozen dataclass of its typed options, one field per flag (ops/arguments.py
               holds the groups several commands share)
  add_arguments(parser)  declares its flags on its argparse parser
  run(options) -> int    does the command with an Options built from the parsed flags; the exit
               code is ops/cli.py's: 0 done, 1 a check failed; a user's error raises OpsError or
               ConfigError (one line, exit 2)
Adding a command is adding a module; nothing else lists them.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
from types import ModuleType

CONTRACT = ("HELP", "Options", "add_arguments", "run")


@functools.cache
def discovered() -> dict[str, ModuleType]:
    """Command name -> its module, in name order."""
    return scan(sys.modules[__name__])


def scan(package: ModuleType) -> dict[str, ModuleType]:
    """Every module of `package` (but those named _*), each checked against the contract."""
    found = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        missing = [name for name in CONTRACT if not hasattr(module, name)]
        if missing:
            raise TypeError(f"{module.__name__} is in the commands package but is no command: it lacks "
                            f"{', '.join(missing)}")
        found[command_name(module)] = module
    return found


def command_name(module: ModuleType) -> str:
    return module.__name__.rpartition(".")[2].replace("_", "-")
