"""The request logger (Kafka's kafka.request.logger): `pybroker.request` at DEBUG logs every
request and its response; at the default level it logs nothing."""

from __future__ import annotations

import logging

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ApiVersionsRequest, MetadataRequest


def test_request_logger_logs_requests_and_responses_at_debug(wire, caplog):
    with caplog.at_level(logging.DEBUG, logger="pybroker.request"):
        wire.request(ApiKey.METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    lines = [r.getMessage() for r in caplog.records if r.name == "pybroker.request"]
    assert any(line.startswith("request METADATA v12 corr=") and "client=wire-test" in line for line in lines)
    assert any(line.startswith("response METADATA corr=") and "MetadataResponse(" in line for line in lines)


def test_request_logger_is_quiet_by_default(wire, caplog):
    with caplog.at_level(logging.INFO):
        wire.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"))
    assert not [r for r in caplog.records if r.name == "pybroker.request"]
