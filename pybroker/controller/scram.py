"""SCRAM credentials in the metadata log (KIP-554; Kafka's ScramControlManager + ScramFormatter).

An AlterUserScramCredentials upsertion carries (user, mechanism, iterations, salt,
salted_password). The controller derives, as RFC 5802 and Kafka's ScramFormatter do,

    client_key = HMAC(salted_password, "Client Key")
    stored_key = H(client_key)
    server_key = HMAC(salted_password, "Server Key")

with H/HMAC over SHA-256 (mechanism 1, SCRAM-SHA-256) or SHA-512 (mechanism 2), and
writes a UserScramCredentialRecord(name, mechanism, salt, stored_key, server_key,
iterations): the salted password itself is never stored. A deletion writes a
RemoveUserScramCredentialRecord(name, mechanism). Replay keeps them in
`MetadataImage.scram_credentials`, so they survive a restart like any other metadata.

SASL/SCRAM logins on SASL listeners check against them (security/sasl/scram.py); they are
stored and described as well when no listener speaks SASL, as a Kafka KRaft node does.

Concurrency: `alter_credentials` is a pure function of the image; the controller calls it
under its lock and commits the records it returns as one atomic batch.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pybroker.metadata.image import ScramCredential
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

# org.apache.kafka.clients.admin.ScramMechanism type ids -> hashlib names
SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2
MECHANISM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# internals.ScramMechanism.minIterations (both mechanisms) and ScramControlManager.MAX_ITERATIONS
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# MetadataVersion.IBP_3_5_IV2: the first metadata.version whose records include SCRAM
SCRAM_MIN_METADATA_VERSION = 11

DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"
NOT_SUPPORTED = "The current metadata.version does not support SCRAM"


@dataclass(frozen=True, slots=True)
class Deletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(slots=True)
class AlterResult:
    user: str
    error_code: int = 0
    error_message: str | None = None


def stored_and_server_key(mechanism: int, salted_password: bytes) -> tuple[bytes, bytes]:
    """ScramFormatter.storedKey(clientKey(p)) and serverKey(p). Raises ValueError for an empty
    salted password, which Java's SecretKeySpec rejects as an HMAC key."""
    if not salted_password:
        raise ValueError("Empty key")
    digest = MECHANISM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return stored_key, server_key


def _validate_user_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_HASHES:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _validate_upsertion(u: Upsertion) -> tuple[int, str] | None:
    err = _validate_user_and_mechanism(u.name, u.mechanism)
    if err:
        return err
    if u.iterations < MIN_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def alter_credentials(credentials: dict[str, dict[int, ScramCredential]], metadata_version: int,
                      deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]
                      ) -> tuple[list[Any], list[AlterResult]]:
    """ScramControlManager.alterCredentials: (records to commit, one result per user).

    A user may be named once per request: a second deletion or upsertion of the same user
    (whatever the mechanism) turns the user's entry into DUPLICATE_RESOURCE and nothing is
    written for them; a user already failed is not looked at again. Results list the
    successful deletions, then the successful upsertions, then the failures (Kafka builds
    them in that order from hash maps; within a group we keep request order).
    """
    supported = metadata_version >= SCRAM_MIN_METADATA_VERSION
    to_delete: dict[str, Deletion] = {}
    to_upsert: dict[str, Upsertion] = {}
    failed: dict[str, tuple[int, str | None]] = {}

    for d in deletions:
        if d.name in failed:
            continue
        if to_delete.pop(d.name, None) is not None:
            failed[d.name] = (Errors.DUPLICATE_RESOURCE, DUPLICATE_ALTER)
        elif not supported:
            failed[d.name] = (Errors.UNSUPPORTED_VERSION, NOT_SUPPORTED)
        else:
            err = _validate_user_and_mechanism(d.name, d.mechanism)
            if err is None and d.mechanism not in credentials.get(d.name, {}):
                err = (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
            if err:
                failed[d.name] = err
            else:
                to_delete[d.name] = d
    for u in upsertions:
        if u.name in failed:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            failed[u.name] = (Errors.DUPLICATE_RESOURCE, DUPLICATE_ALTER)
        elif not supported:
            failed[u.name] = (Errors.UNSUPPORTED_VERSION, NOT_SUPPORTED)
        else:
            err = _validate_upsertion(u)
            if err:
                failed[u.name] = err
            else:
                to_upsert[u.name] = u

    records: list[Any] = []
    results: list[AlterResult] = []
    for d in to_delete.values():
        results.append(AlterResult(d.name))
        records.append(m.RemoveUserScramCredentialRecord(name=d.name, mechanism=d.mechanism))
    for u in to_upsert.values():
        try:
            stored_key, server_key = stored_and_server_key(u.mechanism, u.salted_password)
        except ValueError:
            # Kafka: ApiError.fromThrowable(IllegalArgumentException) -> UNKNOWN_SERVER_ERROR, no message
            failed[u.name] = (Errors.UNKNOWN_SERVER_ERROR, None)
            continue
        results.append(AlterResult(u.name))
        records.append(m.UserScramCredentialRecord(name=u.name, mechanism=u.mechanism, salt=bytes(u.salt),
                                                   stored_key=stored_key, server_key=server_key,
                                                   iterations=u.iterations))
    results.extend(AlterResult(name, code, msg) for name, (code, msg) in failed.items())
    return records, results
