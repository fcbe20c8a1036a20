"""A SASL listener's setup (Kafka's SaslChannelBuilder + JaasContext on the server side): which
mechanisms it offers and a fresh mechanism server per connection.

Configuration, per listener `<l>` (lower case in keys), the listener-prefixed key first:
- `listener.name.<l>.sasl.enabled.mechanisms`, else `sasl.enabled.mechanisms` (Kafka's default
  GSSAPI; a mechanism pybroker lacks is refused at start, naming the ones it has);
- one JAAS line per enabled mechanism, `listener.name.<l>.<mech>.sasl.jaas.config`, else
  `<mech>.sasl.jaas.config`; Kafka refuses to start without one (it would look for a JAAS file,
  which pybroker does not read), and so does pybroker. The unprefixed `sasl.jaas.config` is ignored
  on a broker with a warning, as Kafka ignores it;
- PLAIN reads its users (`user_<name>="<password>"`) from its line; SCRAM reads the credentials in
  the metadata image at each login (AlterUserScramCredentials takes effect on the next one);
  OAUTHBEARER reads the unsecured validator's options from its line, unless
  `[listener.name.<l>.]oauthbearer.sasl.server.callback.handler.class` names Kafka's
  OAuthBearerValidatorCallbackHandler: then the secured validator checks signed JWTs against a
  JWKS with the `sasl.oauthbearer.*` keys (broker_jwt_validator.py, jwks.py), its keys loaded by
  `run` before the listener serves; GSSAPI reads the broker's
  `principal` and `keyTab` from its line (Krb5LoginModule's), `sasl.kerberos.service.name` and
  `sasl.kerberos.principal.to.local.rules` (both listener-prefixable), acquiring the keytab's key
  at start (security/sasl/gssapi.py);
- `[listener.name.<l>.[<mech>.]]connections.max.reauth.ms` (KIP-368), per mechanism.
Concurrency: built once at start on the trio thread; `server()` is called per connection;
`run` is the listener's background task (the JWKS refresh), started before the listener serves.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from pybroker.config import BrokerConfig, ConfigError
from pybroker.metadata.delegation_token import split_principal, token_hmac
from pybroker.metadata.image import MetadataImage, ScramCredential
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.security.sasl import gssapi, oauthbearer, plain, scram
from pybroker.security.sasl.broker_jwt_validator import (
    HANDLER_CLASS,
    UNSECURED_HANDLER_CLASS,
    BrokerJwtValidator,
)
from pybroker.security.sasl.jaas import JaasEntry, parse_one
from pybroker.security.sasl.kerberos_name import KerberosShortNamer, default_realm

SUPPORTED_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslServer(Protocol):
    """One mechanism's exchange on one connection (javax.security.sasl.SaslServer)."""

    mechanism: str
    complete: bool
    authorization_id: str

    def evaluate(self, token: bytes) -> bytes:
        """The reply to a client token; SaslError / SaslAuthenticationError when it fails."""
        ...


@dataclass
class ListenerSasl:
    listener_name: str
    mechanisms: list[str]  # sasl.enabled.mechanisms of the listener, in its order
    jaas: dict[str, JaasEntry]
    credentials: scram.CredentialLookup
    now_ms: Callable[[], int]
    max_receive_size: int  # sasl.server.max.receive.size
    failed_authentication_delay_ms: int  # connection.failed.authentication.delay.ms
    kerberos: gssapi.ServerLogin | None = None  # GSSAPI's acceptor credential
    short_namer: KerberosShortNamer = field(default_factory=lambda: KerberosShortNamer([]))
    jwt_validator: BrokerJwtValidator | None = None  # OAUTHBEARER's secured validator, when chosen
    tokens: scram.TokenLookup | None = None  # delegation tokens (None: delegation.token.secret.key unset)
    # mechanism -> connections.max.reauth.ms on this listener (KIP-368; 0: off)
    reauth_ms: dict[str, int] = field(default_factory=dict)
    # waited for before a mechanism reads credentials: a broker listener's logins wait until the
    # node serves (its image replayed), as Kafka opens its client listeners only then
    serving: Callable[[], Awaitable[None]] | None = None

    async def wait_serving(self) -> None:
        if self.serving is not None:
            await self.serving()

    def max_reauth_ms(self, mechanism: str) -> int:
        return self.reauth_ms.get(mechanism, 0)

    @classmethod
    def of(cls, config: BrokerConfig, listener_name: str, credentials: scram.CredentialLookup,
           now_ms: Callable[[], int], tokens: scram.TokenLookup | None = None,
           serving: Callable[[], Awaitable[None]] | None = None) -> ListenerSasl:
        """ConfigError (one line) for a mechanism pybroker lacks or a missing or malformed JAAS line."""
        mechanisms = [m.strip().upper() for m in config.listener_config(listener_name, "sasl.enabled.mechanisms")]
        if not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms of listener {listener_name} is empty")
        jaas: dict[str, JaasEntry] = {}
        for mech in mechanisms:
            if mech not in SUPPORTED_MECHANISMS:
                raise ConfigError(f"SASL mechanism {mech} of listener {listener_name} (sasl.enabled.mechanisms) is "
                                  f"not supported by pybroker; the supported ones are {', '.join(SUPPORTED_MECHANISMS)}")
            line = config.sasl_jaas_config(listener_name, mech)
            if line is None:
                raise ConfigError(f"No JAAS configuration for SASL mechanism {mech} on listener {listener_name}: set "
                                  f"listener.name.{listener_name.lower()}.{mech.lower()}.sasl.jaas.config")
            jaas[mech] = parse_one(line)
        jwt_validator = None
        for mech in mechanisms:
            handler = config.sasl_mechanism_config(listener_name, mech, "sasl.server.callback.handler.class",
                                                   unprefixed=False)
            handler = str(handler).strip() if handler else None
            if mech == "OAUTHBEARER" and handler == HANDLER_CLASS:
                jwt_validator = BrokerJwtValidator.of(config, listener_name, now_ms)
            elif mech == "OAUTHBEARER" and handler in (None, UNSECURED_HANDLER_CLASS):
                oauthbearer.UnsecuredValidator(jaas["OAUTHBEARER"].options)  # the options must be valid now
            elif handler is not None:
                raise ConfigError(f"{mech.lower()}.sasl.server.callback.handler.class={handler} of listener "
                                  f"{listener_name} is not available in pybroker (it runs no Java classes); for "
                                  f"OAUTHBEARER it offers {HANDLER_CLASS}")
        kerberos, short_namer = None, KerberosShortNamer([])
        if "GSSAPI" in jaas:
            kerberos = gssapi.ServerLogin(jaas["GSSAPI"].options,
                                          config.listener_config(listener_name, "sasl.kerberos.service.name"),
                                          listener_name)
            short_namer = KerberosShortNamer.from_rules(
                default_realm(), config.listener_config(listener_name, "sasl.kerberos.principal.to.local.rules"))
        return cls(listener_name, mechanisms, jaas, credentials, now_ms, config["sasl.server.max.receive.size"],
                   config["connection.failed.authentication.delay.ms"], kerberos, short_namer, jwt_validator,
                   tokens=tokens,
                   reauth_ms={mech: config.connections_max_reauth_ms(listener_name, mech) for mech in mechanisms},
                   serving=serving)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The listener's background work: OAUTHBEARER's JWKS, loaded (ConfigError when it cannot
        be) before `started`, then refreshed until cancelled; nothing for the other mechanisms."""
        if self.jwt_validator is None:
            task_status.started()
            return
        await self.jwt_validator.jwks.run(task_status=task_status)

    def server(self, mechanism: str) -> SaslServer:
        """A fresh exchange for an enabled mechanism."""
        if mechanism == "GSSAPI" and self.kerberos is not None:
            return gssapi.GssapiSaslServer(self.kerberos, self.short_namer)
        if mechanism == "PLAIN":
            return plain.PlainSaslServer(self.jaas[mechanism].options)
        if mechanism in scram.MECHANISMS:
            return scram.ScramSaslServer(mechanism, self.credentials, tokens=self.tokens, now_ms=self.now_ms)
        if mechanism == "OAUTHBEARER":
            validator: oauthbearer.TokenValidator = (
                self.jwt_validator if self.jwt_validator is not None
                else oauthbearer.UnsecuredValidator(self.jaas[mechanism].options))
            return oauthbearer.OAuthBearerSaslServer(validator, self.now_ms)
        raise KeyError(mechanism)


def image_credentials(get_image: Callable[[], MetadataImage]) -> scram.CredentialLookup:
    """A SCRAM credential lookup over the node's current metadata image."""
    def lookup(name: str, type_id: int) -> ScramCredential | None:
        return get_image().scram_credentials.get(name, {}).get(type_id)
    return lookup


def image_tokens(get_image: Callable[[], MetadataImage], secret_key: str) -> scram.TokenLookup:
    """Delegation tokens for SCRAM logins over the node's metadata image (Kafka's
    DelegationTokenCache): the password is base64(HMAC-SHA512(secret key, token id)), its SCRAM keys
    derived once per token and mechanism (random salt, 4096 iterations, as
    DelegationTokenManager.prepareScramCredentials) and dropped with the token."""
    cache: dict[tuple[str, int], ScramCredential] = {}

    def lookup(token_id: str, type_id: int) -> scram.TokenCredential | None:
        tokens = get_image().delegation_tokens
        token = tokens.get(token_id)
        if token is None:
            return None
        credential = cache.get((token_id, type_id))
        if credential is None:
            if len(cache) > 2 * len(tokens) + 16:  # forget removed tokens
                for key in [k for k in cache if k[0] not in tokens]:
                    del cache[key]
            password = base64.b64encode(token_hmac(secret_key, token_id))
            credential = scram.credential_for_password(type_id, password, secrets.token_bytes(16))
            cache[(token_id, type_id)] = credential
        return scram.TokenCredential(credential, split_principal(token.owner)[1], token.expiry_timestamp,
                                     token.max_timestamp)
    return lookup


CLIENT_MECHANISMS = SUPPORTED_MECHANISMS


def client_sasl(config: BrokerConfig, listener_name: str, mechanism_key: str) -> SaslClientConfig | None:
    """This node's login to its peers' `listener_name` (the inter-broker listener with
    `sasl.mechanism.inter.broker.protocol`, the controller listener with
    `sasl.mechanism.controller.protocol`): None unless the listener is SASL_*; the username and
    password (or OAUTHBEARER's unsecuredLoginStringClaim_sub, or GSSAPI's keyTab and principal)
    from the listener's JAAS line for that mechanism, as Kafka's inter-broker client takes them.
    ConfigError (one line) otherwise."""
    protocol = config.security_protocol_map.get(listener_name.upper(), "PLAINTEXT")
    if not protocol.startswith("SASL_"):
        return None
    mech = str(config[mechanism_key]).strip().upper()
    if mech not in CLIENT_MECHANISMS:
        raise ConfigError(f"{mechanism_key}={mech} is not supported by pybroker's inter-node client; the supported "
                          f"mechanisms are {', '.join(CLIENT_MECHANISMS)}")
    if any(e.listener_name.upper() == listener_name.upper() for e in config.listeners):
        enabled = [m.strip().upper() for m in config.listener_config(listener_name, "sasl.enabled.mechanisms")]
        if mech not in enabled:
            raise ConfigError(f"{mechanism_key} must be included in sasl.enabled.mechanisms of listener "
                              f"{listener_name} when SASL is used for it")
    line = config.sasl_jaas_config(listener_name, mech)
    if line is None:
        raise ConfigError(f"No JAAS configuration for SASL mechanism {mech} on listener {listener_name}: set "
                          f"listener.name.{listener_name.lower()}.{mech.lower()}.sasl.jaas.config with this node's "
                          "username and password")
    options = dict(parse_one(line).options)
    username, password = options.pop("username", ""), options.pop("password", "")
    if mech == "GSSAPI":
        return _gssapi_client(config, listener_name, options)
    if mech == "OAUTHBEARER":
        handler = config.sasl_mechanism_config(listener_name, mech, "sasl.server.callback.handler.class",
                                               unprefixed=False)
        if handler and str(handler).strip() == HANDLER_CLASS:
            # Kafka's node would fetch a token with OAuthBearerLoginCallbackHandler; pybroker's
            # login only mints the unsecured one, which this listener's validator refuses
            raise ConfigError(f"{mechanism_key}=OAUTHBEARER: listener {listener_name} validates signed tokens "
                              f"({HANDLER_CLASS}) and this node's own login sends only unsecured ones; use another "
                              "mechanism for it")
        if not options.get("unsecuredLoginStringClaim_sub"):
            raise ConfigError(f"The OAUTHBEARER JAAS line of listener {listener_name} needs "
                              "unsecuredLoginStringClaim_sub for this node's own login")
    elif not username or not password:
        raise ConfigError(f"The {mech} JAAS line of listener {listener_name} needs username and password for this "
                          "node's own login")
    return SaslClientConfig(mech, username, password, options)


def _gssapi_client(config: BrokerConfig, listener_name: str, options: dict[str, str]) -> SaslClientConfig:
    """The node's Kerberos login: its keytab and principal (useKeyTab=true), else the default
    ticket cache (useTicketCache=true); the peer's service name."""
    if not gssapi.AVAILABLE:
        raise ConfigError("SASL mechanism GSSAPI needs the python package gssapi (pip install "
                          "'pybroker[kerberos]'; it builds against MIT Kerberos: apt-get install libkrb5-dev)")
    service = options.get("serviceName") or config.listener_config(listener_name, "sasl.kerberos.service.name")
    if not service:
        raise ConfigError(f"No serviceName defined in either JAAS or Kafka config (listener {listener_name}: "
                          "set sasl.kerberos.service.name)")
    keytab_login = options.get("useKeyTab", "false").lower() == "true"
    if keytab_login and not (options.get("keyTab") and options.get("principal")):
        raise ConfigError(f"The GSSAPI JAAS line of listener {listener_name} needs keyTab and principal with "
                          "useKeyTab=true for this node's own login")
    if not keytab_login and options.get("useTicketCache", "false").lower() != "true":
        raise ConfigError(f"The GSSAPI JAAS line of listener {listener_name} needs useKeyTab=true (with keyTab and "
                          "principal) or useTicketCache=true for this node's own login")
    return SaslClientConfig("GSSAPI", options=options | {"serviceName": service})
