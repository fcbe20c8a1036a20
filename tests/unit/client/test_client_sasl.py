"""BrokerConnection's SASL login (Kafka's SaslClientAuthenticator order: ApiVersions, then
SaslHandshake naming the mechanism, then SaslAuthenticate per token) against the broker's own
mechanism servers behind a scripted socket: PLAIN and SCRAM-SHA-512 succeed with the right
password; a wrong password, a mechanism the listener lacks, and a server that cannot prove it
holds the SCRAM credential each end the connection with AuthenticationFailedError, which the
retry loop does not repeat."""

from __future__ import annotations

import hashlib

import pytest

from pybroker.client.connection import AuthenticationFailedError, BrokerConnection, is_retriable
from pybroker.controller.scram import stored_and_server_key
from pybroker.errors import SaslError
from pybroker.metadata.image import ScramCredential
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.client_security import ClientSecurity
from pybroker.protocol.frame import encode_response
from pybroker.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.security.sasl.plain import PlainSaslServer
from pybroker.security.sasl.scram import ScramSaslServer

from .fakes import FakeSocket, api_versions_body

RANGES = {ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12), ApiKey.SASL_HANDSHAKE: (0, 1),
          ApiKey.SASL_AUTHENTICATE: (0, 2)}
SALT = b"0123456789abcdef"


def scram_credential(password: str) -> ScramCredential:
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), SALT, 4096)
    stored, server = stored_and_server_key(2, salted)
    return ScramCredential(SALT, stored, server, 4096)


def broker(mechanisms: dict[str, object], forge_final: bool = False):
    """A responder that runs the listener's mechanism server over SaslHandshake/SaslAuthenticate."""
    state: dict[str, object] = {}

    def answer(header, body) -> bytes:
        return b"".join(encode_response(header.request_api_key, header.request_api_version, header.correlation_id,
                                        body))

    def responder(header, body):
        key = header.request_api_key
        if key == ApiKey.API_VERSIONS:
            return answer(header, api_versions_body(RANGES))
        if key == ApiKey.SASL_HANDSHAKE:
            if body.mechanism not in mechanisms:
                return answer(header, SaslHandshakeResponse(error_code=33, mechanisms=list(mechanisms)))
            state["server"] = mechanisms[body.mechanism]
            return answer(header, SaslHandshakeResponse(error_code=0, mechanisms=list(mechanisms)))
        if key == ApiKey.SASL_AUTHENTICATE:
            server = state["server"]
            try:
                reply = server.evaluate(bytes(body.auth_bytes))  # type: ignore[attr-defined]
            except SaslError as exc:
                return answer(header, SaslAuthenticateResponse(error_code=58, error_message=str(exc)))
            if forge_final and getattr(server, "complete", False):
                reply = b"v=" + b"A" * 88
            return answer(header, SaslAuthenticateResponse(error_code=0, auth_bytes=reply))
        assert getattr(state.get("server"), "complete", False), "a request before the login completed"
        return answer(header, MetadataResponse(cluster_id="c1", controller_id=1))
    return responder


def connect(responder, sasl: SaslClientConfig) -> tuple[BrokerConnection, FakeSocket]:
    sock = FakeSocket(responder)
    conn = BrokerConnection("h", 1, socket_factory=lambda addr, t: sock,
                            security=ClientSecurity("SASL_PLAINTEXT", None, sasl))
    conn.connect()
    return conn, sock


def scram_server():
    return ScramSaslServer("SCRAM-SHA-512", lambda name, t: scram_credential("s3cret") if name == "carol" else None)


@pytest.mark.parametrize("mechanism,server,user,password", [
    ("PLAIN", lambda: PlainSaslServer({"user_alice": "alice-secret"}), "alice", "alice-secret"),
    ("SCRAM-SHA-512", scram_server, "carol", "s3cret"),
])
def test_a_login_precedes_every_request(mechanism, server, user, password):
    conn, sock = connect(broker({mechanism: server()}), SaslClientConfig(mechanism, user, password))
    assert conn.send(MetadataRequest(topics=None)).cluster_id == "c1"
    keys = [h.request_api_key for h, _ in sock.requests]
    rounds = 1 if mechanism == "PLAIN" else 2
    assert keys == [ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE] + [ApiKey.SASL_AUTHENTICATE] * rounds + \
        [ApiKey.METADATA]


@pytest.mark.parametrize("responder,sasl,message", [
    (broker({"SCRAM-SHA-512": scram_server()}), SaslClientConfig("SCRAM-SHA-512", "carol", "wrong"),
     "SASL_AUTHENTICATION_FAILED"),
    (broker({"SCRAM-SHA-512": scram_server()}), SaslClientConfig("PLAIN", "carol", "s3cret"),
     "SASL mechanism PLAIN is not enabled on this listener (UNSUPPORTED_SASL_MECHANISM); it offers SCRAM-SHA-512"),
    (broker({"SCRAM-SHA-512": scram_server()}, forge_final=True), SaslClientConfig("SCRAM-SHA-512", "carol", "s3cret"),
     "does not hold the credential"),
])
def test_a_refused_login_is_final(responder, sasl, message):
    sock = FakeSocket(responder)
    conn = BrokerConnection("h", 1, socket_factory=lambda addr, t: sock,
                            security=ClientSecurity("SASL_PLAINTEXT", None, sasl))
    with pytest.raises(AuthenticationFailedError) as info:
        conn.connect()
    assert message in str(info.value)
    assert sock.closed and not conn.connected
    assert not is_retriable(info.value)
