"""An embeddable broker for tests: a real pybroker node in a background thread.

    with EmbeddedBroker() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

The node is the same code the `pybroker` command runs (own trio loop in a daemon thread,
port 0 so it never collides, data in a temporary directory unless `log_dir` is given).
`stop()` is the clean shutdown SIGTERM triggers: checkpoints and the clean-shutdown
marker are written, so a later `EmbeddedBroker(log_dir=same)` finds the data.
The admin helpers (admin(), create_topic(), wait_for_group_coordinator(): admin_helpers.py)
work on it as on a LocalCluster.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

import trio

from pybroker.config import BrokerConfig
from pybroker.testing.admin_helpers import AdminHelpers


class EmbeddedBroker(AdminHelpers):
    def __init__(self, log_dir: str | None = None, overrides: Mapping[str, Any] | None = None,
                 port: int = 0) -> None:
        self._tmp = None if log_dir else tempfile.mkdtemp(prefix="pybroker-")
        self.log_dir = log_dir or self._tmp
        props = {"node.id": "1", "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": self.log_dir}
        props.update({k: str(v) for k, v in (overrides or {}).items()})
        self.config = BrokerConfig(props)
        self.port = -1
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._broker: Any = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def controller_port(self) -> int:
        """The port of the node's first controller listener (started with one in `listeners` and
        `controller.listener.names`), else -1."""
        bound = self._broker.controller_bound if self._broker is not None else []
        return bound[0].port if bound else -1

    @property
    def metrics_url(self) -> str | None:
        """http://host:port/metrics when started with a `metrics.listener` override, else None."""
        return self._broker.metrics_url if self._broker is not None else None

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        from pybroker.server.broker import Broker

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._broker = Broker(self.config)
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(self._broker.run)
                self.port = bound[0].port
                self._started.set()

        def target() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                self._started.set()

        self._thread = threading.Thread(target=target, name="pybroker-embedded", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise TimeoutError("embedded broker did not start")
        if self._error is not None:
            raise RuntimeError(f"embedded broker failed to start: {self._error!r}") from self._error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive() and self._token is not None:
            try:
                trio.from_thread.run_sync(self._broker.request_shutdown, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(timeout_s)
        self._thread = None

    def close(self) -> None:
        self._close_admin()
        self.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
