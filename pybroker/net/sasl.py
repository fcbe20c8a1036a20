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

Differences from Kafka: re-authentication (KIP-368, connections.max.reauth.ms) is not offered, so SessionLifetimeMs is 0,
and a SaslHandshake after authentication is answered ILLEGAL_SASL_STATE by the request handler
(server/sasl_requests.py), as Kafka answers one when re-authentication is off.

Concurrency: runs in the connection's task, inside the server's authentication timeout.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
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

    def server(self, mechanism: str) -> SaslMechanismServer: ...


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
            conn.principal = "User:" + await self._exchange(conn)
            return True
        except _Failed as failed:
            log.info("Failed authentication with %s on %s (%s)", conn.peer, conn.listener_name, failed)
            await trio.sleep(self.sasl.failed_authentication_delay_ms / 1000)
            if failed.response is not None:
                try:
                    await conn.write(failed.response)
                except (OSError, ConnectionClosed, trio.BrokenResourceError):
                    pass
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

    async def _read(self, conn: Connection) -> bytearray:
        frame = await conn.read_frame(self.sasl.max_receive_size)
        if frame is None:
            raise _Failed(f"frame size above sasl.server.max.receive.size ({self.sasl.max_receive_size}) or negative")
        return bytearray(frame)

    async def _exchange(self, conn: Connection) -> str:
        """The authenticated name; _Failed otherwise."""
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
            header, body = self._decode(frame, ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSIONS)
            assert isinstance(body, SaslHandshakeRequest)
            mechanisms = list(self.sasl.mechanisms)
            if body.mechanism not in mechanisms:
                response = encode_response(ApiKey.SASL_HANDSHAKE, api_version, header.correlation_id,
                                           SaslHandshakeResponse(error_code=Errors.UNSUPPORTED_SASL_MECHANISM,
                                                                 mechanisms=mechanisms))
                raise _Failed(f"Unsupported SASL mechanism {body.mechanism}", response)
            await conn.write(encode_response(ApiKey.SASL_HANDSHAKE, api_version, header.correlation_id,
                                             SaslHandshakeResponse(error_code=0, mechanisms=mechanisms)))
            server = self.sasl.server(body.mechanism)
            if api_version == 0:
                return await self._unframed(conn, server)
            return await self._framed(conn, server)

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

    async def _framed(self, conn: Connection, server: SaslMechanismServer) -> str:
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

            try:
                reply = server.evaluate(bytes(body.auth_bytes))
            except SaslAuthenticationError as exc:
                raise _Failed(str(exc), failure(str(exc))) from None
            except SaslError as exc:
                raise _Failed(str(exc), failure(self._generic(server))) from None
            await conn.write(encode_response(ApiKey.SASL_AUTHENTICATE, api_version, header.correlation_id,
                                             SaslAuthenticateResponse(error_code=0, error_message=None,
                                                                      auth_bytes=reply, session_lifetime_ms=0)))
            if server.complete:
                conn.token_authenticated = bool(getattr(server, "token_authenticated", False))
                return server.authorization_id

    async def _unframed(self, conn: Connection, server: SaslMechanismServer) -> str:
        """After SaslHandshake v0: raw size-prefixed tokens both ways; a failure just closes."""
        while True:
            token = await self._read(conn)
            try:
                reply = server.evaluate(bytes(token))
            except SaslError as exc:
                raise _Failed(str(exc)) from None
            await conn.write([_SIZE.pack(len(reply)) + reply])
            if server.complete:
                conn.token_authenticated = bool(getattr(server, "token_authenticated", False))
                return server.authorization_id
