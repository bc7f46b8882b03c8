"""What a job preset runs: some of one trainer's options, with their values."""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from config.errors import ConfigError
from config.options import build, leaf, leaves, render


class Workload:
    """Values for some options of one trainer (a job configuration class of config/workloads/),
    by their flat names (`batch_size` for --batch-size), checked against the trainer's own
    declarations when made: an unknown name or a value the trainer would refuse is a ConfigError
    naming the flag. An option the preset leaves out keeps the trainer's default.

    `argv(job_dir)` asks for them in the order of the trainer's --help, then for the outputs in
    the job's folder (checkpoints and metrics, or the snapshot)."""

    config: ClassVar[type]

    def __init__(self, **values: Any):
        options = {item.dest: item for item in leaves(self.config)}
        for name, value in values.items():
            if name not in options:
                raise ConfigError(f"{self.module} {name}", f"not an option of {self.module}; options are "
                                                           f"{', '.join(options)}")
            try:
                options[name].typed(value)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                raise ConfigError(f"{self.module} {options[name].flag}", str(exc)) from None
        object.__setattr__(self, "_values", dict(values))

    @property
    def module(self) -> str:
        """The trainer module torchrun runs."""
        return self.config.module

    @property
    def values(self) -> dict[str, Any]:
        """The values the preset gives, by flat name, in the order it gave them."""
        return dict(self._values)

    @property
    def trainer_config(self):
        """The trainer's configuration with these values, as its parser would make it (before
        the trainer resolves anything from files)."""
        return build(self.config, {name: leaf(self.config, name).typed(value) for name, value in self._values.items()})

    def argv(self, job_dir: str) -> list[str]:
        return render(self.config, self._values) + render(self.config, self.config.job_outputs(job_dir))

    def __getattr__(self, name: str) -> Any:
        """An option's value: the preset's, else the trainer's default (AttributeError: no such option)."""
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        try:
            return leaf(self.config, name).default
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values == self._values

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self._values.items()))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"
