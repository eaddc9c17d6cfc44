"""The children of ``ferryman up`` (and of the benchmark platforms): started, restarted
with backoff when they crash, stopped by PID, and on Linux told to stop when their parent
dies (``PR_SET_PDEATHSIG``), even by SIGKILL."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

STOP_TIMEOUT_S = 30.0
RESTART_BACKOFF_S = 0.5
"""A crashed child's first restart waits this long; each quick crash after doubles it."""
MAX_RESTART_BACKOFF_S = 10.0
STABLE_S = 30.0
"""A child that ran this long before crashing starts its backoff afresh."""
PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal a child receives when the thread that forked it dies."""


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook that makes a child receive SIGTERM when this process dies (Linux;
    None elsewhere). prctl is looked up here, before any fork: the hook only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return hook


@dataclass
class Spec:
    """How to start a child again: its command line and extra environment."""

    args: list[str]
    env: dict[str, str] | None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    """When a crashed child is due to start again (None: it is running)."""


@dataclass
class Platform:
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    quiet: bool = False
    """Discard the children's output (benchmarks) instead of passing it to our stderr."""
    specs: dict[str, Spec] = field(default_factory=dict)
    _hook: Callable[[], None] | None = field(default_factory=_parent_death_signal)

    def start(self, name: str, *args: str) -> None:
        """Start ``ferryman serve <args>``."""
        self.start_command(name, ["serve", *args])

    def start_command(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``ferryman <args>`` as a child process."""
        self.specs[name] = Spec(args, env)
        self.processes.append((name, self._spawn(name)))

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        spec = self.specs[name]
        spec.started_at, spec.restart_at = time.monotonic(), None
        # Children's stdout goes to our stderr: our stdout carries only what `up` prints (--json).
        output = subprocess.DEVNULL if self.quiet else sys.stderr
        return subprocess.Popen(
            [sys.executable, "-m", "ferryman_server.cli", *spec.args],
            env={**os.environ, **(spec.env or {})},
            stdout=output,
            stderr=output if self.quiet else None,
            preexec_fn=self._hook,  # safe beside threads: it only calls prctl, resolved before forking
        )

    def run_once(self, args: list[str], stdout: int | IO[str] | None) -> subprocess.Popen[bytes]:
        """Start ``ferryman <args>`` to run to its end: not restarted, but told to stop when
        this process dies, as every child is."""
        command = [sys.executable, "-m", "ferryman_server.cli", *args]
        return subprocess.Popen(command, stdout=stdout, preexec_fn=self._hook)

    def check(self) -> None:
        """Raise if a child has exited (while starting up, a crash is a failure to start)."""
        for name, proc in self.processes:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}")

    def supervise(self, log: Callable[[str], None]) -> None:
        """Restart children that exited, each after its backoff; call it every poll."""
        now = time.monotonic()
        for i, (name, proc) in enumerate(self.processes):
            spec = self.specs[name]
            if proc.poll() is None:
                continue
            if spec.restart_at is None:
                if now - spec.started_at >= STABLE_S:
                    spec.restarts = 0
                backoff = min(MAX_RESTART_BACKOFF_S, RESTART_BACKOFF_S * 2**spec.restarts)
                spec.restart_at = now + backoff
                log(f"{name} exited with code {proc.returncode}; restarting it in {backoff:g} s")
            elif now >= spec.restart_at:
                spec.restarts += 1
                self.processes[i] = (name, self._spawn(name))
                log(f"{name} restarted (pid {self.processes[i][1].pid})")

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.processes}

    def stop(self) -> None:
        for _, proc in reversed(self.processes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for _, proc in self.processes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
