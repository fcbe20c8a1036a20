"""`pybroker dump-log` on segment files a live node wrote (records from confluent-kafka,
plain, gzip-compressed and transactional), compared with what was produced; and on
damaged copies, where the checks must say so."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pybroker.client.admin import AdminClient
from pybroker.testing import EmbeddedBroker

from .conftest import one_error_line, run_cli

RECORDS = [(f"key-{i}".encode(), f"value-{i}".encode(), [("h1", b"a"), ("h2", b"b")] if i % 2 else None)
           for i in range(40)]
BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (\d+) isTransactional: (true|false) "
    r"isControl: (true|false) deleteHorizonMs: OptionalLong\.empty position: (\d+) (CreateTime|LogAppendTime): "
    r"(\d+) size: (\d+) magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$")
RECORD = re.compile(r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) sequence: (-?\d+) "
                    r"headerKeys: \[([^\]]*)\](.*)$")


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A partition directory written by a node that was then shut down cleanly."""
    data = tmp_path_factory.mktemp("dumplog")
    topic = "dumped"
    b = EmbeddedBroker(log_dir=str(data)).start()
    try:
        with AdminClient(b.bootstrap_servers) as admin:
            admin.create_topic(topic, 1, 1, {"index.interval.bytes": "100"})
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, "enable.idempotence": False})
        for k, v, h in RECORDS[:20]:  # one request each: many small batches, so the index has entries
            p.produce(topic, value=v, key=k, headers=h, partition=0)
            p.flush(30)
        gz = Producer({"bootstrap.servers": b.bootstrap_servers, "compression.type": "gzip", "linger.ms": 50})
        for k, v, h in RECORDS[20:30]:
            gz.produce(topic, value=v, key=k, headers=h, partition=0)
        assert gz.flush(30) == 0
        tx = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
        tx.init_transactions(30)
        tx.begin_transaction()
        for k, v, h in RECORDS[30:]:
            tx.produce(topic, value=v, key=k, headers=h, partition=0)
        tx.commit_transaction(30)
    finally:
        b.stop()
    return data / f"{topic}-0"


def dump(*args: str) -> tuple[int, str, str]:
    return run_cli(["dump-log", *args])


def test_log_batches_and_records_match_what_was_produced(segment: Path):
    log = segment / "00000000000000000000.log"
    rc, out, err = dump("--files", str(log), "--print-data-log")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batches = [BATCH.match(line) for line in lines if line.startswith("baseOffset:")]
    assert all(batches) and all(b.group(17) == "true" for b in batches)
    positions = [int(b.group(11)) for b in batches]
    sizes = [int(b.group(14)) for b in batches]
    assert positions[0] == 0 and all(positions[i + 1] == positions[i] + sizes[i] for i in range(len(batches) - 1))
    assert positions[-1] + sizes[-1] == log.stat().st_size
    assert "gzip" in {b.group(15) for b in batches}
    control = [b for b in batches if b.group(10) == "true"]
    assert len(control) == 1 and control[0].group(9) == "true"
    assert int(control[0].group(6)) >= 0  # the transactional producer's id
    records = [RECORD.match(line) for line in lines if line.startswith("| ")]
    assert all(records)
    data = [r for r in records if "endTxnMarker" not in r.group(7)]
    markers = [r for r in records if "endTxnMarker" in r.group(7)]
    assert len(data) == len(RECORDS) and [int(r.group(1)) for r in data] == list(range(len(RECORDS)))
    for r, (key, value, headers) in zip(data, RECORDS, strict=True):
        assert int(r.group(3)) == len(key) and int(r.group(4)) == len(value)
        assert r.group(6) == ("h1,h2" if headers else "")
        assert r.group(7) == f" key: {key.decode()} payload: {value.decode()}"
    assert len(markers) == 1 and re.search(r" endTxnMarker: COMMIT coordinatorEpoch: \d+$", markers[0].group(7))
    assert int(markers[0].group(1)) == len(RECORDS)
    # transactional records carry their sequences
    assert [int(r.group(5)) for r in data[30:]] == list(range(10))


def test_shallow_iteration_prints_batches_only_and_skip_record_metadata(segment: Path):
    log = str(segment / "00000000000000000000.log")
    rc, out, _ = dump("--files", log)
    assert rc == 0 and not any(line.startswith("|") for line in out.splitlines())
    rc, out, _ = dump("--files", log, "--print-data-log", "--skip-record-metadata")
    first = next(line for line in out.splitlines() if line.startswith("|"))
    assert first == "| key: key-0 payload: value-0"


def test_offset_and_time_indexes_agree_with_the_log(segment: Path):
    index = segment / "00000000000000000000.index"
    rc, out, err = dump("--files", str(index))
    assert rc == 0 and err == ""
    entries = [tuple(map(int, re.fullmatch(r"offset: (\d+) position: (\d+)", line).groups()))
               for line in out.splitlines()[1:]]
    assert len(entries) >= 2  # index.interval.bytes=100 over ~20 small batches
    rc, log_out, _ = dump("--files", str(segment / "00000000000000000000.log"))
    batch_at = {int(m.group(11)): int(m.group(2)) for m in map(BATCH.match, log_out.splitlines()) if m}
    assert all(batch_at[position] == offset for offset, position in entries)
    rc, out, err = dump("--files", str(segment / "00000000000000000000.timeindex"))
    assert rc == 0 and err == ""
    assert all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in out.splitlines()[1:])
    rc, out, err = dump("--files", f"{index},{segment / '00000000000000000000.timeindex'}", "--index-sanity-check")
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"Dumping {index}", f"{index} passed sanity check.",
                                f"Dumping {segment / '00000000000000000000.timeindex'}",
                                f"{segment / '00000000000000000000.timeindex'} passed sanity check."]


def test_producer_snapshot(segment: Path):
    snapshots = sorted(segment.glob("*.snapshot"))
    assert snapshots, "the clean shutdown writes a producer snapshot"
    rc, out, err = dump("--files", str(snapshots[-1]))
    assert rc == 0 and err == ""
    lines = out.splitlines()[1:]
    assert lines and all(re.fullmatch(
        r"producerId: \d+ producerEpoch: \d+ coordinatorEpoch: -?\d+ currentTxnFirstOffset: OptionalLong\.empty "
        r"lastTimestamp: \d+ firstSequence: \d+ lastSequence: \d+ lastOffset: \d+ offsetDelta: \d+ timestamp: \d+",
        line) for line in lines)
    assert any("lastSequence: 9 " in line for line in lines)  # the transactional producer's 10 records


def test_damage_is_reported(segment: Path, tmp_path: Path):
    log = tmp_path / "00000000000000000000.log"
    shutil.copy(segment / log.name, log)
    data = bytearray(log.read_bytes())
    first_size = int.from_bytes(data[8:12], "big") + 12
    data[first_size - 1] ^= 0xFF  # the first batch's last byte: its CRC no longer matches
    log.write_bytes(bytes(data) + b"\x00\x01\x02")
    rc, out, _ = dump("--files", str(log))
    assert rc == 0
    batches = [BATCH.match(line) for line in out.splitlines() if line.startswith("baseOffset:")]
    assert batches[0].group(17) == "false" and all(b.group(17) == "true" for b in batches[1:])
    assert out.splitlines()[-1] == f"Found 3 invalid bytes at the end of {log.name}"

    index = tmp_path / "00000000000000000000.index"
    index.write_bytes((segment / index.name).read_bytes() + b"\x00\x00\x00")
    rc, out, err = dump("--files", str(index), "--index-sanity-check")
    assert rc == 1
    assert one_error_line(err) == (f"pybroker: Index file {index} is corrupt, found {index.stat().st_size} bytes "
                                   "which is neither positive nor a multiple of 8.")


def test_unknown_and_missing_files(segment: Path, tmp_path: Path):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    rc, out, err = dump("--files", str(other))
    assert (rc, out, err) == (0, f"Dumping {other}\n", f"Ignoring unknown file {other}\n")
    rc, out, err = dump("--files", str(tmp_path / "missing.log"))
    assert rc == 2 and out == "" and "does not exist" in one_error_line(err)


def test_python_m_pybroker_dump_log_needs_no_broker(segment: Path):
    r = subprocess.run([sys.executable, "-m", "pybroker", "dump-log", "--files",
                        str(segment / "00000000000000000000.log"), "--deep-iteration"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    assert sum(1 for line in r.stdout.splitlines() if line.startswith("| offset:")) == len(RECORDS) + 1
