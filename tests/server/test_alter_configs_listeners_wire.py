"""AlterConfigs and IncrementalAlterConfigs with hostile input on both listeners of one node.

A node with a broker and a controller listener answers each resource per the checks of the
listener it came in on (server/alter_configs.py): a broker's (Kafka's ConfigAdminManager.preprocess)
or the controller's (Kafka's ControllerApis). Unknown resource types (0, -1, ...), the types this
node does not alter (BROKER_LOGGER 8, CLIENT_METRICS 16), resources named twice, unknown
IncrementalAlterConfigs operations and bad BROKER names get Kafka's error codes and messages,
per resource, and the connection stays open: the next request on it is answered. The valid
resources of the same request are still applied, and real clients' config admin calls keep
working on that node.
"""

from __future__ import annotations

import uuid

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    ApiVersionsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_dynamic_configs_wire import create
from .wire import WireClient

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SET = 0
LEGACY, INCREMENTAL = ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS
UNSUPPORTED = "Resource type {} is not supported by this broker"


@pytest.fixture(scope="module")
def node():
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                 "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
    with EmbeddedBroker(overrides=overrides) as b:
        assert b.controller_port > 0
        yield b


@pytest.fixture(params=["broker", "controller"])
def listener(request, node):
    port = node.port if request.param == "broker" else node.controller_port
    w = WireClient("127.0.0.1", port, timeout_s=15)
    yield request.param, w
    w.close()


def alter(w, api, resources, version=1, validate_only=False):
    """resources: [(type, name, [(key, op, value)])], op ignored by AlterConfigs -> [(error, message)]."""
    if api == LEGACY:
        req: object = AlterConfigsRequest(validate_only=validate_only, resources=[
            AlterConfigsRequest.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
                AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, _op, v in ops])
            for t, n, ops in resources])
    else:
        req = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
                IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v)
                for k, op, v in ops])
            for t, n, ops in resources])
    resp = w.request(api, version, req)
    assert [(r.resource_type, r.resource_name) for r in resp.responses] == [(t, n) for t, n, _ in resources]
    return [(r.error_code, r.error_message) for r in resp.responses]


def still_open(w):
    assert w.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="wire-test", client_software_version="1")).error_code == 0


def expected(where, api, rtype):
    if where == "broker":  # ConfigAdminManager.preprocess
        if rtype in (0, -1, 1) or (rtype == BROKER_LOGGER and api == LEGACY):
            return Errors.INVALID_REQUEST, f"Unknown resource type {rtype}"
        return Errors.INVALID_REQUEST, UNSUPPORTED.format({8: "BROKER_LOGGER", 16: "CLIENT_METRICS"}[rtype])
    if rtype in (0, -1, 1):  # ControllerApis: ConfigResource.Type.UNKNOWN
        return Errors.UNSUPPORTED_VERSION, f"Unknown resource type {rtype}."
    if rtype == BROKER_LOGGER and api == LEGACY:  # ControllerApis.authorizeAlterResource
        return Errors.INVALID_REQUEST, "Unexpected resource type BROKER_LOGGER."
    return Errors.INVALID_REQUEST, UNSUPPORTED.format({8: "BROKER_LOGGER", 16: "CLIENT_METRICS"}[rtype])


@pytest.mark.parametrize("api", [LEGACY, INCREMENTAL], ids=["AlterConfigs", "IncrementalAlterConfigs"])
@pytest.mark.parametrize("rtype", [0, BROKER_LOGGER, CLIENT_METRICS, -1, 1])
@pytest.mark.parametrize("validate_only", [False, True])
def test_a_resource_type_that_is_not_altered_here_is_answered_and_the_connection_stays(listener, api, rtype,
                                                                                      validate_only):
    where, w = listener
    got = alter(w, api, [(rtype, "x", [("a", SET, "b")])], validate_only=validate_only)
    assert got == [expected(where, api, rtype)]
    still_open(w)


@pytest.fixture
def broker_wire(node):
    w = WireClient("127.0.0.1", node.port)
    yield w
    w.close()


def retention_ms(w, topic):
    res = w.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(
        include_synonyms=False, include_documentation=False, resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC, resource_name=topic,
                                                           configuration_keys=["retention.ms"])])).results[0]
    assert res.error_code == 0, res
    return res.configs[0].value


@pytest.mark.parametrize("api", [LEGACY, INCREMENTAL], ids=["AlterConfigs", "IncrementalAlterConfigs"])
def test_the_valid_resources_of_the_request_are_still_applied(listener, broker_wire, api):
    where, w = listener
    topic = f"cfg-{where}-{int(api)}-{uuid.uuid4().hex[:6]}"
    create(broker_wire, topic)
    got = alter(w, api, [(0, "x", [("a", SET, "b")]), (TOPIC, topic, [("retention.ms", SET, "1234")]),
                         (-1, topic, [])])
    unknown = Errors.INVALID_REQUEST if where == "broker" else Errors.UNSUPPORTED_VERSION
    assert [code for code, _ in got] == [unknown, 0, unknown]
    assert retention_ms(broker_wire, topic) == "1234"
    still_open(w)


@pytest.fixture
def controller_wire(node):
    w = WireClient("127.0.0.1", node.controller_port)
    yield w
    w.close()


@pytest.mark.parametrize("api", [LEGACY, INCREMENTAL], ids=["AlterConfigs", "IncrementalAlterConfigs"])
def test_the_controller_answers_a_resource_named_twice_as_kafkas_controller_does(controller_wire, api):
    got = alter(controller_wire, api, [(BROKER, "", [("log.cleaner.threads", SET, "2")]),
                                       (BROKER, "", [("log.cleaner.threads", SET, "3")])], validate_only=True)
    assert got == [(Errors.INVALID_REQUEST, "Duplicate resource.")] * 2
    still_open(controller_wire)


@pytest.mark.parametrize("api", [LEGACY, INCREMENTAL], ids=["AlterConfigs", "IncrementalAlterConfigs"])
def test_the_controller_refuses_a_broker_name_that_is_no_node(controller_wire, api):
    """ControllerConfigurationValidator.validateBrokerName, then the existence check: such a name
    never becomes a ConfigRecord (a broker listener refuses any name but its own id first)."""
    cleaner = [("log.cleaner.threads", SET, "2")]
    # AlterConfigs replaces the whole set: the cluster level keeps its min.insync.replicas (ELR)
    got = alter(controller_wire, api, [(BROKER, name, cleaner)
                                       for name in ("x", "1x", "-1", "99999999999", "42", "1")] +
                [(BROKER, "", [*cleaner, ("min.insync.replicas", SET, "1")])], validate_only=True)
    assert got == [(Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
                   (Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
                   (Errors.INVALID_REQUEST, "Invalid negative broker ID."),
                   (Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
                   (Errors.BROKER_ID_NOT_REGISTERED, "No node with id 42 found."),
                   (0, None), (0, None)]
    still_open(controller_wire)


def test_an_unknown_incremental_operation_changes_nothing(listener, broker_wire):
    """An operation id outside SET/DELETE/APPEND/SUBTRACT on a TOPIC or GROUP: INVALID_REQUEST for
    that resource (a deliberate difference: Kafka's controller fails the whole request)."""
    where, w = listener
    topic = f"op-{where}-{uuid.uuid4().hex[:6]}"
    create(broker_wire, topic, {"retention.ms": "5555"})
    got = alter(w, INCREMENTAL, [(TOPIC, topic, [("retention.ms", 7, "1")]),
                                 (GROUP, "g-" + topic, [("consumer.session.timeout.ms", -1, "50000")])])
    assert got == [(Errors.INVALID_REQUEST, "Unknown operations type 7"),
                   (Errors.INVALID_REQUEST, "Unknown operations type -1")]
    assert retention_ms(broker_wire, topic) == "5555"
    still_open(w)


def test_real_clients_alter_topic_configs_on_the_two_listener_node(node):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    from tests.clients.adapters import confluent_admin, kafka_python_admin

    topic = f"clients-{uuid.uuid4().hex[:6]}"
    w = WireClient("127.0.0.1", node.port)
    try:
        create(w, topic)
        admin = confluent_admin(node.bootstrap_servers)
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "4321", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(timeout=20)
        assert retention_ms(w, topic) == "4321"
        kp = kafka_python_admin(node.bootstrap_servers)
        try:
            kp.alter_configs([KpResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "8765"})])
        finally:
            kp.close()
        assert retention_ms(w, topic) == "8765"
    finally:
        w.close()
