"""A pickle that runs code when loaded: what someone with write access to shared storage could
leave in a checkpoint or snapshot. Loading it creates `marker`, so a test can see whether it ran."""

from __future__ import annotations


class CreatesMarker:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")
