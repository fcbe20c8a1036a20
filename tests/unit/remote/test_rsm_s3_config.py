"""Aiven's S3Storage keys become the obstore S3 client's settings (no network: the client is
only built): addressing style, endpoint, credentials, TLS checks, timeouts."""

from __future__ import annotations

from pybroker.log.remote.storage.config import S3Config, parse_rsm_config
from pybroker.log.remote.storage.object_storage import _s3_store
from tests.unit.remote.rsm_helpers import S3

BASE = {"storage.backend.class": S3, "storage.s3.bucket.name": "kafka-tiered", "storage.s3.region": "eu-west-1",
        "chunk.size": "4194304"}


def built(**extra: str):
    config = parse_rsm_config({**BASE, **extra})
    assert isinstance(config.backend, S3Config)
    return _s3_store(config.backend)


def test_aws_defaults_to_virtual_hosts_and_https():
    store = built()
    assert store.config["bucket"] == "kafka-tiered" and store.config["region"] == "eu-west-1"
    assert store.config["virtual_hosted_style_request"] == "true" and "endpoint" not in store.config
    assert store.client_options["allow_http"] == "false"


def test_custom_endpoint_defaults_to_path_style_and_allows_http_only_for_http():
    store = built(**{"storage.s3.endpoint.url": "http://127.0.0.1:9000"})
    assert store.config["endpoint"] == "http://127.0.0.1:9000"
    assert store.config["virtual_hosted_style_request"] == "false"
    assert store.client_options["allow_http"] == "true"
    assert built(**{"storage.s3.endpoint.url": "https://minio.example"}).client_options["allow_http"] == "false"


def test_virtual_hosts_on_a_custom_endpoint_put_the_bucket_in_the_host():
    store = built(**{"storage.s3.endpoint.url": "https://s3.example:8443",
                     "storage.s3.path.style.access.enabled": "false"})
    assert store.config["endpoint"] == "https://kafka-tiered.s3.example:8443"
    assert store.config["virtual_hosted_style_request"] == "true"


def test_static_credentials_certificates_and_timeouts():
    store = built(**{"storage.aws.access.key.id": "AKIA", "storage.aws.secret.access.key": "secret",
                     "storage.aws.certificate.check.enabled": "false",
                     "storage.s3.api.call.timeout": "7000", "storage.s3.api.call.attempt.timeout": "3000"})
    assert store.config["access_key_id"] == "AKIA" and store.config["secret_access_key"] == "secret"
    assert store.client_options["allow_invalid_certificates"] == "true"
    assert store.client_options["timeout"] == "3s"
    assert store.retry_config is not None and store.retry_config["retry_timeout"].total_seconds() == 7
