"""Kerberos principal names and Kafka's principal-to-local rules (KerberosName, KerberosRule,
KerberosShortNamer): how a client's Kerberos principal becomes its `User:<short name>`.

Name: `primary[/instance]@REALM` (`alice@EXAMPLE.COM`, `kafka/broker1.example.com@EXAMPLE.COM`);
a name without `@` is already short.

Rules, `sasl.kerberos.principal.to.local.rules` (a list, default `DEFAULT`), tried in order, the
first that yields a name wins; none -> NoMatchingRule:
- `DEFAULT`: the primary, when the realm is the default realm (krb5.conf's default_realm);
- `RULE:[n:format](match)s/pattern/replacement/g/L` (the `(match)`, `s/…/…/`, `g` and the
  trailing `/L` or `/U` optional): applies to names of n components; `format` builds a string
  from `$0` (realm), `$1` (primary), `$2` (instance); it must then fully match the regular
  expression `match`; `s/pattern/replacement/` rewrites it (every match with `g`, `$1` names a
  group in the replacement, as in Java); /L lower-cases, /U upper-cases. A result holding `/` or
  `@` is refused (NoMatchingRule), so a rule cannot pass a whole principal through.
Java's regular expressions and Python's agree on the constructs these rules use (classes,
groups, quantifiers, anchors).
Concurrency: immutable after parsing; pure functions, except `default_realm()`, which asks
libkrb5 once (a file read) and is called at start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
from dataclasses import dataclass

from pybroker.config import ConfigError

_NAME = re.compile(r"([^/@]*)(/([^/@]*))?@([^/@]*)")
_RULE = re.compile(r"((DEFAULT)|((RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?)))")
_PARAMETER = re.compile(r"([^$]*)(\$(\d*))?")
_NON_SIMPLE = re.compile(r"[/@]")
_JAVA_GROUP = re.compile(r"\\(.)|\$(\d+)|\$\{(\w+)\}")


class NoMatchingRule(Exception):
    """No rule maps the name (or a rule produced a name that is not simple)."""


@dataclass(frozen=True)
class KerberosName:
    service_name: str
    host_name: str | None
    realm: str | None

    @classmethod
    def parse(cls, name: str) -> KerberosName:
        m = _NAME.fullmatch(name)
        if m is None:
            if "@" in name:
                raise ValueError(f"Malformed Kerberos name: {name}")
            return cls(name, None, None)
        return cls(m.group(1), m.group(3), m.group(4))

    def __str__(self) -> str:
        text = self.service_name
        if self.host_name is not None:
            text += "/" + self.host_name
        if self.realm is not None:
            text += "@" + self.realm
        return text


def _java_replacement(replacement: str) -> str:
    """Java's Matcher replacement (`$1`, `${name}` groups, `\\x` a literal x) as a Python one."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        m = _JAVA_GROUP.match(replacement, i)
        if m is not None and m.group(1) is None:
            out.append(f"\\g<{m.group(2) or m.group(3)}>")
        else:
            literal = m.group(1) if m is not None else replacement[i]
            out.append(literal.replace("\\", "\\\\"))
        i = m.end() if m is not None else i + 1
    return "".join(out)


@dataclass(frozen=True)
class KerberosRule:
    default_realm: str
    is_default: bool = False
    components: int = 0
    format: str = ""
    match: re.Pattern[str] | None = None
    from_pattern: re.Pattern[str] | None = None
    to_pattern: str = ""
    repeat: bool = False
    lower: bool = False
    upper: bool = False

    def apply(self, params: list[str]) -> str | None:
        result: str | None = None
        if self.is_default:
            if self.default_realm == params[0]:
                result = params[1]
        elif len(params) - 1 == self.components:
            base = _replace_parameters(self.format, params)
            if self.match is None or self.match.fullmatch(base):
                if self.from_pattern is None:
                    result = base
                else:
                    result = self.from_pattern.sub(self.to_pattern, base, count=0 if self.repeat else 1)
        if result is not None and _NON_SIMPLE.search(result):
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule")
        if result is not None and self.lower:
            result = result.lower()
        elif result is not None and self.upper:
            result = result.upper()
        return result


def _replace_parameters(fmt: str, params: list[str]) -> str:
    out: list[str] = []
    start = 0
    while start < len(fmt):
        m = _PARAMETER.match(fmt, start)
        if m is None or m.end() == start:
            break
        out.append(m.group(1))
        if m.group(3) is not None:
            if not m.group(3).isdigit():
                raise NoMatchingRule(f"bad format in username mapping in {m.group(3)}")
            num = int(m.group(3))
            if num >= len(params):
                raise NoMatchingRule(f"index {num} from {fmt} is outside of the valid range 0 to {len(params) - 1}")
            out.append(params[num])
        start = m.end()
    return "".join(out)


class KerberosShortNamer:
    def __init__(self, rules: list[KerberosRule], texts: list[str] | None = None) -> None:
        self.rules = rules
        self.texts = texts if texts is not None else []  # the rules as configured, for messages

    @classmethod
    def from_rules(cls, default_realm: str, rules: list[str]) -> KerberosShortNamer:
        """ConfigError (Kafka's words) for a rule that does not parse."""
        parsed: list[KerberosRule] = []
        texts = [r.strip() for r in rules]
        for rule in texts:
            m = _RULE.match(rule)
            if m is None:
                raise ConfigError(f"Invalid rule: {rule}")
            if m.end() != len(rule):
                raise ConfigError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
            if m.group(2) is not None:
                parsed.append(KerberosRule(default_realm, is_default=True))
                continue
            try:
                parsed.append(KerberosRule(
                    default_realm, components=int(m.group(5)), format=m.group(6),
                    match=re.compile(m.group(8)) if m.group(8) is not None else None,
                    from_pattern=re.compile(m.group(10)) if m.group(10) is not None else None,
                    to_pattern=_java_replacement(m.group(11) or ""), repeat=m.group(12) == "g",
                    lower=m.group(13) == "L", upper=m.group(13) == "U"))
            except (re.error, ValueError) as exc:
                raise ConfigError(f"Invalid rule: {rule} ({exc})") from None
        return cls(parsed, texts)

    def short_name(self, name: KerberosName) -> str:
        if name.host_name is None:
            if name.realm is None:  # already simple
                return name.service_name
            params = [name.realm, name.service_name]
        else:
            params = [name.realm or "", name.service_name, name.host_name]
        for rule in self.rules:
            result = rule.apply(params)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {name}, rules [{', '.join(self.texts)}]")


def default_realm() -> str:
    """libkrb5's default realm (krb5.conf's default_realm, KRB5_CONFIG honoured); "" when there
    is none, as Kafka falls back when the JVM's Kerberos configuration has none."""
    path = ctypes.util.find_library("krb5")
    if path is None:
        return ""
    try:
        lib = ctypes.CDLL(path)
        ctx = ctypes.c_void_p()
        if lib.krb5_init_context(ctypes.byref(ctx)) != 0:
            return ""
        try:
            realm = ctypes.c_char_p()
            if lib.krb5_get_default_realm(ctx, ctypes.byref(realm)) != 0 or realm.value is None:
                return ""
            value = realm.value.decode()
            lib.krb5_free_default_realm(ctx, realm)
            return value
        finally:
            lib.krb5_free_context(ctx)
    except (OSError, AttributeError):
        return ""
