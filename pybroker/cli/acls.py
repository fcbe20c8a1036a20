"""`pybroker acls`: kafka-acls.sh's --add / --remove / --list, on CreateAcls / DeleteAcls /
DescribeAcls. Needs a node with an authorizer (`authorizer.class.name`); without one the
broker answers SECURITY_DISABLED and the tool exits 1.

    pybroker acls --add --allow-principal User:alice [--allow-host H] --operation Read
        (--topic T | --group G | --cluster | --transactional-id X | --delegation-token D
         | --user-principal U) [--resource-pattern-type literal|prefixed]
    pybroker acls --add --producer|--consumer ... (Kafka's role shortcuts, --idempotent)
    pybroker acls --remove [...same filters...] [--force]
    pybroker acls --list [--topic T ...] [--principal User:alice] [--resource-pattern-type any|match|...]

Output is Kafka's (ResourcePattern and AccessControlEntry toString forms):
    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
     <TAB>(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
    Current ACLs for resource `ResourcePattern(...)`:
     <TAB>(principal=..., ...)
--remove asks "Are you sure ... (y/n)" on stdin unless --force. --operation defaults to All;
--allow-host / --deny-host default to * when a principal is given. An operation the
resource type does not support is a usage error (exit 2), as in Kafka.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from pybroker.cli.common import EXIT_OK, CliError, add_common
from pybroker.client.acls import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    ResourcePattern,
    operation_from_name,
    supported_operations,
)
from pybroker.client.admin import AdminClient
from pybroker.protocol.errors import KafkaError

NL = "\n"


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker acls"
    add_common(parser, common)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--add", action="store_true", help="add ACLs")
    what.add_argument("--remove", action="store_true", help="remove ACLs")
    what.add_argument("--list", action="store_true", help="list ACLs (of the given resources, else all)")
    parser.add_argument("--topic", action="append", default=[], metavar="T", help="topic resource (repeatable)")
    parser.add_argument("--group", action="append", default=[], metavar="G", help="group resource (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                        help="transactional id resource (repeatable)")
    parser.add_argument("--delegation-token", action="append", default=[], metavar="ID",
                        help="delegation token resource (repeatable)")
    parser.add_argument("--user-principal", action="append", default=[], metavar="USER",
                        help="user resource, for CreateTokens / DescribeTokens (repeatable)")
    parser.add_argument("--resource-pattern-type", default="literal", metavar="TYPE",
                        help="literal (default) or prefixed; for --list / --remove also any or match")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="operation, e.g. Read, Write, Create, Describe, All (repeatable; default All)")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal to allow, e.g. User:alice or User:* (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal to deny (repeatable)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="host the allowed principals may connect from (default *)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="host the denied principals are refused from (default *)")
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="with --list: only ACLs of this principal (repeatable)")
    parser.add_argument("--producer", action="store_true",
                        help="producer role: WRITE, DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional ids")
    parser.add_argument("--consumer", action="store_true",
                        help="consumer role: READ, DESCRIBE on topics; READ on groups")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    parser.add_argument("--force", action="store_true", help="do not ask before removing")
    parser.set_defaults(handler=run)


def _pattern_type(text: str) -> PatternType:
    try:
        pt = PatternType[text.strip().upper()]
    except KeyError:
        pt = PatternType.UNKNOWN
    if pt == PatternType.UNKNOWN:
        raise CliError(f"bad --resource-pattern-type '{text}' (expected literal, prefixed, any or match)")
    return pt


def _principal(text: str) -> str:
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise CliError(f"bad principal '{text}' (expected principalType:name, e.g. User:alice)")
    return f"{kind}:{name}"


def resource_filters(args: argparse.Namespace, pattern_type: PatternType, required: bool) -> list[ResourcePattern]:
    """Kafka's getResourceFilter: one pattern (filter) per resource option."""
    out: list[ResourcePattern] = []
    out += [ResourcePattern(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic]
    if pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [ResourcePattern(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    out += [ResourcePattern(ResourceType.DELEGATION_TOKEN, t.strip(), pattern_type) for t in args.delegation_token]
    out += [ResourcePattern(ResourceType.USER, u.strip(), pattern_type) for u in args.user_principal]
    if not out and required:
        raise CliError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                       "or --delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(out))


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[AccessControlEntry]:
    allow = [_principal(p) for p in args.allow_principal]
    deny = [_principal(p) for p in args.deny_principal]
    allow_hosts = [h.strip() for h in args.allow_host] or ([WILDCARD_HOST] if allow else [])
    deny_hosts = [h.strip() for h in args.deny_host] or ([WILDCARD_HOST] if deny else [])
    out = [AccessControlEntry(p, h, op, AclPermissionType.ALLOW) for p in allow for op in operations for h in allow_hosts]
    out += [AccessControlEntry(p, h, op, AclPermissionType.DENY) for p in deny for op in operations for h in deny_hosts]
    return sorted(set(out))


def resource_to_acls(args: argparse.Namespace, pattern_type: PatternType) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """Kafka's getResourceFilterToAcls, with the --producer / --consumer role expansions."""
    filters = resource_filters(args, pattern_type, required=True)
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    if not args.producer and not args.consumer:
        try:
            ops = [operation_from_name(o) for o in (args.operation or ["All"])]
        except ValueError as exc:
            raise CliError(str(exc)) from None
        entries = _entries(args, ops)
        out = {f: entries for f in filters}
    if args.producer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                out[f] = _entries(args, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                out[f] = _entries(args, [AclOperation.WRITE, AclOperation.DESCRIBE])
        if args.idempotent:
            out[ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = \
                _entries(args, [AclOperation.IDEMPOTENT_WRITE])
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                out[f] = sorted(set(out.get(f, [])) | set(_entries(args, [AclOperation.READ, AclOperation.DESCRIBE])))
            elif f.resource_type == ResourceType.GROUP:
                out[f] = sorted(set(out.get(f, [])) | set(_entries(args, [AclOperation.READ])))
    for f, entries in out.items():
        valid = supported_operations(f.resource_type)
        if any(e.operation not in valid for e in entries):
            raise CliError(f"ResourceType {f.resource_type.name} only supports operations "
                           + ", ".join(_op_name(o) for o in valid))
    return out


def _op_name(op: AclOperation) -> str:
    """Kafka's SecurityUtils.operationName: READ -> Read, DESCRIBE_CONFIGS -> DescribeConfigs."""
    return "".join(w.capitalize() for w in op.name.split("_"))


def _acl_block(entries: list[AccessControlEntry]) -> str:
    return NL + " " + NL.join("\t" + str(e) for e in entries) + " " + NL


def _filter_text(p: ResourcePattern) -> str:
    return (f"ResourcePatternFilter(resourceType={p.resource_type.name}, name={p.name}, "
            f"patternType={p.pattern_type.name})")


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pattern_type = _pattern_type(args.resource_pattern_type)
    if (args.producer or args.consumer) and not args.add and not args.remove:
        raise CliError("--producer and --consumer can only be used with --add or --remove")
    if args.list:
        return run_list(admin, args, pattern_type, out)
    if args.add:
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise CliError(f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when adding acls.")
        to_add = resource_to_acls(args, pattern_type)
        if any(not entries for entries in to_add.values()):
            raise CliError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        for pattern, entries in to_add.items():
            out.write(f"Adding ACLs for resource `{pattern}`: {_acl_block(entries)}\n")
            results = admin.create_acls([AclBinding(pattern, e) for e in entries])
            for code, message in results:
                if code:
                    raise KafkaError(code, "cannot create ACLs" + (f": {message}" if message else ""))
        return EXIT_OK
    to_remove = resource_to_acls(args, pattern_type)
    stdin: TextIO = args.stdin
    for pattern, entries in to_remove.items():
        if not args.force:
            question = (f"Are you sure you want to delete all ACLs for resource filter `{_filter_text(pattern)}`? (y/n)"
                        if not entries else f"Are you sure you want to remove ACLs: {_acl_block(entries)} from "
                        f"resource filter `{_filter_text(pattern)}`? (y/n)")
            out.write(question + "\n")
            out.flush()
            if stdin.readline().strip().lower() != "y":
                continue
        base = dict(resource_type=pattern.resource_type, name=pattern.name, pattern_type=pattern.pattern_type)
        filters = ([AclBindingFilter(**base)] if not entries else  # type: ignore[arg-type]
                   [AclBindingFilter(**base, principal=e.principal, host=e.host,  # type: ignore[arg-type]
                                     operation=e.operation, permission_type=e.permission_type) for e in entries])
        for code, message, _deleted in admin.delete_acls(filters):
            if code:
                raise KafkaError(code, "cannot delete ACLs" + (f": {message}" if message else ""))
    return EXIT_OK


def run_list(admin: AdminClient, args: argparse.Namespace, pattern_type: PatternType, out: TextIO) -> int:
    filters = resource_filters(args, pattern_type, required=False)
    principals = [_principal(p) for p in args.principal]
    bindings: list[AclBinding] = []
    if not filters:
        bindings = admin.describe_acls(AclBindingFilter())
    else:
        for f in filters:
            bindings += admin.describe_acls(AclBindingFilter(f.resource_type, f.name, f.pattern_type))
    by_resource: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in sorted(set(bindings)):
        by_resource.setdefault(b.pattern, []).append(b.entry)

    def show(groups: dict[ResourcePattern, list[AccessControlEntry]]) -> None:
        for pattern, entries in groups.items():
            out.write(f"Current ACLs for resource `{pattern}`: {_acl_block(entries)}\n")

    if not principals:
        show(by_resource)
    for principal in principals:
        out.write(f"ACLs for principal `{principal}`\n")
        show({p: [e for e in es if e.principal == principal] for p, es in by_resource.items()
              if any(e.principal == principal for e in es)})
    return EXIT_OK
