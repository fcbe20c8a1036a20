"""TLS contexts and certificate principals of one listener (Kafka's SslFactory,
DefaultSslEngineFactory, SslPrincipalMapper and the SSL half of DefaultKafkaPrincipalBuilder).

Input: the listener's `ssl.*` values (`listener.name.<l>.<key>`, else the plain key;
BrokerConfig.listener_config). Output: an `ssl.SSLContext` for the server side of the listener
(or the client side, for this node's own connections to a peer's SSL listener) and a function
from the peer's DER certificate to a principal string.

Stores:
- `ssl.keystore.type=PEM`: `ssl.keystore.location` names a file holding the private key (PKCS#8,
  encrypted with `ssl.key.password` when set; a traditional RSA/EC key is taken too) and the
  certificate chain, or `ssl.keystore.key` + `ssl.keystore.certificate.chain` hold them inline.
  `ssl.keystore.password` is refused with PEM, as Kafka refuses it.
- `ssl.keystore.type=PKCS12`: `ssl.keystore.location` + `ssl.keystore.password`, read with the
  `cryptography` package, which opens the store and its key with that one password (a store
  whose key has another password, `ssl.key.password` in Kafka, does not load: re-export it).
- truststores alike: PEM (`ssl.truststore.location` or inline `ssl.truststore.certificates`) or
  PKCS12; none set: the system's default CAs (Java falls back to the JVM's cacerts).
- JKS, Kafka's default type, is not read (a Java-only format): a listener that would need it
  fails at start with one line naming PEM and PKCS12.
Python's `ssl` loads keys from files only: the key and chain are written, unencrypted, to an
anonymous memory file (memfd, never on disk) that is closed once loaded.

Other keys: `ssl.client.auth` none|requested|required -> CERT_NONE|CERT_OPTIONAL|CERT_REQUIRED;
`ssl.enabled.protocols` (TLSv1.2, TLSv1.3) -> the context's minimum and maximum version;
`ssl.protocol` (TLSv1.2 caps the maximum at 1.2, TLS / TLSv1.3 do not); `ssl.cipher.suites` in
Kafka's (IANA) names, translated to OpenSSL's for TLS 1.2, or OpenSSL's own names. Divergence:
Python cannot restrict TLS 1.3 suites, so TLS 1.3 names are accepted and every TLS 1.3 suite
stays enabled (a warning says so). `ssl.endpoint.identification.algorithm=https` (the default)
makes the client side check the peer's host name; "" turns the check off.

Principals: a verified client certificate's subject DN in RFC 2253 form (what Java's
X500Principal.getName() gives: most specific RDN first, keywords CN L ST O OU C STREET DC UID,
other attribute types as OID=#hex of the DER value) goes through `ssl.principal.mapping.rules`;
the result is `User:<name>`. No certificate: User:ANONYMOUS. A DN no rule matches fails the
connection (Kafka's NoMatchingRule fails authentication).

Reload (ListenerSsl.reconfigure, ClientSsl.reconfigure): new values, or store files replaced
under the same names (modification time and size), build a new context; a server listener swaps
it in for new connections, this node's client context is updated in place. A store that does not
load, or a certificate with another subject or alternative names, is refused.

Concurrency: contexts are built on the trio thread (at start and on a dynamic keystore change)
and only read afterwards; a reconfigured listener swaps in a new context for new connections.
Building one reads files and parses keys on the trio thread: milliseconds, at start and on an
admin's change only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pybroker.config import SSL_CONFIG_DEFS, BrokerConfig, ConfigError

log = logging.getLogger("pybroker.security")

ANONYMOUS = "User:ANONYMOUS"
SUPPORTED_STORE_TYPES = ("PEM", "PKCS12")
_PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_SSL_PROTOCOLS = ("TLS", "TLSv1.2", "TLSv1.3")
# Kafka (Java) names the TLS 1.2 suites by their IANA names, OpenSSL by its own
_IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
}
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
SSL_KEYS = tuple(d.name for d in SSL_CONFIG_DEFS)


def listener_ssl_values(config: BrokerConfig, listener_name: str) -> dict[str, Any]:
    """The `ssl.*` values one listener uses (per-listener override, else the plain key); an empty
    string counts as unset, as Kafka treats an empty store location."""
    values = {k: config.listener_config(listener_name, k) for k in SSL_KEYS}
    return {k: (None if v == "" and k != "ssl.endpoint.identification.algorithm" else v) for k, v in values.items()}


# ---------------------------------------------------------------------------- stores

def _pem_blocks(text: str, what: str) -> list[tuple[str, str]]:
    """(label, normalised PEM) of each block. Inline values from a properties file arrive with
    their line breaks turned into spaces (Kafka's PemStore accepts that too): the base64 body is
    re-wrapped at 64 columns."""
    out = []
    for label, body in _PEM_BLOCK.findall(text):
        b64 = "".join(body.split())
        lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
        out.append((label, f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"))
    if not out:
        raise ConfigError(f"Invalid PEM in {what}: no PEM block found")
    return out


def _read(path: str, key: str, binary: bool = False) -> Any:
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"Failed to load SSL store from {key}={path}: {exc.strerror or exc}") from None


def _store_type(values: dict[str, Any], key: str) -> str:
    kind = str(values[key]).upper()
    if kind not in SUPPORTED_STORE_TYPES:
        raise ConfigError(f"Invalid value {values[key]} for configuration {key}: pybroker reads PEM and PKCS12 "
                          f"stores, not {values[key]} (convert it, e.g. keytool -importkeystore -deststoretype PKCS12)")
    return kind


def _password(value: Any) -> bytes | None:
    return value.encode() if value else None


def load_keystore(values: dict[str, Any]) -> tuple[str, str, bytes | None] | None:
    """(certificate chain PEM, private key PEM, key password) of the keystore, None if none is set.
    ConfigError (one line) when it cannot be read."""
    location, inline_key, inline_chain = (values["ssl.keystore.location"], values["ssl.keystore.key"],
                                          values["ssl.keystore.certificate.chain"])
    if location is None and inline_key is None and inline_chain is None:
        return None
    kind = _store_type(values, "ssl.keystore.type")
    if kind == "PEM":
        if values["ssl.keystore.password"]:
            raise ConfigError("SSL key store password cannot be specified with PEM format, only key password "
                              "may be specified")
        if location is not None:
            if inline_key is not None or inline_chain is not None:
                raise ConfigError("Both SSL key store location and separate private key are specified.")
            text, what = _read(location, "ssl.keystore.location"), f"ssl.keystore.location={location}"
        else:
            if inline_key is None or inline_chain is None:
                raise ConfigError("SSL private key and certificate chain must both be specified (ssl.keystore.key "
                                  "and ssl.keystore.certificate.chain)")
            text, what = inline_key + "\n" + inline_chain, "ssl.keystore.key/ssl.keystore.certificate.chain"
        blocks = _pem_blocks(text, what)
        keys = [b for label, b in blocks if "PRIVATE KEY" in label]
        certs = [b for label, b in blocks if label == "CERTIFICATE"]
        if len(keys) != 1:
            raise ConfigError(f"Invalid PEM keystore {what}: expected one private key, found {len(keys)}")
        if not certs:
            raise ConfigError(f"Invalid PEM keystore {what}: no certificate found")
        return "".join(certs), keys[0], _password(values["ssl.key.password"])
    if inline_key is not None or inline_chain is not None:
        raise ConfigError(f"SSL private key can be specified only for PEM, but key store type is {kind}.")
    if location is None:
        raise ConfigError("SSL key store is not specified: ssl.keystore.location must be set for PKCS12")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read(location, "ssl.keystore.location", binary=True)
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, _password(values["ssl.keystore.password"]))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Failed to load SSL keystore {location} of type PKCS12: {exc}") from None
    if key is None or cert is None:
        raise ConfigError(f"Failed to load SSL keystore {location} of type PKCS12: no private key entry")
    chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in [cert, *(extra or [])])
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return chain, key_pem, None


def load_truststore(values: dict[str, Any]) -> str | None:
    """The trusted certificates as PEM text, None when no truststore is set."""
    location, inline = values["ssl.truststore.location"], values["ssl.truststore.certificates"]
    if location is None and inline is None:
        return None
    kind = _store_type(values, "ssl.truststore.type")
    if kind == "PEM":
        if values["ssl.truststore.password"]:
            raise ConfigError("SSL trust store password cannot be specified for PEM format.")
        if location is not None and inline is not None:
            raise ConfigError("Both SSL trust store location and separate trust certificates are specified.")
        text = _read(location, "ssl.truststore.location") if location is not None else inline
        what = f"ssl.truststore.location={location}" if location is not None else "ssl.truststore.certificates"
        certs = [b for label, b in _pem_blocks(text, what) if label == "CERTIFICATE"]
        if not certs:
            raise ConfigError(f"Invalid PEM truststore {what}: no certificate found")
        return "".join(certs)
    if inline is not None:
        raise ConfigError(f"SSL trust store certs can be specified only for PEM, but trust store type is {kind}.")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read(location, "ssl.truststore.location", binary=True)
    try:
        store = pkcs12.load_pkcs12(data, _password(values["ssl.truststore.password"]))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Failed to load SSL truststore {location} of type PKCS12: {exc}") from None
    trusted = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not trusted:
        raise ConfigError(f"Failed to load SSL truststore {location} of type PKCS12: no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in trusted)


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path to `text` that never reaches a disk (memfd), for ssl's file-only key loading."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pybroker-ssl", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, text.encode())
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="pybroker-ssl-") as d:  # 0700
        path = os.path.join(d, "key.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(text)
        yield path


# ---------------------------------------------------------------------------- contexts

def _versions(values: dict[str, Any]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    protocol = values["ssl.protocol"]
    if protocol not in _SSL_PROTOCOLS:
        raise ConfigError(f"Invalid value {protocol} for configuration ssl.protocol: pybroker supports "
                          f"{', '.join(_SSL_PROTOCOLS)}")
    enabled = values["ssl.enabled.protocols"] or ["TLSv1.2", "TLSv1.3"]
    for p in enabled:
        if p not in _PROTOCOL_VERSIONS:
            raise ConfigError(f"Invalid value {p} for configuration ssl.enabled.protocols: pybroker supports "
                              "TLSv1.2 and TLSv1.3")
    versions = sorted(_PROTOCOL_VERSIONS[p] for p in enabled)
    low, high = versions[0], versions[-1]
    if protocol == "TLSv1.2":
        high = ssl.TLSVersion.TLSv1_2
    if high < low:
        raise ConfigError(f"Invalid value {protocol} for configuration ssl.protocol: none of ssl.enabled.protocols "
                          f"{','.join(enabled)} remains")
    return low, high


def _ciphers(ctx: ssl.SSLContext, suites: list[str]) -> None:
    if not suites:
        return
    names = []
    tls13 = []
    for s in suites:
        if s in _TLS13_SUITES:
            tls13.append(s)
        elif s in _IANA_TO_OPENSSL:
            names.append(_IANA_TO_OPENSSL[s])
        elif "-" in s:
            names.append(s)  # an OpenSSL name
        else:
            raise ConfigError(f"Invalid value {s} for configuration ssl.cipher.suites: unknown cipher suite "
                              "(use its IANA name, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    if tls13:
        log.warning("ssl.cipher.suites: TLS 1.3 suites cannot be restricted by Python's ssl module; every TLS 1.3 "
                    "suite stays enabled")
    if names:
        try:
            ctx.set_ciphers(":".join(names))
        except ssl.SSLError:
            raise ConfigError(f"Invalid value {','.join(suites)} for configuration ssl.cipher.suites: no cipher "
                              "suite is available") from None


def build_context(values: dict[str, Any], server: bool, listener_name: str = "") -> ssl.SSLContext:
    """The TLS context for one listener's server side (`server`) or for connecting to it.
    ConfigError (one line, naming the key) on anything that does not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version, ctx.maximum_version = _versions(values)
    _ciphers(ctx, values["ssl.cipher.suites"])
    keystore = load_keystore(values)
    if keystore is None and server:
        where = f" for listener {listener_name}" if listener_name else ""
        raise ConfigError(f"SSL key store is not specified{where}: set ssl.keystore.location (PEM or PKCS12), or "
                          "ssl.keystore.key and ssl.keystore.certificate.chain (PEM)")
    if keystore is not None:
        chain, key, password = keystore
        with _memory_file(chain + key) as path:
            try:
                ctx.load_cert_chain(path, password=password or None)
            except ssl.SSLError as exc:
                raise ConfigError(f"Failed to load the SSL keystore (ssl.keystore.*, ssl.key.password): "
                                  f"{exc.reason or exc}") from None
            except TypeError as exc:  # an encrypted key and no password
                raise ConfigError(f"Failed to load the SSL keystore: {exc}") from None
    trusted = load_truststore(values)
    try:
        if trusted is not None:
            ctx.load_verify_locations(cadata=trusted)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH)
    except ssl.SSLError as exc:
        raise ConfigError(f"Failed to load the SSL truststore (ssl.truststore.*): {exc.reason or exc}") from None
    if server:
        mode = str(values["ssl.client.auth"]).lower()
        if mode not in _CLIENT_AUTH:
            raise ConfigError(f"Invalid value {values['ssl.client.auth']} for configuration ssl.client.auth: "
                              "String must be one of: required, requested, none")
        ctx.verify_mode = _CLIENT_AUTH[mode]
    else:
        algorithm = values["ssl.endpoint.identification.algorithm"] or ""
        if algorithm.lower() not in ("", "https"):
            raise ConfigError(f"Invalid value {algorithm} for configuration ssl.endpoint.identification.algorithm: "
                              "https or empty")
        ctx.check_hostname = algorithm.lower() == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


# ---------------------------------------------------------------------------- principals

_RULE = re.compile(r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)")
_RULE_SPLITTER = re.compile(r"\s*((?:DEFAULT)|RULE:(?:(?:\\.|[^\\/])*)/(?:(?:\\.|[^\\/])*)/(?:[LU]?).*?|(?:.*?))"
                            r"\s*(?:,\s*|$)")
_BACKREF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L" | "U" | ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(self.replacement, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _python_replacement(java: str, groups: int) -> str:
    """A Java replacement string ($n back references, \\x escapes) as Python's re.sub template; a
    reference past the group count drops digits, then becomes literal, as Kafka's rule does."""
    out = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACKREF.match(java, i)
        if m:
            digits = m.group(1)
            n = int(digits)
            while n > groups and n >= 10:
                n //= 10
            if n > groups:
                out.append("$" + digits)
            else:
                out.append(f"\\g<{n}>" + digits[len(str(n)):])
            i = m.end()
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`: `DEFAULT` (the DN itself) and `RULE:regex/replacement/[L|U]`,
    comma-separated, first matching rule wins (the regex must match the whole DN)."""

    def __init__(self, rules: str | None) -> None:
        text = (rules if rules is not None else "DEFAULT").strip()
        parsed: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(text):
            rule = m.group(1)
            if not rule:
                continue  # empty rules are ignored, as Kafka ignores them
            pm = _RULE.match(rule)
            if pm is None or pm.end() != len(rule):
                raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                  f"Invalid rule: `{rule}`")
            if pm.group(1):
                parsed.append(_Rule(None))
            elif pm.group(2) is not None:
                try:
                    pattern = re.compile(pm.group(2))
                except re.error as exc:
                    raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                      f"{exc}") from None
                parsed.append(_Rule(pattern, _python_replacement(pm.group(3), pattern.groups), pm.group(4)))
            else:
                raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                  f"Invalid rule: `{rule}`")
        self.rules = parsed

    def name(self, dn: str) -> str:
        """The mapped name; ValueError when no rule applies (NoMatchingRule)."""
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise ValueError(f"No rules apply to {dn}")


_RFC2253_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
                     "2.5.4.6": "C", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
                     "0.9.2342.19200300.100.1.1": "UID"}


def _escape_rfc2253(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(attr: Any) -> str:
    """#hex of an attribute value's DER encoding (RFC 2253 for types without a keyword)."""
    raw = attr.value.encode() if isinstance(attr.value, str) else bytes(attr.value)
    tag = int(getattr(getattr(attr, "_type", None), "value", 12))  # the ASN.1 string type; UTF8String
    n = len(raw)
    length = bytes([n]) if n < 128 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes(
        (n.bit_length() + 7) // 8, "big")
    return "#" + (bytes([tag]) + length + raw).hex()


def subject_dn(der_cert: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() (RFC 2253) writes it."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der_cert)
    rdns = []
    for rdn in reversed(list(cert.subject.rdns)):
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _RFC2253_KEYWORDS.get(oid)
            if keyword is not None:
                parts.append(f"{keyword}={_escape_rfc2253(str(attr.value))}")
            else:
                parts.append(f"{oid}={_der_hex(attr)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def principal_builder(values: dict[str, Any]) -> Callable[[bytes | None], str]:
    """DefaultKafkaPrincipalBuilder for SSL: peer certificate (DER, None without one) -> principal.
    ValueError when the rules map no name (the connection is then refused)."""
    mapper = SslPrincipalMapper(values["ssl.principal.mapping.rules"])
    import cryptography.x509  # noqa: F401  (loaded now, not on the trio thread at a first client's handshake)

    def build(der_cert: bytes | None) -> str:
        if der_cert is None:
            return ANONYMOUS
        return "User:" + mapper.name(subject_dn(der_cert))

    return build


def store_stamps(values: dict[str, Any]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime ns, size) of the key and trust store files: a file replaced under the same
    name counts as a change (Kafka's SslFactory compares the files' modification times)."""
    out = []
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        path = values.get(key)
        if path:
            try:
                st = os.stat(path)
                out.append((path, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((path, -1, -1))
    return tuple(out)


class ListenerSsl:
    """The TLS side of one listener (Kafka's SslChannelBuilder + reconfigurable SslFactory):
    the server context, the principal builder, and the values they were built from.
    `reconfigure` builds a new context from changed values and swaps it in only when it loads,
    so a bad keystore leaves the listener serving with the old one."""

    def __init__(self, listener_name: str, values: dict[str, Any]) -> None:
        self.listener_name = listener_name
        self.values = values
        self.stamps = store_stamps(values)
        self.context = build_context(values, server=True, listener_name=listener_name)
        self.principal_of = principal_builder(values)

    def changed(self, values: dict[str, Any]) -> bool:
        """Would `values` (or the store files, replaced since) make a new context?"""
        return values != self.values or store_stamps(values) != self.stamps

    @classmethod
    def of(cls, config: BrokerConfig, listener_name: str) -> ListenerSsl:
        return cls(listener_name, listener_ssl_values(config, listener_name))

    def reconfigure(self, values: dict[str, Any]) -> bool:
        """Rebuild from new values; True if the context changed. ConfigError if they do not load,
        or if the new certificate names another subject or other alternative names than the one
        in use (Kafka's SslFactory refuses both, ssl.allow.dn.changes / ssl.allow.san.changes
        being false by default: clients and peers that pinned the broker's identity keep it)."""
        if not self.changed(values):
            return False
        stamps = store_stamps(values)
        self.values, self.context, self.principal_of = values, *self.validate(values)
        self.stamps = stamps
        return True

    def validate(self, values: dict[str, Any]) -> tuple[ssl.SSLContext, Callable[[bytes | None], str]]:
        """What `reconfigure` would swap in (context, principal builder); ConfigError if refused."""
        context = build_context(values, server=True, listener_name=self.listener_name)
        principal_of = principal_builder(values)
        old, new = _identity(self.values), _identity(values)
        if old is not None and new is not None:
            if old[0] != new[0]:
                raise ConfigError(f"Keystore DistinguishedName does not match: existing={old[0]}, new={new[0]}")
            if old[1] != new[1]:
                raise ConfigError(f"Keystore SubjectAltNames do not match: existing={old[1]}, new={new[1]}")
        return context, principal_of


def _identity(values: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(subject DN, sorted subject alternative names) of the keystore's own certificate."""
    from cryptography import x509

    store = load_keystore(values)
    if store is None:
        return None
    leaf = x509.load_pem_x509_certificate(_pem_blocks(store[0], "keystore")[0][1].encode())
    try:
        sans = sorted(str(n.value) for n in leaf.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        sans = []
    return leaf.subject.rfc4514_string(), sans


class ClientSsl:
    """This node's client context for its peers' `listener_name` (the inter-broker or controller
    listener), built from that listener's own ssl.* values as Kafka's inter-broker clients are.

    The context object is shared by every channel that connects to peers, so a reload updates it
    in place: `SSLContext.load_cert_chain` replaces the certificate the next handshakes present,
    and new trusted certificates are added. Divergence: a CA removed from the truststore stays
    trusted by these clients until a restart (an SSLContext cannot forget a CA)."""

    def __init__(self, listener_name: str, values: dict[str, Any]) -> None:
        self.listener_name = listener_name
        self.values = values
        self.stamps = store_stamps(values)
        self.context = build_context(values, server=False, listener_name=listener_name)

    @classmethod
    def of(cls, config: BrokerConfig, listener_name: str) -> ClientSsl | None:
        """None when the listener is not SSL."""
        protocol = config.security_protocol_map.get(listener_name.upper(), "PLAINTEXT")
        if protocol not in ("SSL", "SASL_SSL"):
            return None
        return cls(listener_name, listener_ssl_values(config, listener_name))

    def reconfigure(self, values: dict[str, Any]) -> bool:
        """Load changed stores into the shared context; ConfigError (nothing changed) if they do not load."""
        stamps = store_stamps(values)
        if values == self.values and stamps == self.stamps:
            return False
        build_context(values, server=False, listener_name=self.listener_name)  # all of it must load
        keystore = load_keystore(values)
        if keystore is not None:
            chain, key, password = keystore
            with _memory_file(chain + key) as path:
                self.context.load_cert_chain(path, password=password or None)
        trusted = load_truststore(values)
        if trusted is not None:
            self.context.load_verify_locations(cadata=trusted)
        self.values, self.stamps = values, stamps
        return True


def client_context(config: BrokerConfig, listener_name: str) -> ssl.SSLContext | None:
    """A fresh client context for a peer's `listener_name`; None when the listener is not SSL."""
    client = ClientSsl.of(config, listener_name)
    return client.context if client is not None else None
