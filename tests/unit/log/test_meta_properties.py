from __future__ import annotations

import re

import pytest

from pybroker.log.errors import MetaPropertiesError
from pybroker.log.meta_properties import (
    MetaProperties,
    ensure_log_dirs,
    random_uuid_str,
    read_meta_properties,
    uuid_from_str,
    uuid_to_str,
    write_meta_properties,
)


def test_uuid_strings_look_like_kafkas():
    for _ in range(200):
        text = random_uuid_str()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", text)
        assert not text.startswith("-")
        assert uuid_to_str(uuid_from_str(text)) == text


def test_known_uuid_encoding():
    # Kafka's Uuid(0x1234..., ...) prints as unpadded URL-safe base64 of the 16 big-endian bytes
    raw = bytes(range(16))
    assert uuid_to_str(raw) == "AAECAwQFBgcICQoLDA0ODw"


def test_first_start_formats_every_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    cluster_id, metas = ensure_log_dirs(dirs, node_id=3)
    assert len(cluster_id) == 22
    for d in dirs:
        meta = read_meta_properties(d)
        assert meta == metas[d]
        assert meta.node_id == 3 and meta.cluster_id == cluster_id and meta.version == 1
    assert metas[dirs[0]].directory_id != metas[dirs[1]].directory_id
    text = (dirs[0] / "meta.properties").read_text()
    assert "node.id=3\n" in text and "version=1\n" in text and f"cluster.id={cluster_id}\n" in text
    # a restart keeps the same ids
    again, metas2 = ensure_log_dirs(dirs, node_id=3)
    assert again == cluster_id and metas2 == metas


def test_reads_kafka_written_file(tmp_path):
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Jan 02 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n")
    meta = read_meta_properties(tmp_path)
    assert meta == MetaProperties(node_id=1, cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
                                  directory_id="J8aAPcfLQt2bqs1JT_rMgQ")


def test_node_id_mismatch_is_a_clear_error(tmp_path):
    ensure_log_dirs([tmp_path], node_id=1)
    with pytest.raises(MetaPropertiesError, match="node.id=1.*node.id=2"):
        ensure_log_dirs([tmp_path], node_id=2)


def test_cluster_id_mismatch_between_dirs(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_meta_properties(tmp_path / name, MetaProperties(1, random_uuid_str(), random_uuid_str()))
    with pytest.raises(MetaPropertiesError, match="different clusters"):
        ensure_log_dirs([tmp_path / "a", tmp_path / "b"], node_id=1)


def test_cluster_id_mismatch_with_config(tmp_path):
    cluster_id, _ = ensure_log_dirs([tmp_path], node_id=1)
    other = random_uuid_str()
    with pytest.raises(MetaPropertiesError, match=other):
        ensure_log_dirs([tmp_path], node_id=1, cluster_id=other)


def test_new_dir_joins_the_existing_cluster(tmp_path):
    cluster_id, _ = ensure_log_dirs([tmp_path / "a"], node_id=1)
    again, metas = ensure_log_dirs([tmp_path / "a", tmp_path / "b"], node_id=1)
    assert again == cluster_id and metas[tmp_path / "b"].cluster_id == cluster_id


def test_unsupported_version(tmp_path):
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=x\n")
    with pytest.raises(MetaPropertiesError, match="version 0"):
        read_meta_properties(tmp_path)
