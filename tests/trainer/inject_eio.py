"""trainer.llm (or trainer.vision, by the first argument) with the checkpoint reader of one rank
failing as a flaky file-system client would: OSError(EIO) from FileSystemReader.read_data.
Run by torchrun as a script: tests/trainer/inject_eio.py llm ARGS..."""

import errno
import os
import sys

from torch.distributed.checkpoint import FileSystemReader

FAILING_RANK = os.environ.get("INJECT_EIO_RANK", "1")
_read_data = FileSystemReader.read_data


def _failing_read_data(self, plan, planner):
    if os.environ.get("RANK") == FAILING_RANK:
        raise OSError(errno.EIO, "Input/output error (injected)", str(self.path))
    return _read_data(self, plan, planner)


FileSystemReader.read_data = _failing_read_data

if __name__ == "__main__":
    from importlib import import_module

    from trainer.cli import run_main

    workload = import_module(f"trainer.{sys.argv[1]}")
    run_main(lambda: workload.main(sys.argv[2:]), finalize=False)
