"""SASL/GSSAPI (Kerberos V5) on the server, RFC 4752, as Kafka serves it (the JDK's GssKrb5Server
under Kafka's SaslServerAuthenticator), with MIT Kerberos doing the Kerberos part through the
python `gssapi` package (optional: `pip install 'pybroker[kerberos]'`, built against libkrb5).

Exchange (each token one SaslAuthenticate, or one unframed token after SaslHandshake v0):
1. context establishment: each client token goes to gss_accept_sec_context with the broker's
   acceptor credential (its service principal from the keytab); the replies are the acceptor's
   tokens (the AP-REP of mutual authentication). When the context is established with an output
   token, that token is sent and the client answers with an empty token;
2. security layer offer: the server sends gss_wrap (integrity only) of 4 bytes,
   [supported layers = 0x01 (none), maximum message size (3 bytes, big-endian, 65536)]: Kafka
   offers authentication only (qop "auth");
3. the client's gss_wrap of [chosen layer, its maximum size (3 bytes), authorization id (UTF-8,
   may be empty)]: the layer must be 0x01; the reply is empty and the login is complete.
The authenticated name is the client's Kerberos principal (`alice@EXAMPLE.COM`); a requested
authorization id is ignored, as Kafka's callback handler authorizes the authentication id. The
listener maps it to `User:<short name>` with `sasl.kerberos.principal.to.local.rules`.
Failures (bad tickets, a ticket for another service, a wrong layer) are SaslError: the client gets
Kafka's generic SASL_AUTHENTICATION_FAILED text.

The acceptor credential: the JAAS line's `principal` (a `service/host@REALM` name) from its
`keyTab` (Krb5LoginModule's useKeyTab=true storeKey=true), acquired once per listener at start so a
missing key fails the start, not every login; no ticket from the KDC is needed to accept.
Concurrency: `evaluate` runs MIT's acceptor, which reads the keytab and may write a replay cache,
so the authenticator runs it on a worker thread (`blocking`); one instance per connection.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping

from pybroker.config import ConfigError
from pybroker.errors import SaslError
from pybroker.security.sasl.kerberos_name import KerberosName, KerberosShortNamer, NoMatchingRule

log = logging.getLogger("pybroker.security")

MECHANISM = "GSSAPI"
NO_SECURITY_LAYER = 0x01
MAX_BUFFER_SIZE = 65536  # the JDK's default javax.security.sasl.maxbuffer, what Kafka offers
_LAYERS = struct.Struct(">I")

try:
    import gssapi
    import gssapi.exceptions

    AVAILABLE = True
except ImportError:  # the optional package is not installed: GSSAPI is refused at start
    AVAILABLE = False


class ServerLogin:
    """The broker's Kerberos identity on one listener (Kafka's KerberosLogin, server side)."""

    def __init__(self, jaas_options: Mapping[str, str], service_name: str | None, listener_name: str) -> None:
        """ConfigError (one line) for a missing package, a JAAS line without a keytab or principal,
        or a keytab that does not hold the principal's key."""
        if not AVAILABLE:
            raise ConfigError("SASL mechanism GSSAPI needs the python package gssapi (pip install "
                              "'pybroker[kerberos]'; it builds against MIT Kerberos: apt-get install libkrb5-dev)")
        service = jaas_options.get("serviceName") or service_name
        if not service:
            raise ConfigError(f"No serviceName defined in either JAAS or Kafka config (listener {listener_name}: "
                              "set sasl.kerberos.service.name)")
        principal, keytab = jaas_options.get("principal"), jaas_options.get("keyTab")
        if jaas_options.get("useKeyTab", "false").lower() != "true" or not keytab or not principal:
            raise ConfigError(f"The GSSAPI JAAS line of listener {listener_name} needs useKeyTab=true, keyTab=\"<path>\""
                              " and principal=\"<service>/<host>@<REALM>\": pybroker accepts with the keytab's key")
        self.service_name = service
        self.principal = principal
        self.keytab = keytab
        try:
            self.credentials = gssapi.Credentials(
                name=gssapi.Name(principal, gssapi.NameType.kerberos_principal), usage="accept",
                mechs=[gssapi.MechType.kerberos], store={b"keytab": keytab.encode()})
            self.credentials.inquire()  # fails now when the keytab lacks the principal's key
        except gssapi.exceptions.GSSError as exc:
            raise ConfigError(f"Cannot use Kerberos principal {principal} from keytab {keytab} on listener "
                              f"{listener_name}: {_gss_text(exc)}") from None
        if KerberosName.parse(principal).service_name != service:
            # Kafka accepts with the principal whatever the service name; clients configured with
            # sasl.kerberos.service.name will ask for another one, so say so
            log.warning("The GSSAPI principal %s of listener %s does not start with sasl.kerberos.service.name %s: "
                        "clients asking for %s/<host> will be refused", principal, listener_name, service, service)


def _gss_text(exc: Exception) -> str:
    return " ".join(str(exc).split())


class GssapiSaslServer:
    mechanism = MECHANISM
    blocking = True  # evaluate() reads the keytab: the authenticator runs it on a thread

    def __init__(self, login: ServerLogin, short_namer: KerberosShortNamer) -> None:
        self._ctx = gssapi.SecurityContext(creds=login.credentials, usage="accept")
        self._short_namer = short_namer
        self._stage = 0  # 0 context, 1 offer due (after an empty token), 2 answer due, 3 done
        self.complete = False
        self.authorization_id = ""
        self.kerberos_principal = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            return self._evaluate(token)
        except gssapi.exceptions.GSSError as exc:
            raise SaslError(f"GSSAPI failure: {_gss_text(exc)}") from None

    def _evaluate(self, token: bytes) -> bytes:
        if self._stage == 0:
            out = self._ctx.step(token)
            if not self._ctx.complete:
                return out or b""
            self.kerberos_principal = str(self._ctx.initiator_name)
            if out:
                self._stage = 1
                return out
            return self._offer()
        if self._stage == 1:
            if token:
                raise SaslError("GSSAPI: expected an empty token after context establishment")
            return self._offer()
        if self._stage == 2:
            answer = self._ctx.unwrap(token).message
            if len(answer) < 4:
                raise SaslError("GSSAPI: the client's security layer answer is shorter than 4 bytes")
            layer = answer[0]
            if layer != NO_SECURITY_LAYER:
                raise SaslError(f"GSSAPI: the client chose security layer {layer:#x}; only no security layer "
                                "(authentication only) is supported")
            try:
                answer[4:].decode("utf-8")
            except UnicodeDecodeError:
                raise SaslError("GSSAPI: the authorization id is not UTF-8") from None
            try:
                self.authorization_id = self._short_namer.short_name(KerberosName.parse(self.kerberos_principal))
            except (NoMatchingRule, ValueError) as exc:
                raise SaslError(f"Failed to set name for '{self.kerberos_principal}' based on Kerberos "
                                f"authentication rules: {exc}") from None
            self._stage = 3
            self.complete = True
            return b""
        raise SaslError("GSSAPI authentication already complete")

    def _offer(self) -> bytes:
        self._stage = 2
        return bytes(self._ctx.wrap(_LAYERS.pack(NO_SECURITY_LAYER << 24 | MAX_BUFFER_SIZE), False).message)
