"""`python -m ops <command>`: argument parsing and the one place errors become one line.

Exit codes, the same for every command:
  0  done, and every check it made passed
  1  the command ran and a check failed (a preflight fail, a limit OVER in plan, a validation
     check, a local job that failed, cdk synth stopped by a check)
  2  usage or configuration error, or an unmet precondition (no credentials or kubeconfig,
     API server unreachable, a tool missing): one line on stderr, never a traceback
A bug (an unexpected exception) exits 1 with one line naming the command and the file in the
temporary directory ($TMPDIR, else /tmp) that holds the full trace: ops-crash-<time>-<random>.txt.
Commands that print tables take `-o json` for one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from config import ConfigError
from config.errors import one_line
from config.kubernetes import EXIT_INTERRUPTED, EXIT_USAGE
from ops import commands
from ops.arguments import typed
from ops.errors import EXIT_PROBLEM, OpsError, report_crash


class _Parser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we promise one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = " ".join(self.prog.split()[1:])  # "ops plan" -> "plan"; "ops" -> ""
        hint = f"python -m ops {command} --help".replace("  ", " ")
        print(f"error: {message} (see `{hint}`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ops", description=__doc__.splitlines()[0],
                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module in commands.discovered().items():
        epilog = getattr(module, "EPILOG", None)
        extra = {"epilog": epilog, "formatter_class": argparse.RawDescriptionHelpFormatter} if epilog else {}
        module.add_arguments(sub.add_parser(name, help=module.HELP, **extra))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    namespace = build_parser().parse_args(argv)
    command = commands.discovered()[namespace.command]
    try:
        return command.run(typed(command.Options, namespace))
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
    except OpsError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:  # an AWS or Kubernetes failure outside a check: still one line
        from ops.aws import api_failure_types, explain

        if not isinstance(err, api_failure_types()):
            named = " ".join(a for a in (namespace.command, getattr(namespace, "subcommand", None)) if a)
            report_crash(named, argv, err)
            return EXIT_PROBLEM
        print(f"error: {explain(err)}", file=sys.stderr)
    return EXIT_USAGE
