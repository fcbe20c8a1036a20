"""The wire codec's exceptions, and the error codes re-exported from pybroker.errors.

`Errors`, `KafkaError` and `RETRIABLE` live in pybroker/errors.py (the bottom layer, so the
storage engine and the compiled twins raise KafkaErrors too); they are importable from here,
the protocol's error module, as everywhere in the code base. The codec's own:
- `ProtocolError`: the bytes of a request could not be parsed (truncated body, negative
  or absurd lengths, bad varints). Kafka answers these by closing the connection.
- `UnknownApiKeyError(ProtocolError)`: the header names an API key we do not know.
- `UnsupportedVersionError(ProtocolError)`: the API exists but not at that version, or a
  message holds a non-default value for a field absent at the version being encoded.
The three protocol exceptions carry the header fields that were parsed
(`correlation_id`, `api_key`, `api_version`, `client_id`, each None when unknown) so the
server can still answer, e.g. an ApiVersions request at a version it does not support.
Catch the subclasses before `ProtocolError`.
"""

from __future__ import annotations

from pybroker.errors import RETRIABLE, Errors, KafkaError

__all__ = ["RETRIABLE", "Errors", "KafkaError", "ProtocolError", "UnknownApiKeyError", "UnsupportedVersionError"]


class ProtocolError(KafkaError):
    """Undecodable request or response bytes (Kafka: InvalidRequestException, close the socket)."""

    default_code = Errors.INVALID_REQUEST

    def __init__(
        self,
        message: str,
        *,
        correlation_id: int | None = None,
        api_key: int | None = None,
        api_version: int | None = None,
        client_id: str | None = None,
    ) -> None:
        super().__init__(self.default_code, message)
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id


class UnknownApiKeyError(ProtocolError):
    """The request header names an API key this codec does not know."""


class UnsupportedVersionError(ProtocolError):
    """An API version outside the supported range, or a field that version cannot carry."""

    default_code = Errors.UNSUPPORTED_VERSION
