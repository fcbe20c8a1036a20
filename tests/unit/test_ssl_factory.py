"""security/ssl_factory.py without sockets: Kafka's SslPrincipalMapper cases, the RFC 2253 DN of
a certificate, store loading and its one-line errors."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pybroker.config import SSL_CONFIG_DEFS, ConfigError
from pybroker.security.ssl_factory import (
    ANONYMOUS,
    SslPrincipalMapper,
    build_context,
    principal_builder,
    subject_dn,
)
from tests.security.certs import CertificateAuthority

# SslPrincipalMapperTest (Kafka clients) valid and invalid rule sets
VALID = ["DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
         "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
         "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L", "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
         "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/", "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/"]
INVALID = ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
           "RULE:CN=(.*?),OU=ServiceUsers.*/$1/L/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1/U/L",
           "RULE:CN=(.*?),OU=ServiceUsers.*/$1/LU", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
           "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/Test"]


@pytest.mark.parametrize("rules", VALID)
def test_valid_rules_parse(rules):
    assert SslPrincipalMapper(rules).rules


@pytest.mark.parametrize("rules", INVALID)
def test_invalid_rules_are_a_config_error(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        SslPrincipalMapper(rules)


def test_rules_apply_in_order_with_case_and_back_references():
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=javasoft,dc=mycp,dc=com") == "DUKE@JAVASOFT"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_escaped_commas_stay_inside_a_rule():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_a_back_reference_past_the_groups_is_literal_and_no_rule_is_an_error():
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1-$2/").name("CN=a") == "a-$2"
    with pytest.raises(ValueError, match="No rules apply"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")


def _cert(attrs: list[x509.NameAttribute]) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(attrs)
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def test_subject_dn_is_rfc2253_most_specific_first_with_escapes_and_hex_for_other_types():
    der = _cert([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
                 x509.NameAttribute(NameOID.COMMON_NAME, "Doe, Jane"),
                 x509.NameAttribute(NameOID.EMAIL_ADDRESS, "j@x")])
    # emailAddress has no RFC 2253 keyword: Java writes its OID and the DER value in hex (IA5String)
    assert subject_dn(der) == r"1.2.840.113549.1.9.1=#16036a4078,CN=Doe\, Jane,O=Acme,C=US"
    assert principal_builder({"ssl.principal.mapping.rules": "DEFAULT"})(der).startswith("User:1.2.840")
    assert principal_builder({"ssl.principal.mapping.rules": "DEFAULT"})(None) == ANONYMOUS


def values(**kw: object) -> dict[str, object]:
    out = {d.name: d.default for d in SSL_CONFIG_DEFS}
    out.update({k.replace("_", "."): v for k, v in kw.items()})
    return out


def test_pem_server_context_and_its_errors(tmp_path):
    ca = CertificateAuthority("ca")
    store, _, _ = ca.issue("broker", server=True).write_pem(tmp_path, "b", password="pw")
    ctx = build_context(values(ssl_keystore_type="PEM", ssl_keystore_location=str(store), ssl_key_password="pw",
                               ssl_client_auth="required", ssl_enabled_protocols=["TLSv1.3"]), server=True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(ConfigError, match="Failed to load the SSL keystore"):
        build_context(values(ssl_keystore_type="PEM", ssl_keystore_location=str(store), ssl_key_password="no"),
                      server=True)
    with pytest.raises(ConfigError, match="reads PEM and PKCS12"):
        build_context(values(ssl_keystore_location=str(store)), server=True)  # JKS, the default
    with pytest.raises(ConfigError, match="ssl.cipher.suites"):
        build_context(values(ssl_keystore_type="PEM", ssl_keystore_location=str(store), ssl_key_password="pw",
                             ssl_cipher_suites=["NOT_A_SUITE"]), server=True)


def _presented_serial(client_ctx: ssl.SSLContext, server_ctx: ssl.SSLContext) -> int:
    """The serial of the certificate a client context presents, through a handshake in memory."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        try:
            der = server.getpeercert(binary_form=True)
        except ValueError:  # handshake not done yet
            continue
        if der:
            return x509.load_der_x509_certificate(der).serial_number
    raise AssertionError("no handshake")


def test_client_context_reload_presents_the_new_certificate_to_peers(tmp_path):
    from pybroker.security.ssl_factory import ClientSsl

    ca = CertificateAuthority("ca")
    ca_pem = ca.write_pem(tmp_path / "ca.pem")
    first, second = ca.issue("broker", server=True), ca.issue("broker", server=True)
    store1, _, _ = first.write_pem(tmp_path, "one")
    store2, _, _ = second.write_pem(tmp_path, "two")
    base = values(ssl_keystore_type="PEM", ssl_truststore_type="PEM", ssl_truststore_location=str(ca_pem),
                  ssl_client_auth="required")
    server = build_context(base | {"ssl.keystore.location": str(store1)}, server=True)
    client = ClientSsl("SSL", base | {"ssl.keystore.location": str(store1)})
    shared = client.context
    assert _presented_serial(shared, server) == first.serial
    assert client.reconfigure(base | {"ssl.keystore.location": str(store2)})
    assert client.context is shared and _presented_serial(shared, server) == second.serial
    with pytest.raises(ConfigError):
        client.reconfigure(base | {"ssl.keystore.location": str(tmp_path / "missing.pem")})
    assert _presented_serial(shared, server) == second.serial
