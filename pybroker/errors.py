"""Kafka error codes and the one exception that carries one (Kafka's Errors + ApiException).

`Errors`: every code a Kafka 4.x broker can put in a response, with Kafka's name and its
retriable flag (true where Kafka's exception class is a RetriableException, including the
InvalidMetadataException family that tells clients to refresh metadata and retry). Codes are
int16 on the wire; clients map unknown codes to UNKNOWN_SERVER_ERROR.

`KafkaError(code, message)`: a failure with a Kafka error code, raised from any layer. Families
subclass it with a `default_code` (the storage engine's LogError, the codec twins' RecordError,
the wire codec's ProtocolError); the dispatcher answers a handler's KafkaError with the API's
whole-request error response, coordinators raise it for NOT_COORDINATOR and request errors.
This module is in the bottom layer so that every layer, compiled twins included, can use it.
Pure values, no state.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class Errors(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        return self in RETRIABLE

    @classmethod
    def for_code(cls, code: int) -> Errors:
        """The error for a wire code; unknown codes map to UNKNOWN_SERVER_ERROR as in Kafka."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


RETRIABLE: frozenset[Errors] = frozenset(
    {
        Errors.CORRUPT_MESSAGE,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.LEADER_NOT_AVAILABLE,
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.REQUEST_TIMED_OUT,
        Errors.REPLICA_NOT_AVAILABLE,
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.NOT_CONTROLLER,
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.KAFKA_STORAGE_ERROR,
        Errors.FETCH_SESSION_ID_NOT_FOUND,
        Errors.INVALID_FETCH_SESSION_EPOCH,
        Errors.LISTENER_NOT_FOUND,
        Errors.FENCED_LEADER_EPOCH,
        Errors.UNKNOWN_LEADER_EPOCH,
        Errors.OFFSET_NOT_AVAILABLE,
        Errors.PREFERRED_LEADER_NOT_AVAILABLE,
        Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        Errors.ELECTION_NOT_NEEDED,
        Errors.UNSTABLE_OFFSET_COMMIT,
        Errors.THROTTLING_QUOTA_EXCEEDED,
        Errors.UNKNOWN_TOPIC_ID,
        Errors.INCONSISTENT_TOPIC_ID,
        Errors.FETCH_SESSION_TOPIC_ID_ERROR,
        Errors.SHARE_SESSION_NOT_FOUND,
        Errors.INVALID_SHARE_SESSION_EPOCH,
    }
)


class KafkaError(Exception):
    """A failure with a Kafka error code, e.g. `KafkaError(Errors.NOT_COORDINATOR)`.

    `code` None takes the class's `default_code` (subclasses set it)."""

    default_code: ClassVar[Errors] = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, code: Errors | int | None = None, message: str | None = None) -> None:
        self.code = Errors.for_code(int(self.default_code if code is None else code))
        self.message = message
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)

    @property
    def error_code(self) -> int:
        """The wire code (what a response's error_code field takes)."""
        return int(self.code)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class SaslError(Exception):
    """A SASL exchange failed (Kafka's javax SaslException): the client is told only that its
    credentials were refused, SASL_AUTHENTICATION_FAILED with a generic message (no hint whether
    the user exists); the exception's own text is for the broker's log."""


class SaslAuthenticationError(SaslError):
    """A SASL failure whose message is sent to the client as it is (Kafka's
    SaslAuthenticationException: "Authentication failed: Invalid username or password")."""
