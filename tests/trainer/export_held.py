"""trainer.hf with each output shard, once written, held until a signal comes: the export stops
with its staging folder part-filled, as a long one is when a pod is deleted. A line on stdout
says where it holds. Run as a script: tests/trainer/export_held.py export ARGS..."""

import signal
import sys

import safetensors.torch

_save_file = safetensors.torch.save_file


def _held_save_file(tensors, filename, metadata=None):
    _save_file(tensors, filename, metadata=metadata)
    print(f"held after writing {filename}", flush=True)
    signal.pause()  # returns, or raises, once a signal's handler has run


safetensors.torch.save_file = _held_save_file  # trainer.hf imports it at the call

if __name__ == "__main__":
    from trainer.cli import run_main
    from trainer.hf import main

    run_main(lambda: main(sys.argv[1:]))
