"""A pybroker node run as a child process, for the real-client suites.

Contract with the broker (see tests/clients/FINDINGS.md):
``python -m pybroker --override node.id=N --override listeners=PLAINTEXT://127.0.0.1:0
--override log.dirs=DIR [--override k=v ...]``; once it serves, it writes a line containing
``listening on PLAINTEXT://127.0.0.1:<port>`` to stderr. SIGTERM is a clean shutdown (exit 0,
``.kafka_cleanshutdown`` written to each log dir); the node may be restarted on the same log dir,
and is then given the port it bound before so that clients reconnect.

Stdout and stderr go to one log file (appended across restarts), which `start` polls for the
listening line; a failure message always carries the tail of that file.

Concurrency: one BrokerProcess is driven from one thread (the test's). Every wait is bounded.
Only the process this object started is ever signalled, by its PID.

``PYBROKER_TEST_BROKER_CMD`` (a shell-quoted command prefix, default ``<python> -m pybroker``)
lets the same suites judge a reference broker through a shim, to check the tests themselves.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

if sys.platform.startswith("linux"):
    import ctypes

    # Looked up before any fork: the child may only call async-signal-safe code.
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
    _PR_SET_PDEATHSIG = 1

    def _die_with_parent() -> None:
        # If pytest itself is killed (e.g. by `timeout`), finalizers never run; the kernel
        # then SIGKILLs the broker instead of leaving it orphaned.
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
else:  # pragma: no cover - the suites run on Linux
    _die_with_parent = None

LISTENING_RE = re.compile(rb"listening on (\w+)://([^\s]+):(\d+)")
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
REPO_ROOT = Path(__file__).resolve().parents[2]


class BrokerStartError(RuntimeError):
    """The broker exited, or did not log its listening line in time."""


def broker_command() -> list[str]:
    prefix = os.environ.get("PYBROKER_TEST_BROKER_CMD")
    if prefix:
        return shlex.split(prefix)
    return [sys.executable, "-m", "pybroker"]


class BrokerProcess:
    """One broker node: start, stop(sig), kill, restart on the same log dir and port."""

    def __init__(
        self,
        log_dir: Path,
        *,
        node_id: int = 1,
        overrides: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        start_timeout: float = 20.0,
        stop_timeout: float = 20.0,
        output_path: Path | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.host = host
        self.port = 0  # 0 until the first start binds one; reused on restart
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.output_path = (
            Path(output_path)
            if output_path
            else self.log_dir.parent / (self.log_dir.name + ".broker-output.log")
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None
        self.starts = 0
        self._launch_offset = 0

    # -- properties ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` for bootstrap.servers / bootstrap_servers / kcat -b."""
        if not self.port:
            raise RuntimeError("broker has not started yet")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def clean_shutdown_marker(self) -> Path:
        return self.log_dir / CLEAN_SHUTDOWN_MARKER

    def command(self) -> list[str]:
        settings = {
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            **self.overrides,
        }
        cmd = broker_command()
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the node and block until it logs its listening line (or fail with the tail)."""
        self.launch()
        self.await_listening()

    def launch(self) -> None:
        """Start the process without waiting (a cluster's nodes start together: none serves
        before a quorum of them runs); `await_listening` then waits for it."""
        if self.is_running():
            raise RuntimeError(f"broker pid {self.pid} is already running")
        cmd = self.command()
        with open(self.output_path, "ab") as out:
            out.write(f"\n=== start #{self.starts + 1}: {shlex.join(cmd)}\n".encode())
            out.flush()
            offset = out.tell()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            # The repo root first on the path: `python -m pybroker` must find this checkout
            # even when pytest runs from elsewhere.
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
            )
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(REPO_ROOT),
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.returncode = None
        self.starts += 1
        self._launch_offset = offset

    def await_listening(self, timeout: float | None = None) -> None:
        """Block until the launched node logs its listening line (or fail with the tail)."""
        assert self.proc is not None
        offset = self._launch_offset
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        while True:
            match = LISTENING_RE.search(self._read_output(offset))
            if match:
                bound = int(match.group(3))
                if self.port and bound != self.port:
                    self._force_kill()
                    raise BrokerStartError(
                        self._describe(
                            f"restarted broker bound port {bound}, asked for {self.port}"
                        )
                    )
                self.port = bound
                return
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise BrokerStartError(
                    self._describe(f"broker exited with code {self.returncode} before listening")
                )
            if time.monotonic() > deadline:
                self._force_kill()
                raise BrokerStartError(
                    self._describe(f"no 'listening on' line within {self.start_timeout:.0f}s")
                )
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Send `sig` and wait for exit; returns the exit code (negative: killed by a signal).

        If the node outlives `timeout` it is SIGKILLed and BrokerStartError-style
        diagnostics are raised as TimeoutError.
        """
        if self.proc is None:
            raise RuntimeError("broker was never started")
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self._force_kill()
                raise TimeoutError(
                    self._describe(
                        f"broker did not exit within {timeout or self.stop_timeout:.0f}s of signal "
                        f"{signal.Signals(sig).name}; killed"
                    )
                ) from None
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self) -> int:
        """SIGKILL: no chance to flush or write the clean-shutdown marker."""
        return self.stop(signal.SIGKILL, timeout=10.0)

    def restart(self, sig: int = signal.SIGTERM) -> int:
        """Stop with `sig` (if running), then start on the same log dir and port."""
        code = self.stop(sig) if self.is_running() else self.proc.returncode if self.proc else 0
        self.start()
        return code

    def close(self) -> None:
        """Finalizer: make sure the process this object started, and anything it spawned in
        the session created for it, is gone."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.stop(signal.SIGTERM, timeout=10.0)
            except TimeoutError:
                pass
        try:  # the process group is the one start() created (start_new_session=True)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- diagnostics --------------------------------------------------------------------------

    def output_tail(self, lines: int = 60) -> str:
        text = self._read_output(0).decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def _read_output(self, offset: int) -> bytes:
        try:
            with open(self.output_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return b""

    def _force_kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.proc is not None:
            self.returncode = self.proc.returncode

    def _describe(self, what: str) -> str:
        return (
            f"{what}\ncommand: {shlex.join(self.command())}\n"
            f"output ({self.output_path}), last lines:\n{self.output_tail()}"
        )
