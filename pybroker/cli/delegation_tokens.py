"""`pybroker delegation-tokens`: kafka-delegation-tokens.sh's --create / --renew / --expire /
--describe, on Create / Renew / Expire / DescribeDelegationToken (KIP-48, KIP-373).

    pybroker delegation-tokens --create [--max-life-time-period MS] [--renewer-principal User:bob ...]
        [--owner-principal User:alice]
    pybroker delegation-tokens --renew --hmac B64 [--renew-time-period MS]
    pybroker delegation-tokens --expire --hmac B64 [--expiry-time-period MS]
    pybroker delegation-tokens --describe [--owner-principal User:alice ...]

The broker refuses every one of them on PLAINTEXT, on TLS without a client certificate and to a
session that logged in with a token, so `--command-config` names a SASL or mutual-TLS login, as
Kafka's tool requires it. Output is Kafka's: the "Calling ... operation" line, then the token
table (TOKENID, HMAC in base64, OWNER, REQUESTER, RENEWERS, ISSUEDATE, EXPIRYDATE, MAXDATE as
yyyy-MM-ddTHH:mm local time) or the new expiry date. -1 periods use the broker's defaults
(delegation.token.max.lifetime.ms, delegation.token.expiry.time.ms); an expiry period of -1
expires the token at once.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import time
from typing import TextIO

from pybroker.cli.common import EXIT_OK, CliError, add_common
from pybroker.client.admin import AdminClient, DelegationToken


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker delegation-tokens"
    add_common(parser, common)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--create", action="store_true", help="create a token")
    what.add_argument("--renew", action="store_true", help="renew a token")
    what.add_argument("--expire", action="store_true", help="expire a token")
    what.add_argument("--describe", action="store_true", help="describe tokens")
    parser.add_argument("--max-life-time-period", type=int, default=-1, metavar="MS",
                        help="with --create: the token's maximum life (-1: the broker's delegation.token.max.lifetime.ms)")
    parser.add_argument("--renewer-principal", action="append", default=[], metavar="User:NAME",
                        help="with --create: a principal that may renew the token (repeatable)")
    parser.add_argument("--owner-principal", action="append", default=[], metavar="User:NAME",
                        help="with --create: the token's owner (needs CREATE_TOKENS on it); with --describe: "
                             "tokens of this owner (repeatable)")
    parser.add_argument("--hmac", metavar="B64", help="with --renew / --expire: the token's HMAC (base64)")
    parser.add_argument("--renew-time-period", type=int, default=-1, metavar="MS",
                        help="with --renew: the renewal period (-1: the broker's delegation.token.expiry.time.ms)")
    parser.add_argument("--expiry-time-period", type=int, default=-1, metavar="MS",
                        help="with --expire: the new expiry period (-1: expire now)")
    parser.set_defaults(handler=run)


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.localtime(ms / 1000))


def _hmac(args: argparse.Namespace) -> bytes:
    if not args.hmac:
        raise CliError("--hmac is required with --renew and --expire")
    try:
        return base64.b64decode(args.hmac, validate=True)
    except binascii.Error:
        raise CliError(f"--hmac {args.hmac!r} is not base64") from None


def print_tokens(tokens: list[DelegationToken], out: TextIO) -> None:
    row = "%-15s %-30s %-15s %-15s %-25s %-15s %-15s %-15s\n"
    out.write("\n" + row % ("TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE",
                            "MAXDATE"))
    for t in tokens:
        out.write("\n" + row % (t.token_id, base64.b64encode(t.hmac).decode(), t.owner, t.requester,
                                "[" + ", ".join(t.renewers) + "]", _date(t.issue_timestamp),
                                _date(t.expiry_timestamp), _date(t.max_timestamp)))


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.create:
        if len(args.owner_principal) > 1:
            raise CliError("--create takes at most one --owner-principal")
        out.write(f"Calling create token operation with renewers :[{', '.join(args.renewer_principal)}] , "
                  f"max-life-time-period :{args.max_life_time_period}\n")
        token = admin.create_delegation_token(args.renewer_principal, args.max_life_time_period,
                                              args.owner_principal[0] if args.owner_principal else None)
        out.write(f"Created delegation token with tokenId : {token.token_id}\n")
        print_tokens([token], out)
    elif args.renew:
        hmac = _hmac(args)
        out.write(f"Calling renew token operation with hmac :{args.hmac} , "
                  f"renew-time-period :{args.renew_time_period}\n")
        expiry = admin.renew_delegation_token(hmac, args.renew_time_period)
        out.write(f"Completed renew operation. New expiry date : {_date(expiry)}\n")
    elif args.expire:
        hmac = _hmac(args)
        out.write(f"Calling expire token operation with hmac :{args.hmac} , "
                  f"expire-time-period :{args.expiry_time_period}\n")
        expiry = admin.expire_delegation_token(hmac, args.expiry_time_period)
        out.write(f"Completed expire operation. New expiry date : {_date(expiry)}\n")
    else:
        owners = args.owner_principal or None
        out.write(f"Calling describe token operation for owners :[{', '.join(args.owner_principal)}]\n")
        tokens = admin.describe_delegation_tokens(owners)
        out.write(f"Total number of tokens : {len(tokens)}\n")
        print_tokens(tokens, out)
    return EXIT_OK
