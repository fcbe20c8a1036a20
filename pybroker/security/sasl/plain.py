"""SASL/PLAIN on the server (RFC 4616; Kafka's PlainSaslServer + PlainServerCallbackHandler).

Token: `authzid NUL username NUL password`, UTF-8, exactly three fields. The password is
compared (in constant time) with the JAAS option `user_<username>` of the listener's PLAIN
line; an authzid must be empty or the user name. One token, one empty reply, complete.
Failures carry Kafka's texts, which the client sees (SaslAuthenticationError), except a malformed
token (SaslError: the generic message).
Concurrency: one instance per connection, no I/O.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from pybroker.errors import SaslAuthenticationError, SaslError

MECHANISM = "PLAIN"


class PlainSaslServer:
    mechanism = MECHANISM

    def __init__(self, jaas_options: Mapping[str, str]) -> None:
        self._options = jaas_options
        self.complete = False
        self.authorization_id = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslError("PLAIN authentication already complete")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SASL/PLAIN response: not UTF-8") from None
        fields = text.split("\0")
        if len(fields) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(fields)}")
        authzid, username, password = fields
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._options.get("user_" + username)
        # compare even for an unknown user, so the time taken does not tell whether it exists
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.authorization_id = username
        self.complete = True
        return b""
