"""A blocking connection to one Kafka broker, on pybroker's own codec.

Format: the Kafka request/response framing of pybroker.protocol.frame (int32 size, header,
body). On `connect()` the connection sends ApiVersions (at v4, or at the version the broker
names when it answers UNSUPPORTED_VERSION, as Kafka's NetworkClient does) and keeps the
broker's ranges; every later request goes out at the highest version both sides speak,
unless the caller narrows the range.
Correlation ids count up from 1 per connection; a response whose id differs is a protocol
error and closes the connection.
Timeouts: `request_timeout_s` bounds each request from send to the end of its response
(Kafka's request.timeout.ms); when it expires the connection is closed, since a late
response would otherwise be read as the answer to the next request.
Security (protocol/client_security.ClientSecurity, built from Kafka's client properties by
security/client_properties.py): with an `ssl_context` the socket is wrapped in TLS before
anything is sent (the server name is the broker's host, checked against its certificate when the
context checks host names); with `sasl` the login follows ApiVersions, as in Kafka's
SaslClientAuthenticator: SaslHandshake naming the mechanism, then SaslAuthenticate until the
mechanism is done (protocol/sasl_client.py's tokens: PLAIN, SCRAM with the server's signature
checked, unsecured OAUTHBEARER). A refused login or a failed TLS handshake is an
AuthenticationFailedError, which is not retried (Kafka's AuthenticationException is fatal too).
Concurrency: not thread-safe; one request in flight at a time, like the broker's own
one-request-per-connection rule.

`retry_call` is the retry loop the admin client wraps around whole operations: it repeats
on connection failures and on retriable Kafka errors (Errors.retriable), with exponential
backoff, up to a count and a deadline.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pybroker import __version__
from pybroker.protocol.api_keys import VALID_VERSIONS, ApiKey
from pybroker.protocol.api_message import ApiMessage
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError, UnsupportedVersionError
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pybroker.protocol.sasl_client import SaslClientError, tokens

__all__ = [
    "AuthenticationFailedError",
    "BrokerConnection",
    "BrokerConnectionError",
    "RequestTimeoutError",
    "parse_bootstrap_servers",
    "retry_call",
]

_INT32 = struct.Struct(">i")
# The largest response frame we accept; a broken or foreign peer announcing more is a
# protocol error rather than a reason to allocate gigabytes.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
API_VERSIONS_MAX = VALID_VERSIONS[ApiKey.API_VERSIONS][1]

# The newest version of each API these clients build requests for, whatever the codec and the
# broker speak: newer versions name topics by id (Produce 13, OffsetCommit / OffsetFetch 10,
# Fetch 13) or take KIP-890's transaction version 2 path (Produce 12, AddPartitionsToTxn 4+,
# EndTxn 5, TxnOffsetCommit 5), which Kafka picks from the request version alone.
CLIENT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 11,
    ApiKey.FETCH: 12,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.END_TXN: 4,
    ApiKey.TXN_OFFSET_COMMIT: 4,
}

T = TypeVar("T")


class BrokerConnectionError(Exception):
    """The broker could not be reached, closed the connection, or did not answer in time.

    Retriable, like Kafka's NetworkException / DisconnectException.
    """

    retriable = True

    def __init__(self, address: str, message: str) -> None:
        self.address = address
        super().__init__(f"{address}: {message}")


class RequestTimeoutError(BrokerConnectionError):
    """No complete response within the request timeout (Kafka's TimeoutException)."""


class AuthenticationFailedError(BrokerConnectionError):
    """The broker refused the login, or the TLS handshake failed (Kafka's
    SaslAuthenticationException / SslAuthenticationException): not retried."""

    retriable = False


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` (IPv6 as `[::1]:9092`) -> [(host, port)]; ValueError if bad."""
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            if not sep or not rest.startswith(":"):
                raise ValueError(f"bad bootstrap server {item!r} (expected [host]:port)")
            port_s = rest[1:]
        else:
            host, sep, port_s = item.rpartition(":")
            if not sep or not host:
                raise ValueError(f"bad bootstrap server {item!r} (expected host:port)")
        try:
            port = int(port_s)
        except ValueError:
            raise ValueError(f"bad port in bootstrap server {item!r}") from None
        if not 0 < port < 65536:
            raise ValueError(f"port out of range in bootstrap server {item!r}")
        out.append((host, port))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


SocketFactory = Callable[[tuple[str, int], float], Any]


def _default_socket_factory(address: tuple[str, int], timeout_s: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class BrokerConnection:
    """One TCP connection to one broker; see the module docstring for the contract."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str | None = "pybroker-admin",
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        socket_factory: SocketFactory = _default_socket_factory,
        clock: Callable[[], float] = time.monotonic,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._socket_factory = socket_factory
        self.security = security
        self._clock = clock
        self._sock: Any = None
        self._correlation_id = 0
        # api key -> (min, max) as the broker advertised them
        self.api_versions: dict[int, tuple[int, int]] = {}

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    # -- lifecycle --------------------------------------------------------------------

    def connect(self) -> None:
        """Open the socket and negotiate versions; BrokerConnectionError if unreachable."""
        if self._sock is not None:
            return
        try:
            self._sock = self._socket_factory((self.host, self.port), self.connect_timeout_s)
        except OSError as exc:
            raise BrokerConnectionError(self.address, f"cannot connect: {exc.strerror or exc}") from exc
        self._correlation_id = 0
        try:
            if self.security.ssl_context is not None:
                self._handshake(self.security.ssl_context)
            self.api_versions = self._negotiate()
            if self.security.sasl is not None:
                self._login()
        except BaseException:
            self.close()
            raise

    def _handshake(self, context: ssl.SSLContext) -> None:
        """TLS over the connected socket, within the connect timeout."""
        raw = self._sock
        raw.settimeout(self.connect_timeout_s)
        try:
            self._sock = context.wrap_socket(raw, server_hostname=self.host)
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError) as exc:
            # the broker closed the connection mid-handshake (restarting, over its limits): retried
            raise BrokerConnectionError(self.address, f"SSL handshake failed: {exc.reason or exc}") from exc
        except ssl.SSLError as exc:  # an untrusted certificate, no common protocol or cipher: final
            raise AuthenticationFailedError(self.address, f"SSL handshake failed: {exc.reason or exc}") from exc
        except OSError as exc:
            raise BrokerConnectionError(self.address, f"SSL handshake failed: {exc.strerror or exc}") from exc

    def _login(self) -> None:
        """SaslHandshake, then SaslAuthenticate per token (see the module docstring)."""
        sasl = self.security.sasl
        assert sasl is not None
        hs = self.send(SaslHandshakeRequest(mechanism=sasl.mechanism), self.version_for(ApiKey.SASL_HANDSHAKE, 1))
        assert isinstance(hs, SaslHandshakeResponse)
        if hs.error_code:
            raise AuthenticationFailedError(
                self.address, f"SASL mechanism {sasl.mechanism} is not enabled on this listener "
                f"({Errors.for_code(hs.error_code).name}); it offers {', '.join(hs.mechanisms) or 'none'}")
        version = self.version_for(ApiKey.SASL_AUTHENTICATE)
        gen = tokens(sasl)
        try:
            token = next(gen)
            while True:
                resp = self.send(SaslAuthenticateRequest(auth_bytes=token), version)
                assert isinstance(resp, SaslAuthenticateResponse)
                if resp.error_code:
                    raise AuthenticationFailedError(
                        self.address, f"{resp.error_message or 'SASL authentication failed'} "
                        f"({Errors.for_code(resp.error_code).name})")
                try:
                    token = gen.send(bytes(resp.auth_bytes))
                except StopIteration:
                    return
        except SaslClientError as exc:
            raise AuthenticationFailedError(self.address, str(exc)) from exc

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> BrokerConnection:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        version = API_VERSIONS_MAX
        for _attempt in range(2):
            body = ApiVersionsRequest(client_software_name="pybroker-admin",
                                      client_software_version=__version__) if version >= 3 \
                else ApiVersionsRequest()
            frame = self._round_trip(ApiKey.API_VERSIONS, version, body)
            resp = self._decode_api_versions(version, frame)
            if resp.error_code == Errors.UNSUPPORTED_VERSION:
                # The broker names its own ApiVersions range in the (v0) error body; retry
                # at the highest version we share.
                theirs = {k.api_key: k.max_version for k in resp.api_keys}
                their_max = theirs.get(ApiKey.API_VERSIONS, 0)
                if their_max >= version:
                    break
                version = min(their_max, API_VERSIONS_MAX)
                continue
            if resp.error_code != 0:
                raise KafkaError(resp.error_code, f"ApiVersions failed at {self.address}")
            return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        raise KafkaError(Errors.UNSUPPORTED_VERSION, f"{self.address} does not speak a known ApiVersions version")

    def _decode_api_versions(self, version: int, frame: bytes) -> ApiVersionsResponse:
        # An UNSUPPORTED_VERSION answer is a v0 body whatever version was asked for (Kafka's
        # ApiVersionsResponse.parse falls back the same way).
        try:
            cid, resp = decode_response(ApiKey.API_VERSIONS, version, frame)
        except ProtocolError:
            cid, resp = decode_response(ApiKey.API_VERSIONS, 0, frame)
        assert isinstance(resp, ApiVersionsResponse)
        if resp.error_code == Errors.UNSUPPORTED_VERSION and version != 0:
            cid, resp = decode_response(ApiKey.API_VERSIONS, 0, frame)
        self._check_correlation(cid)
        assert isinstance(resp, ApiVersionsResponse)
        return resp

    # -- versions ---------------------------------------------------------------------

    def version_for(self, api_key: int, min_version: int = 0, max_version: int | None = None) -> int:
        """The highest version of `api_key` both sides speak within [min_version, max_version]
        and CLIENT_MAX_VERSIONS.

        Raises UnsupportedVersionError (code UNSUPPORTED_VERSION) when there is none.
        """
        ours = VALID_VERSIONS[api_key]
        lo = max(ours[0], min_version)
        hi = min(ours[1], CLIENT_MAX_VERSIONS.get(api_key, ours[1]))
        if max_version is not None:
            hi = min(hi, max_version)
        theirs = self.api_versions.get(api_key)
        if theirs is not None:
            lo = max(lo, theirs[0])
            hi = min(hi, theirs[1])
        if theirs is None or lo > hi:
            name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
            raise UnsupportedVersionError(
                f"{self.address} does not support {name}"
                + (f" (it speaks v{theirs[0]}-{theirs[1]})" if theirs else ""),
                api_key=api_key,
            )
        return hi

    def supports(self, api_key: int) -> bool:
        return api_key in self.api_versions

    # -- requests ---------------------------------------------------------------------

    def send(self, body: ApiMessage, version: int | None = None) -> Any:
        """Send one request and return the decoded response body.

        `version` None means the highest shared version. Raises BrokerConnectionError on
        network failure or timeout (the connection is then closed), ProtocolError on an
        undecodable or mismatched response.
        """
        api_key = int(body.API_KEY)
        if self._sock is None:
            self.connect()
        if version is None:
            version = self.version_for(api_key)
        frame = self._round_trip(api_key, version, body)
        try:
            cid, resp = decode_response(api_key, version, frame)
        except ProtocolError:
            self.close()
            raise
        self._check_correlation(cid)
        return resp

    def send_no_response(self, body: ApiMessage, version: int | None = None) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        api_key = int(body.API_KEY)
        if self._sock is None:
            self.connect()
        if version is None:
            version = self.version_for(api_key)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        data = encode_request(api_key, version, self._correlation_id, self.client_id, body)
        try:
            self._sendall(data, self._clock() + self.request_timeout_s)
        except RequestTimeoutError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(self.address, f"connection failed: {exc.strerror or exc}") from exc

    def _check_correlation(self, cid: int) -> None:
        if cid != self._correlation_id:
            self.close()
            raise ProtocolError(
                f"{self.address}: response correlation id {cid} does not match request {self._correlation_id}",
                correlation_id=cid,
            )

    def _round_trip(self, api_key: int, version: int, body: ApiMessage) -> bytes:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        data = encode_request(api_key, version, self._correlation_id, self.client_id, body)
        deadline = self._clock() + self.request_timeout_s
        try:
            self._sendall(data, deadline)
            (size,) = _INT32.unpack(self._recv_exact(4, deadline))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                self.close()
                raise ProtocolError(f"{self.address}: response frame size {size} is out of range")
            return self._recv_exact(size, deadline)
        except RequestTimeoutError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(self.address, f"connection failed: {exc.strerror or exc}") from exc

    def _remaining(self, deadline: float) -> float:
        left = deadline - self._clock()
        if left <= 0:
            raise RequestTimeoutError(self.address, f"no response within {self.request_timeout_s:g}s")
        return left

    def _sendall(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._sock.settimeout(self._remaining(deadline))
            try:
                n = self._sock.send(view)
            except TimeoutError:
                continue  # _remaining raises once the deadline has passed
            view = view[n:]

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            self._sock.settimeout(self._remaining(deadline))
            try:
                chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            except TimeoutError:
                continue
            if not chunk:
                self.close()
                raise BrokerConnectionError(self.address, "connection closed by the broker")
            buf += chunk
        return bytes(buf)


def is_retriable(exc: BaseException) -> bool:
    """Connection failures and Kafka errors Kafka marks retriable (Errors.retriable)."""
    if isinstance(exc, BrokerConnectionError):
        return exc.retriable
    if isinstance(exc, ProtocolError):
        return False
    return isinstance(exc, KafkaError) and exc.retriable


def retry_call(
    fn: Callable[[], T],
    *,
    retries: int = 5,
    backoff_s: float = 0.1,
    max_backoff_s: float = 1.0,
    deadline_s: float | None = None,
    on_retry: Callable[[BaseException], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call fn, repeating on retriable failures (see is_retriable) with exponential backoff.

    Stops after `retries` repeats or when the next wait would pass `deadline_s` seconds from
    the first call, and re-raises the last failure. `on_retry(exc)` runs before each repeat
    (the admin client drops cached coordinators and connections there).
    """
    end = None if deadline_s is None else clock() + deadline_s
    delay = backoff_s
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_retriable(exc) or attempt >= retries:
                raise
            if end is not None and clock() + delay > end:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(exc)
            sleep(delay)
            delay = min(delay * 2, max_backoff_s)

