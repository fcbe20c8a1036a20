"""SASL on a listener (Kafka's SaslServerAuthenticator): the exchange that runs before a
SASL_PLAINTEXT or SASL_SSL connection's first request and sets its principal.

Wire (KIP-43, KIP-152), all frames size-prefixed as requests are, each at most
`sasl.server.max.receive.size` (524288) before authentication; a larger or negative size closes:

    [ApiVersions]  answered by the request handler; only as the first request (again only after
                   an unsupported-version answer)
    SaslHandshake  v0-1 (never flexible): an enabled mechanism -> NONE + the enabled list;
                   another -> UNSUPPORTED_SASL_MECHANISM (33) + the list, then close
    v1: SaslAuthenticate v0-2 (flexible v2+, SessionLifetimeMs v1+) carries each token and is
        always answered, an empty auth_bytes included; any other request -> close
    v0: the tokens themselves, unframed: 4-byte size + token, replies the same way (the
        exchange clients before Kafka 1.0 use)

Before the handshake any request other than ApiVersions and SaslHandshake, or bytes that are not
a request, close the connection without a response, as Kafka does. A failed exchange is answered
with SASL_AUTHENTICATION_FAILED (58): the mechanism's own text when it is one meant for the
client (SaslAuthenticationError, e.g. PLAIN's "Invalid username or password"), else Kafka's
generic "Authentication failed during authentication due to invalid credentials with SASL
mechanism <M>" (no hint whether the user exists). Every failure is answered and closed
`connection.failed.authentication.delay.ms` (100) later, as Kafka delays it to slow password
guessing; the wait is this connection's task's alone, so other clients are untouched.

A request other than SaslAuthenticate after a v1 handshake is answered with its own error
response carrying ILLEGAL_SASL_STATE (34), when the API has one (`illegal_state`, from the server
layer), then closed.

Session lifetime and re-authentication (KIP-368; Kafka's SaslServerAuthenticator and
KafkaChannel): when the mechanism's `connections.max.reauth.ms` (listener and mechanism
prefixes allowed) is positive, or the credential has an expiry (a delegation token's expiry, an
OAUTHBEARER token's `exp`), the session lasts min(that, expiry - now), floored at 0, and the last
SaslAuthenticate response (v1+) carries it as SessionLifetimeMs; otherwise 0 and the session never
expires. The channel's `request_handler` wraps the listener's request handler: on a connection
whose session has an expiry, a SaslHandshake (at most one per second) begins a re-authentication
right there (the same exchange, SaslHandshake v1 then SaslAuthenticate, answered in turn; the
mechanism must be the one first used, else the next SaslAuthenticate fails with Kafka's "SASL
mechanism '<m>' requested by client is not supported for re-authentication of mechanism '<n>'";
the principal must not change, else "Cannot change principals during re-authentication from
<type>.<name>: <type>.<name>"; a failure is answered and closes the connection). Any other request
after the session expired closes the connection unanswered, as Kafka's Processor closes an expired
channel. A SaslHandshake without re-authentication (no expiry, or within a second of the previous
one) reaches the request handler: ILLEGAL_SASL_STATE (server/sasl_requests.py), as Kafka.

Concurrency: runs in the connection's task (the first exchange inside the server's
authentication timeout; a re-authentication inside the request loop, one request at a time); a
mechanism server marked `blocking` (GSSAPI: MIT's acceptor reads the keytab and a replay cache) is
evaluated on a worker thread, the others inline.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from pybroker.errors import Errors, SaslAuthenticationError, SaslError
from pybroker.net.connection import CloseConnection, Connection, ConnectionClosed, Handler
from pybroker.net.tls import TlsChannelBuilder, TlsConnection, TlsListener
from pybroker.protocol.api_keys import VALID_VERSIONS, ApiKey
from pybroker.protocol.chunks import Chunk
from pybroker.protocol.errors import ProtocolError
from pybroker.protocol.frame import decode_request, encode_response
from pybroker.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

log = logging.getLogger("pybroker.net")

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)
_SASL_HANDSHAKE_KEY = struct.pack(">h", ApiKey.SASL_HANDSHAKE)
MIN_REAUTH_INTERVAL_S = 1.0  # KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
# a re-authentication runs in the request loop, where the idle sweep skips the busy connection:
# bounded like a first login (net/server.AUTHENTICATION_TIMEOUT_S) so a stalled one is closed
REAUTH_TIMEOUT_S = 10.0


class SaslMechanismServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str

    def evaluate(self, token: bytes) -> bytes: ...


class SaslListener(Protocol):
    """What the authenticator needs of a listener's SASL setup (security/sasl/listener.ListenerSasl)."""

    listener_name: str
    mechanisms: list[str]
    max_receive_size: int
    failed_authentication_delay_ms: int

    @property
    def now_ms(self) -> Callable[[], int]:
        """The wall clock (ms), what credential expiries are compared with."""
        ...

    def server(self, mechanism: str) -> SaslMechanismServer: ...

    def max_reauth_ms(self, mechanism: str) -> int:
        """connections.max.reauth.ms of the mechanism on this listener (0: off)."""
        ...

    async def wait_serving(self) -> None:
        """Until the node can check credentials (its metadata image replayed)."""
        ...


@dataclass(slots=True)
class SaslSession:
    """A connection's authenticated session (`Connection.sasl_session`)."""

    mechanism: str
    principal: str
    expires_at: float | None  # trio time after which only a re-authentication is served; None: never
    last_reauth_start: float = float("-inf")
    reauthentications: int = 0


class _Failed(Exception):
    """End the exchange: send `response` (if any) after the failure delay, then close."""

    def __init__(self, reason: str, response: Sequence[Chunk] | None = None) -> None:
        super().__init__(reason)
        self.response = response


class SaslChannelBuilder:
    """The channel builder of a SASL_PLAINTEXT (`tls` None) or SASL_SSL listener: the TLS
    handshake first when there is one, then the SASL exchange; `api_versions` answers a
    pre-authentication ApiVersions request (the listener's request handler), `illegal_state`
    builds a request's ILLEGAL_SASL_STATE answer (server/sasl_requests.illegal_state_response)."""

    def __init__(self, sasl: SaslListener, api_versions: Handler, tls: TlsListener | None = None,
                 illegal_state: Callable[[bytearray, str], Sequence[Chunk] | None] | None = None) -> None:
        self.sasl = sasl
        self.api_versions = api_versions
        self.illegal_state = illegal_state
        self.tls = TlsChannelBuilder(tls) if tls is not None else None
        self._inner: Handler | None = None
        self._wrapped: Handler | None = None

    def create(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> Connection:
        if self.tls is not None:
            return self.tls.create(sock, peer, listener_name)
        return Connection(sock, peer, listener_name)

    async def authenticate(self, conn: Connection) -> bool:
        if self.tls is not None:
            assert isinstance(conn, TlsConnection)
            if not await self.tls.authenticate(conn):
                return False
        try:
            await self._exchange(conn)
            return True
        except _Failed as failed:
            await self._fail(conn, failed)
            return False
        except (OSError, ConnectionClosed, trio.BrokenResourceError) as exc:
            log.debug("connection %s ended during SASL authentication: %s", conn.peer, exc)
            return False
        except CloseConnection as exc:  # the ApiVersions handler refused the request
            log.info("closing connection from %s on %s during SASL authentication: %s", conn.peer,
                     conn.listener_name, exc)
            return False
        except Exception:
            # a bug must cost one connection, never the listener
            log.exception("closing connection from %s after an internal error during SASL authentication", conn.peer)
            return False

    async def _fail(self, conn: Connection, failed: _Failed) -> None:
        log.info("Failed authentication with %s on %s (%s)", conn.peer, conn.listener_name, failed)
        await trio.sleep(self.sasl.failed_authentication_delay_ms / 1000)
        if failed.response is not None:
            try:
                await conn.write(failed.response)
            except (OSError, ConnectionClosed, trio.BrokenResourceError):
                pass

    # ------------------------------------------------------------------ after the first login

    def request_handler(self, inner: Handler) -> Handler:
        """The listener's request handler behind the session checks (module docstring)."""
        if self._wrapped is not None and self._inner is inner:
            return self._wrapped

        async def handle(conn: Connection, frame: bytearray | memoryview) -> Sequence[Chunk] | None:
            session = conn.sasl_session
            if session is not None and session.expires_at is not None:
                now = trio.current_time()
                if frame[:2] == _SASL_HANDSHAKE_KEY and now - session.last_reauth_start >= MIN_REAUTH_INTERVAL_S:
                    session.last_reauth_start = now
                    await self._reauthenticate(conn, bytearray(frame), session)
                    return None
                if now > session.expires_at:
                    raise CloseConnection(f"SASL session of {session.principal} expired; re-authentication was due")
            return await inner(conn, frame)

        self._inner, self._wrapped = inner, handle
        return handle

    async def _reauthenticate(self, conn: Connection, frame: bytearray, session: SaslSession) -> None:
        """A re-authentication begun by `frame` (a SaslHandshake): the exchange, answered here;
        CloseConnection when it fails (after its failure answer)."""
        try:
            if len(frame) < 8:
                raise _Failed("not a Kafka request during SASL re-authentication")
            _, api_version = _KEY_VERSION.unpack_from(frame)
            if api_version == 0:  # the unframed exchange could not be told from requests
                raise _Failed("re-authentication needs SaslHandshake v1")
            with trio.move_on_after(REAUTH_TIMEOUT_S) as scope:
                await self._handshake(conn, frame, session)
            if scope.cancelled_caught:
                raise CloseConnection(f"re-authentication not done within {REAUTH_TIMEOUT_S:.0f} s")
        except _Failed as failed:
            await self._fail(conn, failed)
            raise CloseConnection(f"re-authentication failed: {failed}") from None
        session.reauthentications += 1
        log.debug("re-authenticated %s on %s as %s", conn.peer, conn.listener_name, session.principal)

    def _start_session(self, conn: Connection, server: SaslMechanismServer, previous: SaslSession | None) -> int:
        """Kafka's SaslServerAuthenticator at the end of an exchange: check the principal of a
        re-authentication, set the connection's principal and session; the session lifetime (ms,
        0: none) for the last SaslAuthenticate response."""
        principal = "User:" + server.authorization_id
        if previous is not None and previous.principal != principal:
            old_type, _, old_name = previous.principal.partition(":")
            raise SaslAuthenticationError(f"Cannot change principals during re-authentication from "
                                          f"{old_type}.{old_name}: User.{server.authorization_id}")
        credential_expiration_ms: int | None = getattr(server, "credential_expiration_ms", None)
        max_reauth_ms = self.sasl.max_reauth_ms(server.mechanism)
        lifetime_ms = 0
        expires_at: float | None = None
        if credential_expiration_ms is not None or max_reauth_ms > 0:
            if credential_expiration_ms is None:
                lifetime_ms = max_reauth_ms
            else:
                left = credential_expiration_ms - self.sasl.now_ms()
                lifetime_ms = left if max_reauth_ms <= 0 else min(left, max_reauth_ms)
            lifetime_ms = max(0, lifetime_ms)
            expires_at = trio.current_time() + lifetime_ms / 1000
        conn.principal = principal
        conn.token_authenticated = bool(getattr(server, "token_authenticated", False))
        if previous is None:
            conn.sasl_session = SaslSession(server.mechanism, principal, expires_at)
        else:
            previous.expires_at = expires_at
        return lifetime_ms

    # ------------------------------------------------------------------ the exchange

    async def _read(self, conn: Connection) -> bytearray:
        frame = await conn.read_frame(self.sasl.max_receive_size)
        if frame is None:
            raise _Failed(f"frame size above sasl.server.max.receive.size ({self.sasl.max_receive_size}) or negative")
        return bytearray(frame)

    async def _exchange(self, conn: Connection) -> None:
        """Until the connection is authenticated (its principal and session set); _Failed otherwise."""
        versions_done = False
        while True:
            frame = await self._read(conn)
            if len(frame) < 8:
                raise _Failed("not a Kafka request during SASL handshake")
            api_key, api_version = _KEY_VERSION.unpack_from(frame)
            if api_key == ApiKey.API_VERSIONS and not versions_done:
                chunks = await self.api_versions(conn, frame)
                if chunks is not None:
                    await conn.write(chunks)
                lo, hi = VALID_VERSIONS[ApiKey.API_VERSIONS]
                versions_done = lo <= api_version <= hi
                continue
            if api_key != ApiKey.SASL_HANDSHAKE:
                name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
                raise _Failed(f"Unexpected Kafka request of type {name} during SASL handshake.")
            await self._handshake(conn, frame, None)
            return

    async def _handshake(self, conn: Connection, frame: bytearray, previous: SaslSession | None) -> None:
        """A SaslHandshake, then the mechanism's exchange (a re-authentication when `previous`)."""
        header, body = self._decode(frame, ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSIONS)
        assert isinstance(body, SaslHandshakeRequest)
        api_version = header.request_api_version
        mechanisms = list(self.sasl.mechanisms)
        if body.mechanism not in mechanisms:
            response = encode_response(ApiKey.SASL_HANDSHAKE, api_version, header.correlation_id,
                                       SaslHandshakeResponse(error_code=Errors.UNSUPPORTED_SASL_MECHANISM,
                                                             mechanisms=mechanisms))
            raise _Failed(f"Unsupported SASL mechanism {body.mechanism}", response)
        await conn.write(encode_response(ApiKey.SASL_HANDSHAKE, api_version, header.correlation_id,
                                         SaslHandshakeResponse(error_code=0, mechanisms=mechanisms)))
        await self.sasl.wait_serving()
        server: SaslMechanismServer = self.sasl.server(body.mechanism)
        if previous is not None and body.mechanism != previous.mechanism:
            server = _Refused(body.mechanism, f"SASL mechanism '{body.mechanism}' requested by client is not "
                                              f"supported for re-authentication of mechanism '{previous.mechanism}'")
        if api_version == 0:
            await self._unframed(conn, server)
        else:
            await self._framed(conn, server, previous)

    @staticmethod
    def _decode(frame: bytearray, api_key: int, versions: tuple[int, int]) -> tuple[Any, Any]:
        try:
            return decode_request(frame, {api_key: versions})
        except ProtocolError as exc:  # unknown keys and unsupported versions included
            raise _Failed(str(exc)) from None

    @staticmethod
    def _generic(server: SaslMechanismServer) -> str:
        return ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                + server.mechanism)

    @staticmethod
    async def _evaluate(server: SaslMechanismServer, token: bytes) -> bytes:
        """The mechanism's reply; on a worker thread for one that does file or network I/O
        (GSSAPI's keytab), so the event loop never waits on it."""
        if getattr(server, "blocking", False):
            return await trio.to_thread.run_sync(server.evaluate, token)
        return server.evaluate(token)

    async def _framed(self, conn: Connection, server: SaslMechanismServer, previous: SaslSession | None) -> None:
        """After SaslHandshake v1: every token in a SaslAuthenticate request, every reply in its response."""
        while True:
            frame = await self._read(conn)
            if len(frame) < 8:
                raise _Failed("not a Kafka request during SASL authentication")
            api_key, api_version = _KEY_VERSION.unpack_from(frame)
            if api_key != ApiKey.SASL_AUTHENTICATE:
                name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
                message = f"Unexpected Kafka request of type {name} during SASL authentication."
                raise _Failed(message, self.illegal_state(frame, message) if self.illegal_state else None)
            header, body = self._decode(frame, ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSIONS)
            assert isinstance(body, SaslAuthenticateRequest)

            def failure(message: str, version: int = api_version, correlation_id: int = header.correlation_id
                        ) -> Sequence[Chunk]:
                return encode_response(ApiKey.SASL_AUTHENTICATE, version, correlation_id, SaslAuthenticateResponse(
                    error_code=Errors.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b"",
                    session_lifetime_ms=0))

            lifetime_ms = 0
            try:
                reply = await self._evaluate(server, bytes(body.auth_bytes))
                if server.complete:
                    lifetime_ms = self._start_session(conn, server, previous)
            except SaslAuthenticationError as exc:
                raise _Failed(str(exc), failure(str(exc))) from None
            except SaslError as exc:
                raise _Failed(str(exc), failure(self._generic(server))) from None
            await conn.write(encode_response(ApiKey.SASL_AUTHENTICATE, api_version, header.correlation_id,
                                             SaslAuthenticateResponse(error_code=0, error_message=None,
                                                                      auth_bytes=reply,
                                                                      session_lifetime_ms=lifetime_ms)))
            if server.complete:
                return

    async def _unframed(self, conn: Connection, server: SaslMechanismServer) -> None:
        """After SaslHandshake v0: raw size-prefixed tokens both ways; a failure just closes."""
        while True:
            token = await self._read(conn)
            try:
                reply = await self._evaluate(server, bytes(token))
                if server.complete:
                    self._start_session(conn, server, None)
            except SaslError as exc:
                raise _Failed(str(exc)) from None
            await conn.write([_SIZE.pack(len(reply)) + reply])
            if server.complete:
                return


class _Refused:
    """The exchange of a re-authentication that asked for another mechanism: its first token
    fails with Kafka's message (SaslServerAuthenticator's REAUTH_BAD_MECHANISM state)."""

    complete = False
    authorization_id = ""

    def __init__(self, mechanism: str, message: str) -> None:
        self.mechanism = mechanism
        self._message = message

    def evaluate(self, token: bytes) -> bytes:
        raise SaslAuthenticationError(self._message)
