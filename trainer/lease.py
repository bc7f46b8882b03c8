"""A lease on a checkpoint directory, so that two runs never write one directory at once.

DIR/LEASE is a small JSON record of its owner: the run, the host and process of its rank 0, when
it was taken and when it was last renewed. Rank 0 takes it before resume touches the directory
and renews it every RENEW_S seconds from a background thread while the run lives.

- "The same run" is torchrun's run id (TORCHELASTIC_RUN_ID, the --rdzv-id): on the cluster the
  PyTorchJob's rdzvId, the job's name and a digest of its spec, the same for every pod and every
  restart of that job and new for a resubmitted one; under `torchrun --standalone` a fresh id per
  invocation. Without torchrun it is host:pid. TRAINER_RUN_ID, where set, wins: a TrainJob
  (trainingApi v2) rendezvouses under a new id on every JobSet attempt, and names the run in it. A lease of the same run is taken over at once:
  torchrun restarting its workers, or a pod restarted on another node, is the same run.
- A lease of another run is refused while it is live, with one line naming its owner. Asked to
  wait (acquire(wait_s=...)), rank 0 first reads the record again every POLL_S seconds for up to
  wait_s: a run stopped moments ago (`ops stop OLD-RUN`, then `ops start PRESET`) keeps its lease
  for a restart that never comes, and refusing at once would spend the new job's restarts until
  it went stale. WAIT_S, the lease's life and one renewal more, is long enough for a stopped run's
  lease to go stale; a live run's is renewed all along and still refused, once WAIT_S has passed.
- It is stale, and taken over with a log line, when it was not renewed for TTL_S seconds, or at
  once when its owner ran on this host and its process is gone (a local run that was killed).
- A run that finishes releases it; one that stops early (preempted, failed) keeps it, so that
  no other run takes the directory while the job restarts; it goes stale if the job never does.

A record and not only flock: the owner must be named and must survive the process (a restarting
job keeps the directory), and a lock held by a dead client is the file system's to recover.
flock is still taken around reading and writing the record where the file system has it (FSx
for Lustre mounted with `flock`, k8s/fsx_storage.py), so two runs starting at the same moment
cannot both win.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from config.kubernetes import RUN_ID_ENV

from trainer.cli import write_whole
from trainer.log import log, warn

LEASE_FILE = "LEASE"
LOCK_FILE = ".LEASE.lock"
TTL_S = 120.0
RENEW_S = 20.0
POLL_S = 5.0
WAIT_S = TTL_S + RENEW_S


class LeaseHeld(Exception):
    """Another live run owns the directory."""

    def __init__(self, message: str, holder: str = "", age: float = 0.0):
        super().__init__(message)
        self.holder, self.age = holder, age


@dataclass(frozen=True)
class Owner:
    run: str
    host: str
    pid: int

    @classmethod
    def of_this_process(cls, env=os.environ) -> "Owner":
        host, pid = socket.gethostname(), os.getpid()
        return cls(env.get(RUN_ID_ENV) or env.get("TORCHELASTIC_RUN_ID") or f"{host}:{pid}", host, pid)

    def __str__(self) -> str:
        return f"run {self.run} (host {self.host}, pid {self.pid})"


class Lease:
    def __init__(self, directory: Path, owner: Owner, *, ttl_s: float = TTL_S, clock=time.time, sleep=time.sleep):
        self.path, self.lock_path = Path(directory) / LEASE_FILE, Path(directory) / LOCK_FILE
        self.owner, self.ttl_s, self.clock, self.sleep = owner, ttl_s, clock, sleep
        self.acquired_at: float | None = None
        self.lost_to: str | None = None  # set when another run took the lease over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- taking and giving back ------------------------------------------------------------------

    def acquire(self, *, wait_s: float = 0.0) -> None:
        """Take the lease, or raise LeaseHeld naming the live owner; with `wait_s`, only once a
        lease of another run has stayed live for that long. The flock is not held while waiting:
        the owner must be able to renew, and another run to look."""
        deadline = None
        while True:
            try:
                return self._try_acquire()
            except LeaseHeld as held:
                now = self.clock()
                if deadline is None and wait_s > 0:
                    deadline = now + wait_s
                    log(f"The lease on {self.path.parent} is held by {held.holder}, renewed {held.age:.0f} s ago; "
                        f"waiting up to {wait_s:.0f} s for it to go stale (a stopped run's does after "
                        f"{self.ttl_s:.0f} s)")
                if deadline is None or now >= deadline:
                    raise
                self.sleep(min(POLL_S, deadline - now))

    def _try_acquire(self) -> None:
        with self._locked():
            record = self._read()
            now = self.clock()
            if record is not None and record.get("run") != self.owner.run:
                age = now - float(record.get("renewed", 0))
                holder = _describe(record)
                if age < self.ttl_s and not self._gone(record):
                    raise LeaseHeld(f"{self.path.parent} is in use by {holder}, renewed {age:.0f} s ago; "
                                    f"a lease not renewed for {self.ttl_s:.0f} s is taken over, or remove "
                                    f"{self.path} once that run is gone", holder, age)
                why = "its process is gone" if self._gone(record) else f"not renewed for {age:.0f} s"
                warn(f"taking over the lease on {self.path.parent} from {holder}: {why}")
            elif record is not None:
                log(f"Lease on {self.path.parent} kept by {self.owner} (a restart of the same run)")
            self.acquired_at = now
            self._write(now)

    def release(self) -> None:
        """Give the lease back (a run that finished); only our own record is removed."""
        self.stop_renewing()
        with self._locked():
            record = self._read()
            if record is not None and record.get("run") == self.owner.run:
                self.path.unlink(missing_ok=True)

    # --- renewing -------------------------------------------------------------------------------

    def renew(self) -> None:
        with self._locked():
            record = self._read()
            if record is not None and record.get("run") != self.owner.run:
                self.lost_to = _describe(record)
                return
            self._write(self.clock())

    @contextmanager
    def held(self):
        """Whether this run still holds the lease, read now (the renewal thread finds a takeover
        only at its next renewal), and the record locked while the caller writes on that answer:
        another run cannot take the directory over between the check and the write."""
        with self._locked():
            record = self._read()
            if record is not None and record.get("run") != self.owner.run:
                self.lost_to = _describe(record)
            yield self.lost_to is None

    def start_renewing(self, every_s: float = RENEW_S) -> None:
        def loop():
            while not self._stop.wait(every_s) and self.lost_to is None:
                try:
                    self.renew()
                except OSError as exc:  # a file-system hiccup: the next renewal may succeed
                    warn(f"could not renew the lease {self.path}: {exc}")
                if self.lost_to is not None:  # said here only when a renewal found it (held() says its own)
                    warn(f"the lease on {self.path.parent} was taken over by {self.lost_to}; no more checkpoints "
                         "are written by this run")

        self._thread = threading.Thread(target=loop, name="checkpoint-lease", daemon=True)
        self._thread.start()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # --- the record -----------------------------------------------------------------------------

    def _read(self) -> dict | None:
        try:
            record = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return {"run": "(an unreadable lease file)", "renewed": 0}  # not ours; stale at once
        return record if isinstance(record, dict) else {"run": "(an unreadable lease file)", "renewed": 0}

    def _write(self, now: float) -> None:
        record = {**asdict(self.owner), "acquired": self.acquired_at, "renewed": now, "ttl_s": self.ttl_s}
        write_whole(self.path, json.dumps(record) + "\n")

    def _gone(self, record: dict) -> bool:
        """The owner ran on this host and its process no longer exists."""
        if record.get("host") != self.owner.host or not isinstance(record.get("pid"), int):
            return False
        try:
            os.kill(record["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    @contextmanager
    def _locked(self):
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:  # a mount without flock (Lustre's noflock: ENOSYS)
                if exc.errno not in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _describe(record: dict) -> str:
    return f"run {record.get('run')} (host {record.get('host')}, pid {record.get('pid')})"
