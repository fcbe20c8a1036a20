"""The server side of TLS in one trio process: pybroker's MemoryBIO connection against
trio.SSLStream and against a non-blocking ssl.SSLSocket on the connection's fd.

    python bench/tls/transport.py [--mib 256] [--rounds 3]

Why: net/tls.py moves ciphertext between memory BIOs and the socket itself (the plaintext
Connection's raw os.read / os.write + trio waits) instead of wrapping the socket in
trio.SSLStream or letting OpenSSL drive the socket (SSLSocket). This measures the three on the
same bulk load: a client process (blocking
Python ssl socket, TLS 1.3, AES-GCM) sends `--mib` MiB in 1 MiB writes, the server reads them
all, then sends as much back in 1 MiB writes, which the client reads. Per implementation and
round: wall seconds and the server process's CPU seconds (getrusage), MB/s of server CPU.
The client runs in another process, so its CPU is not counted.
"""

from __future__ import annotations

import argparse
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pybroker.net.tls import TlsConnection  # noqa: E402
from tests.security.certs import CertificateAuthority  # noqa: E402

CHUNK = 1 << 20

CLIENT = r"""
import socket, ssl, sys
port, mib, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
data = bytes(1 << 20)
for _ in range(mib):
    s.sendall(data)
left = mib << 20
buf = bytearray(1 << 20)
while left:
    n = s.recv_into(buf)
    if not n:
        raise SystemExit("server closed early")
    left -= n
s.close()
"""


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def serve_once(impl: str, ctx: ssl.SSLContext, mib: int, ca: Path) -> tuple[float, float]:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    # started before the accept it connects to; the wait for its exit below runs in a thread
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(mib), str(ca)])  # noqa: ASYNC220
    stream = await listener.accept()
    total = mib * CHUNK
    out = bytes(CHUNK)
    t0, c0 = time.perf_counter(), cpu()
    if impl == "bio":
        conn = TlsConnection(stream.socket, None, "SSL", ctx)
        await conn.handshake()
        buf = bytearray(CHUNK)
        got = 0
        with memoryview(buf) as view:
            while got < total:
                got += await conn._recv_into(view)
        for _ in range(mib):
            await conn._send_all(out)
    elif impl == "sslsocket":
        # OpenSSL on the socket itself (no memory BIOs): non-blocking SSLSocket + trio's fd waits
        import socket as stdsocket

        raw = stdsocket.socket(fileno=os.dup(stream.socket.fileno()))
        s = ctx.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        s.setblocking(False)
        fd = s.fileno()
        while True:
            try:
                s.do_handshake()
                break
            except ssl.SSLWantReadError:
                await trio.lowlevel.wait_readable(fd)
            except ssl.SSLWantWriteError:
                await trio.lowlevel.wait_writable(fd)
        buf = bytearray(CHUNK)
        got = 0
        with memoryview(buf) as view:
            while got < total:
                try:
                    got += s.recv_into(view)
                except ssl.SSLWantReadError:
                    await trio.lowlevel.wait_readable(fd)
        for _ in range(mib):
            view = memoryview(out)
            while view:
                try:
                    view = view[s.send(view):]
                except (ssl.SSLWantWriteError, BlockingIOError):
                    await trio.lowlevel.wait_writable(fd)
        s.close()
    else:
        tls = trio.SSLStream(stream, ctx, server_side=True)
        await tls.do_handshake()
        got = 0
        while got < total:
            got += len(await tls.receive_some(CHUNK))
        for _ in range(mib):
            await tls.send_all(out)
    wall, used = time.perf_counter() - t0, cpu() - c0
    await trio.to_thread.run_sync(client.wait)
    await stream.aclose()
    await listener.aclose()
    return wall, used


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca = CertificateAuthority("bench CA")
        broker = ca.issue("broker", server=True)
        keystore, _, _ = broker.write_pem(Path(tmp), "broker")
        ca_pem = ca.write_pem(Path(tmp) / "ca.pem")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(keystore))
        impls = ["bio", "sslstream", "sslsocket"]
        results: dict[str, list[tuple[float, float]]] = {i: [] for i in impls}
        for r in range(args.rounds):
            for impl in (impls if r % 2 == 0 else impls[::-1]):
                wall, used = trio.run(serve_once, impl, ctx, args.mib, ca_pem)
                results[impl].append((wall, used))
                print(f"round {r} {impl:10} wall {wall:6.2f} s  server CPU {used:6.2f} s  "
                      f"{2 * args.mib / used:7.0f} MiB per server CPU s", flush=True)
    for impl, rs in results.items():
        used = statistics.median(u for _, u in rs)
        print(f"median {impl:10} server CPU {used:6.2f} s for {2 * args.mib} MiB "
              f"({2 * args.mib / used:.0f} MiB/s of CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
