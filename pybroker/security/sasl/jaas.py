"""The JAAS line of `sasl.jaas.config` (Kafka's JaasConfig): one login module and its options.

Format: `<module class> <flag> [<key>=<value>]... ;` with flag one of required, requisite,
sufficient, optional (any case); a value is a bare word or a double-quoted string in which a
backslash escapes the next character (Java's StreamTokenizer, as Kafka reads it). A broker's
line names exactly one module. The options are what the mechanisms read: PLAIN's `user_<name>`
passwords, OAUTHBEARER's `unsecuredValidator*` settings, a client's `username` / `password`.
Concurrency: pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pybroker.config import ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, quoted) pairs; `=` and `;` are tokens of their own."""
    out: list[tuple[str, bool]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, False))
            i += 1
        elif c == '"':
            i += 1
            chars: list[str] = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(text[i])
                i += 1
            if i >= n:
                raise ConfigError("Invalid JAAS config: unterminated quoted value")
            out.append(("".join(chars), True))
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '=;"':
                j += 1
            out.append((text[i:j], False))
            i = j
    return out


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login module of a JAAS line; ConfigError (Kafka's wording) when it is malformed."""
    toks = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(toks):
        if i + 1 >= len(toks):
            raise ConfigError("Invalid JAAS config: login module control flag not specified")
        module, flag = toks[i][0], toks[i + 1][0]
        if flag.lower() not in FLAGS:
            raise ConfigError(f"Invalid JAAS config: Invalid login module control flag '{flag}'")
        i += 2
        options: dict[str, str] = {}
        while i < len(toks) and toks[i] != (";", False):
            if i + 2 >= len(toks) or toks[i + 1] != ("=", False) or toks[i + 2] == (";", False):
                raise ConfigError(f"Invalid JAAS config: malformed option near '{toks[i][0]}'")
            options[toks[i][0]] = toks[i + 2][0]
            i += 3
        if i >= len(toks):
            raise ConfigError("Invalid JAAS config: login module not terminated by ';'")
        i += 1
        entries.append(JaasEntry(module, flag.lower(), options))
    return entries


def parse_one(text: str) -> JaasEntry:
    """The single login module of a `sasl.jaas.config` value (Kafka requires exactly one)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise ConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]
