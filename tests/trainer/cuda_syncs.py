"""What torch's CUDA sync debug mode reports while something runs (GPU tests only)."""

import warnings

import torch


def synchronising_calls(run) -> list[str]:
    """The synchronising calls torch reports while `run()` runs. The mode's own notice ("... does
    not yet detect all synchronizing operations") is not one: it counted as one once and failed a
    GPU test on a line that is no sync."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [str(w.message) for w in caught if "called a synchronizing" in str(w.message)]
