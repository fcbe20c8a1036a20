"""`pybroker configs`: kafka-configs.sh's --describe and --alter, on DescribeConfigs /
IncrementalAlterConfigs (topics, brokers, broker-loggers, groups) and DescribeClientQuotas /
AlterClientQuotas (clients, users), as kafka-configs does with --bootstrap-server.

    pybroker configs describe --entity-type topics|brokers|broker-loggers|groups [--entity-name N | --entity-default] [--all]
    pybroker configs describe --entity-type users|clients [--entity-name N | --entity-default] ...
    pybroker configs alter --entity-type T (--entity-name N | --entity-default)
        [--add-config k1=v1,k2=[a,b]] [--add-config-file F] [--delete-config k1,k2]
Shortcuts as in Kafka: --topic N, --broker N, --broker-defaults, --group N, --client N,
--client-defaults, --user N, --user-defaults. users and clients may be given together
(a (user, client-id) quota entity).

Output, Kafka's lines:
    Dynamic configs for topic orders are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}
    Default configs for brokers in the cluster are:
    Quota configs for user-principal 'alice', client-id 'c1' are producer_byte_rate=1024.0
    Completed updating config for topic orders.
`--all` lists every config (source any) instead of the dynamic ones. Quota values print as
Java prints a double (1024.0, 1.0E7). A --delete-config of a key that is not set is
"Invalid config(s): k" (exit 2), as kafka-configs checks before altering.
Users also take SCRAM credentials, as in Kafka: --add-config
'SCRAM-SHA-256=[iterations=8192,password=secret]' (the client salts the password; only the
salted form is sent), --delete-config SCRAM-SHA-256; describe adds "SCRAM credential configs
for user-principal 'alice' are SCRAM-SHA-256=iterations=8192".
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, TextIO

from pybroker.cli.common import EXIT_OK, CliError
from pybroker.client.admin import (
    CONFIG_OP_DELETE,
    CONFIG_OP_SET,
    CONFIG_SOURCES,
    QUOTA_MATCH_ANY,
    QUOTA_MATCH_DEFAULT,
    QUOTA_MATCH_EXACT,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_GROUP,
    RESOURCE_TOPIC,
    SCRAM_MECHANISMS,
    AdminClient,
    ConfigEntry,
)
from pybroker.protocol.errors import Errors, KafkaError

RESOURCE_TYPES = {"topics": RESOURCE_TOPIC, "brokers": RESOURCE_BROKER, "broker-loggers": RESOURCE_BROKER_LOGGER,
                  "groups": RESOURCE_GROUP}
QUOTA_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
ENTITY_TYPES = tuple(RESOURCE_TYPES) + tuple(QUOTA_TYPES)
# Dynamic sources per resource type: what --describe without --all shows.
DYNAMIC_SOURCE = {RESOURCE_TOPIC: 1, RESOURCE_GROUP: 8}
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_QUOTA_KEYS = ("connection_creation_rate",)
QUOTA_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def add_entity_options(p: argparse.ArgumentParser, types: Sequence[str] = ENTITY_TYPES,
                       shortcuts: bool = True) -> None:
    p.add_argument("--entity-type", action="append", default=[], choices=types, metavar="TYPE",
                   help="entity type: " + ", ".join(types) + " (users and clients may be combined)")
    p.add_argument("--entity-name", action="append", default=[], metavar="NAME",
                   help="entity name (topic, broker id, group id, client id, user principal)")
    p.add_argument("--entity-default", action="append_const", const="", dest="entity_name",
                   help="the default entity of the type given just before (clients, users, brokers)")
    if not shortcuts:
        return
    for flag, etype in [("--topic", "topics"), ("--broker", "brokers"), ("--group", "groups"),
                        ("--client", "clients"), ("--user", "users"), ("--broker-logger", "broker-loggers"),
                        ("--ip", "ips")]:
        if etype in types:
            p.add_argument(flag, action=_Shortcut, etype=etype, metavar="NAME", help=f"shortcut for "
                           f"--entity-type {etype} --entity-name NAME")
    for flag, etype in [("--broker-defaults", "brokers"), ("--client-defaults", "clients"),
                        ("--user-defaults", "users"), ("--ip-defaults", "ips")]:
        if etype in types:
            p.add_argument(flag, action=_Shortcut, etype=etype, nargs=0, help=f"shortcut for "
                           f"--entity-type {etype} --entity-default")


class _Shortcut(argparse.Action):
    def __init__(self, *a: object, etype: str, **kw: object) -> None:
        self.etype = etype
        super().__init__(*a, **kw)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: object,
                 option: str | None = None) -> None:
        shortcuts = getattr(ns, "shortcuts", None) or []
        shortcuts.append((self.etype, values if isinstance(values, str) else ""))
        ns.shortcuts = shortcuts


def add_alter_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--add-config", metavar="K=V[,K=V...]",
                   help="configs to set; square brackets group a value with commas: k1=v1,k2=[a,b]")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]", help="configs to remove")


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="{describe,alter}")
    p = actions.add_parser("describe", parents=[common], help="show an entity's configs or quotas")
    add_entity_options(p)
    p.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
    p.set_defaults(handler=run_describe)
    p = actions.add_parser("alter", parents=[common], help="set or delete an entity's configs or quotas")
    add_entity_options(p)
    add_alter_options(p)
    p.set_defaults(handler=run_alter)
    for name, action in actions.choices.items():
        action.prog = f"pybroker configs {name}"


# -- parsing ------------------------------------------------------------------------------


def entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """[(entity type, name or "" for default or None for all)] from the flags, Kafka's rules."""
    shortcuts = getattr(args, "shortcuts", None) or []
    if shortcuts and (args.entity_type or args.entity_name):
        raise CliError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if shortcuts:
        pairs: list[tuple[str, str | None]] = list(shortcuts)
    else:
        types, names = list(args.entity_type), list(args.entity_name)
        if not types:
            raise CliError("At least one entity type must be specified")
        if len(names) > len(types):
            raise CliError("More entity names specified than entity types")
        pairs = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    kinds = [t for t, _ in pairs]
    if len(set(kinds)) != len(kinds):
        raise CliError("Duplicate entity type(s) specified: " + ",".join(sorted({k for k in kinds if kinds.count(k) > 1})))
    if len(kinds) > 1 and set(kinds) != {"users", "clients"}:
        raise CliError("Only 'users' and 'clients' entity types may be specified together")
    for t, n in pairs:
        if n == "" and t not in ("brokers", "clients", "users", "ips"):
            raise CliError(f"--entity-default is not allowed with entity type {t}")
        if t in ("brokers", "broker-loggers") and n and not n.isdigit():
            raise CliError(f"The entity name for {t} must be a valid integer broker id, but it is: {n}")
    return pairs


_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")
_KV = re.compile(r"\s*=\s*(?=[^\]]*(?:\[|$))")


def parse_add_config(text: str | None, file: str | None) -> dict[str, str]:
    """Kafka's parseConfigsToBeAdded: commas outside [] separate pairs; [] are dropped."""
    props: dict[str, str] = {}
    if file:
        try:
            with open(file, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if not line or line[0] in "#!":
                        continue
                    k, _, v = line.partition("=") if "=" in line else line.partition(":")
                    props[k.strip()] = v.strip()
        except OSError as exc:
            raise CliError(f"cannot read --add-config-file '{file}': {exc.strerror or exc}") from None
    if text:
        for pair in _SPLIT.split(text):
            parts = _KV.split(pair)
            if len(parts) != 2:
                raise CliError('Invalid entity config: all configs to be added must be in the format "key=val".')
            props[parts[0].strip()] = re.sub(r"\[?\]?", "", parts[1]).strip()
    for key in props:
        if not re.fullmatch(r"[a-zA-Z0-9._-]*", key):
            raise CliError(f"Invalid character found for config key: {key}")
    return props


def parse_delete_config(items: Sequence[str]) -> list[str]:
    return [k.strip() for item in items for k in item.split(",") if k.strip()]


def java_double(value: float) -> str:
    """Java's Double.toString: 1024.0, 1.0E7, 1.5E-4."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0.0"
    a = abs(value)
    if 1e-3 <= a < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    # Java prints the shortest mantissa that reads back as the same double.
    mantissa, exp = f"{value:.16e}".split("e")
    for precision in range(1, 18):
        candidate = f"{value:.{precision - 1}e}"
        if float(candidate) == value:
            mantissa, exp = candidate.split("e")
            break
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exp)}"


# -- describe -----------------------------------------------------------------------------


def _entry_line(e: ConfigEntry) -> str:
    synonyms = ", ".join(f"{CONFIG_SOURCES.get(s.source, 'UNKNOWN')}:{s.name}={s.value}" for s in e.synonyms)
    return f"  {e.name}={e.value} sensitive={str(e.is_sensitive).lower()} synonyms={{{synonyms}}}\n"


def describe_resource(admin: AdminClient, etype: str, name: str | None, describe_all: bool, out: TextIO) -> None:
    rtype = RESOURCE_TYPES[etype]
    if name is None:
        if etype == "topics":
            names = admin.list_topics()
        elif etype in ("brokers", "broker-loggers"):
            names = [str(n) for n in sorted(admin.metadata([]).brokers)] + ([""] if etype == "brokers" else [])
        else:
            names = [g.group_id for g in admin.list_groups()]
    else:
        names = [name]
    if etype == "topics" and name is not None:
        d = admin.describe_topics([name]).get(name)
        if d is None or d.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{name}' does not exist")
    for n in names:
        entries = admin.describe_configs([(rtype, n)], include_synonyms=True)[(rtype, n)]
        if n == "" and etype == "brokers":
            out.write(f"Default configs for {etype} in the cluster are:\n")
            wanted_source: int | None = 3
        else:
            out.write(f"{'All' if describe_all else 'Dynamic'} configs for {etype[:-1]} {n} are:\n")
            wanted_source = DYNAMIC_SOURCE.get(rtype, 2 if etype == "brokers" else None)
        if describe_all:
            wanted_source = None
        for e in sorted(entries, key=lambda e: e.name):
            if wanted_source is None or e.source == wanted_source:
                out.write(_entry_line(e))


def quota_components(pairs: Sequence[tuple[str, str | None]]) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    for etype, name in pairs:
        kind = QUOTA_TYPES[etype]
        if name is None:
            out.append((kind, QUOTA_MATCH_ANY, None))
        elif name == "":
            out.append((kind, QUOTA_MATCH_DEFAULT, None))
        else:
            out.append((kind, QUOTA_MATCH_EXACT, name))
    return out


def describe_quotas(admin: AdminClient, pairs: Sequence[tuple[str, str | None]], out: TextIO,
                    strict: bool = True) -> None:
    """Kafka's describeQuotaConfigs: ClientQuotaFilter.containsOnly(components)."""
    for q in admin.describe_client_quotas(quota_components(pairs), strict=strict):
        parts = []
        for kind in ("user", "client-id", "ip"):
            if kind in q.entity:
                n = q.entity[kind]
                parts.append(f"{QUOTA_LABEL[kind]} '{n}'" if n is not None else f"the default {QUOTA_LABEL[kind]}")
        values = ", ".join(f"{k}={java_double(v)}" for k, v in q.values.items())
        out.write(f"Quota configs for {', '.join(parts)} are {values}\n")


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pairs = entities(args)
    etype, name = pairs[0]
    if etype in RESOURCE_TYPES:
        if name == "":
            if etype != "brokers":
                raise CliError(f"--entity-default must not be specified with --describe of {etype}")
        describe_resource(admin, etype, name, args.all, out)
    else:
        describe_quotas(admin, pairs, out)
        # Kafka describes SCRAM credentials too, for users alone and not for the default user.
        if {t for t, _ in pairs} == {"users"} and name != "":
            describe_scram(admin, None if name is None else [name], out)
    return EXIT_OK


def describe_scram(admin: AdminClient, users: list[str] | None, out: TextIO) -> None:
    for user, (code, infos) in sorted(admin.describe_user_scram_credentials(users).items()):
        if code == Errors.RESOURCE_NOT_FOUND:
            continue  # no credentials: nothing to show, as Kafka lists only users that have some
        if code:
            out.write(f"Error retrieving SCRAM credential configs for user-principal '{user}': {code.name}\n")
            continue
        text = ", ".join(f"{mech}=iterations={it}" for mech, it in infos)
        out.write(f"SCRAM credential configs for user-principal '{user}' are {text}\n")


# -- alter --------------------------------------------------------------------------------


_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)
DEFAULT_SCRAM_ITERATIONS = 4096
MIN_SCRAM_ITERATIONS = 4096


def alter_scram(admin: AdminClient, user: str, to_add: dict[str, str], to_delete: Sequence[str]) -> None:
    """kafka-configs' alterUserScramCredentialConfigs: SCRAM-SHA-256=[iterations=N,password=P]."""
    ups = []
    for mech, text in to_add.items():
        m = _SCRAM_VALUE.fullmatch(text)
        if m is None:
            raise CliError(f"Invalid credential property {mech}={text}")
        iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") else DEFAULT_SCRAM_ITERATIONS
        if iterations < MIN_SCRAM_ITERATIONS:
            raise CliError(f"Iterations {iterations} is less than the minimum {MIN_SCRAM_ITERATIONS} required for "
                           f"{mech}")
        ups.append((user, mech, iterations, m.group(2)))
    # One request per change: the controller refuses a user named twice in one request
    # (DUPLICATE_RESOURCE), which makes Kafka's own tool fail on two mechanisms at once.
    changes: list[tuple[list[Any], list[Any]]] = [([u], []) for u in ups] + [([], [(user, mech)]) for mech in to_delete]
    for upserts, deletes in changes:
        for _user, (code, message) in admin.alter_user_scram_credentials(upserts, deletes).items():
            if code:
                raise KafkaError(code, "cannot alter SCRAM credentials" + (f": {message}" if message else ""))


def alter_quotas(admin: AdminClient, pairs: Sequence[tuple[str, str | None]], to_add: dict[str, str],
                 to_delete: Sequence[str]) -> None:
    if any(n is None for _, n in pairs):
        raise CliError("An entity name must be specified for every entity type")
    kinds = {t for t, _ in pairs}
    scram_add = {k: v for k, v in to_add.items() if k in SCRAM_MECHANISMS}
    scram_delete = [k for k in to_delete if k in SCRAM_MECHANISMS]
    if kinds == {"users"} and (scram_add or scram_delete):
        if pairs[0][1] == "":
            raise CliError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                           "Credentials using --bootstrap-server.")
        if len(scram_add) != len(to_add) or len(scram_delete) != len(to_delete):
            raise CliError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                           "using --bootstrap-server.")
        alter_scram(admin, str(pairs[0][1]), scram_add, scram_delete)
        return
    allowed = IP_QUOTA_KEYS if kinds == {"ips"} else QUOTA_KEYS
    unknown = [k for k in list(to_add) + list(to_delete) if k not in allowed]
    if unknown:
        label = "'ips'" if kinds == {"ips"} else ("'clients'" if "clients" in kinds else "'users'")
        raise CliError(f"Only quota configs can be added or deleted for {label}. Unexpected config names: "
                       + ",".join(unknown))
    current = admin.describe_client_quotas(quota_components(pairs), strict=True)
    have = current[0].values if current else {}
    invalid = [k for k in to_delete if k not in have]
    if invalid:
        raise CliError(f"Invalid config(s): {','.join(invalid)}")
    ops: dict[str, float | None] = {}
    for k, v in to_add.items():
        try:
            ops[k] = float(v)
        except ValueError:
            raise CliError(f"Cannot parse quota configuration value for {k}: {v}") from None
    for k in to_delete:
        ops[k] = None
    entity = {QUOTA_TYPES[t]: (n or None) for t, n in pairs}
    for _entity, code, message in admin.alter_client_quotas([(entity, ops)]):
        if code:
            raise KafkaError(code, "cannot alter quotas" + (f": {message}" if message else ""))


def alter_resource(admin: AdminClient, etype: str, name: str, to_add: dict[str, str], to_delete: Sequence[str]
                   ) -> None:
    rtype = RESOURCE_TYPES[etype]
    if etype == "topics":
        d = admin.describe_topics([name]).get(name)
        if d is None or d.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{name}' does not exist")
    if to_delete:
        dynamic = 3 if (etype == "brokers" and name == "") else DYNAMIC_SOURCE.get(rtype, 2)
        entries = admin.describe_configs([(rtype, name)], include_synonyms=False)[(rtype, name)]
        have = {e.name for e in entries if etype == "broker-loggers" or e.source == dynamic}
        invalid = [k for k in to_delete if k not in have]
        if invalid:
            raise CliError(f"Invalid config(s): {','.join(invalid)}")
    ops = [(k, CONFIG_OP_SET, v) for k, v in to_add.items()] + [(k, CONFIG_OP_DELETE, None) for k in to_delete]
    result = admin.incremental_alter_configs({(rtype, name): ops})
    for (_t, _n), (code, message) in result.items():
        if code:
            raise KafkaError(code, message or f"cannot alter configs of {etype[:-1]} '{name}'")


def run_alter(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pairs = entities(args)
    if any(n is None for _, n in pairs):
        if any(t in ("users", "clients", "brokers", "ips") for t, _ in pairs):
            raise CliError("An entity-name or default entity must be specified with --alter of users, clients, "
                           "brokers or ips")
        raise CliError(f"An entity name must be specified with --alter of {','.join(t for t, _ in pairs)}")
    if args.add_config and args.add_config_file:
        raise CliError("Only one of --add-config or --add-config-file must be specified")
    to_add = parse_add_config(args.add_config, args.add_config_file)
    to_delete = parse_delete_config(args.delete_config)
    if not to_add and not to_delete:
        raise CliError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                       "with --alter")
    etype, name = pairs[0]
    assert name is not None
    if etype in RESOURCE_TYPES:
        alter_resource(admin, etype, name, to_add, to_delete)
    else:
        alter_quotas(admin, pairs, to_add, to_delete)
    if name:
        out.write(f"Completed updating config for {etype[:-1]} {name}.\n")
    else:
        out.write(f"Completed updating default config for {etype} in the cluster.\n")
    return EXIT_OK
