"""Entry point: `python -m ops <command>`."""

import sys

from ops.cli import main

sys.exit(main())
