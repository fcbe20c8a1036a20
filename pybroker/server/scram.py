"""DescribeUserScramCredentials (api 50) and AlterUserScramCredentials (api 51), KIP-554.

A Kafka 4 KRaft node answers both even when no listener speaks SASL: credentials are
metadata (UserScramCredentialRecord / RemoveUserScramCredentialRecord in
__cluster_metadata, see pybroker/controller/scram.py), so they are kept, described and
replayed after a restart; SASL/SCRAM logins read them from the image
(security/sasl/scram.py). Only the stored key and server key are kept, never the salted
password.

Alter goes through the controller (Kafka forwards it to ScramControlManager): rules and
messages are Kafka's - UNSUPPORTED_SASL_MECHANISM for a mechanism other than
SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2), UNACCEPTABLE_CREDENTIAL for an empty user name or
iterations outside [4096, 16384], DUPLICATE_RESOURCE for a user named twice in one request,
RESOURCE_NOT_FOUND for deleting a credential that does not exist.

Describe reads the image (Kafka's ScramImage.describe): null or empty `users` lists every
user with credentials; a named user without credentials is RESOURCE_NOT_FOUND, a user
named twice DUPLICATE_RESOURCE. With an authorizer: Describe needs DESCRIBE on the cluster (KafkaApis;
otherwise the error on the response and on one result per named user, user unset), Alter ALTER
(ControllerApis; otherwise every named user's result, sorted).

Concurrency: handlers run on the trio thread; Describe reads the image between awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.controller import scram
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import (
    CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
    cluster_authorized,
    require_cluster,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_USER_THAT_DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist: "

_Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = DescribeUserScramCredentialsResponse.CredentialInfo


def handle_describe_user_scram_credentials(broker: Broker, ctx: RequestContext, req: DescribeUserScramCredentialsRequest
                                           ) -> DescribeUserScramCredentialsResponse:
    if not cluster_authorized(broker, ctx, Op.DESCRIBE):  # KafkaApis: the request's getErrorResponse
        code, message = Errors.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED_MESSAGE
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                                    results=[_Result(error_code=code, error_message=message,
                                                                     credential_infos=[]) for _ in req.users or []])
    credentials = broker.image.scram_credentials
    # user -> named more than once; request order for named users, sorted for "all users"
    users: dict[str, bool] = {}
    if not req.users:
        users = dict.fromkeys(sorted(credentials), False)
    else:
        for u in req.users:
            users[u.name] = u.name in users
    results = []
    for name, duplicate in users.items():
        if duplicate:
            results.append(_Result(user=name, error_code=Errors.DUPLICATE_RESOURCE,
                                   error_message=DESCRIBE_DUPLICATE_USER + name, credential_infos=[]))
            continue
        mechanisms = credentials.get(name)
        if not mechanisms:
            results.append(_Result(user=name, error_code=Errors.RESOURCE_NOT_FOUND,
                                   error_message=DESCRIBE_USER_THAT_DOES_NOT_EXIST + name, credential_infos=[]))
            continue
        results.append(_Result(user=name, error_code=0, error_message=None, credential_infos=[
            _Info(mechanism=mech, iterations=cred.iterations) for mech, cred in sorted(mechanisms.items())]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                results=results)


async def handle_alter_user_scram_credentials(broker: Broker, ctx: RequestContext, req: AlterUserScramCredentialsRequest
                                              ) -> AlterUserScramCredentialsResponse:
    require_cluster(broker, ctx, Op.ALTER)
    deletions = [scram.Deletion(d.name, d.mechanism) for d in req.deletions]
    upsertions = [scram.Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                  for u in req.upsertions]
    results = await broker.controller.alter_user_scram_credentials(deletions, upsertions)
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
            user=r.user, error_code=r.error_code, error_message=r.error_message) for r in results])
