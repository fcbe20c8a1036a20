"""sasl.kerberos.principal.to.local.rules (security/sasl/kerberos_name.py): Kafka's
KerberosShortNamer cases — DEFAULT, RULE with format, match, substitution, /L and /U — and the
rules Kafka refuses to parse."""

from __future__ import annotations

import pytest

from pybroker.config import ConfigError
from pybroker.security.sasl.kerberos_name import KerberosName, KerberosShortNamer, NoMatchingRule


def short(rules: list[str], name: str, realm: str = "REALM.COM") -> str:
    return KerberosShortNamer.from_rules(realm, rules).short_name(KerberosName.parse(name))


def test_parse_names():
    assert KerberosName.parse("kafka/host.example.com@EX.COM") == KerberosName("kafka", "host.example.com", "EX.COM")
    assert KerberosName.parse("alice@EX.COM") == KerberosName("alice", None, "EX.COM")
    assert KerberosName.parse("alice") == KerberosName("alice", None, None)
    assert str(KerberosName.parse("kafka/h@R")) == "kafka/h@R"
    with pytest.raises(ValueError, match="Malformed Kerberos name"):
        KerberosName.parse("a@b@c")


def test_default_rule_takes_the_primary_in_the_default_realm_only():
    assert short(["DEFAULT"], "alice@REALM.COM") == "alice"
    assert short(["DEFAULT"], "kafka/broker1@REALM.COM") == "kafka"
    assert short(["DEFAULT"], "alice") == "alice"  # already short
    with pytest.raises(NoMatchingRule):
        short(["DEFAULT"], "alice@OTHER.COM")


def test_rules_apply_in_order_with_format_match_and_substitution():
    rules = [r"RULE:[1:$1](App\..*)s/App\.(.*)/$1/g", r"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g", "DEFAULT"]
    assert short(rules, "App.service-name/example.com@REALM.COM") == "service-name"
    assert short(rules, "App.service-name@REALM.COM") == "service-name"
    assert short(rules, "user/host@REALM.COM") == "user"
    realm_rule = [r"RULE:[1:$1@$0](.*@OTHER\.COM)s/@.*//"]
    assert short(realm_rule, "bob@OTHER.COM") == "bob"
    with pytest.raises(NoMatchingRule):
        short(realm_rule, "bob@REALM.COM")


def test_lower_and_upper_case():
    rules = ["RULE:[1:$1]/L", "RULE:[2:$1](Test.+)s/ABC///L", "RULE:[2:$1](ABC.*)s/ABC/XYZ/g/L",
             r"RULE:[2:$1](App\..*)s/App\.(.*)/$1/g/L", "RULE:[2:$1]/L", "DEFAULT"]
    assert short(rules, "User@REALM.COM") == "user"
    assert short(rules, "TestABC/host@FOO.COM") == "test"
    assert short(rules, "ABC_User_ABC/host@FOO.COM") == "xyz_user_xyz"
    assert short(rules, "App.SERVICE-name/example.com@REALM.COM") == "service-name"
    assert short(rules, "User/root@REALM.COM") == "user"
    assert short(["RULE:[1:$1]/U"], "alice@X") == "ALICE"


def test_first_replacement_without_g():
    assert short(["RULE:[1:$1](.*)s/a/o/"], "banana@R") == "bonana"
    assert short(["RULE:[1:$1](.*)s/a/o/g"], "banana@R") == "bonono"


def test_a_name_that_is_not_simple_is_refused():
    with pytest.raises(NoMatchingRule, match="Non-simple name"):
        short(["RULE:[1:$1@$0]"], "alice@REALM.COM")


@pytest.mark.parametrize("rule", ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/g", "rule:[1:$1]", "RULE:[1:$1/L",
                                  "RULE:[1:$1]/l", "RULE:[2:$1](ABC.*)s/ABC/XYZ/L/g", "RULE:[1:$1](x)bogus"])
def test_invalid_rules_are_refused(rule):
    with pytest.raises(ConfigError, match="Invalid rule"):
        KerberosShortNamer.from_rules("REALM.COM", [rule])
