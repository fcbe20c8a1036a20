"""`pybroker dump-log`: kafka-dump-log.sh. Reads segment files directly (no broker needed)
and prints them in Kafka's DumpLogSegments format.

    pybroker dump-log --files 00000000000000000000.log[,...] [--print-data-log] [--deep-iteration]
        [--skip-record-metadata] [--max-bytes N] [--index-sanity-check] [--verify-index-only]
        [--max-message-size N] [--offsets-decoder | --transaction-log-decoder | --cluster-metadata-decoder
        | --remote-log-metadata-decoder]

By suffix:
- .log: "Log starting offset: N", then one line per batch (baseOffset lastOffset count
  baseSequence lastSequence producerId producerEpoch partitionLeaderEpoch isTransactional
  isControl deleteHorizonMs position CreateTime|LogAppendTime size magic compresscodec crc
  isvalid; crc is checked); with --deep-iteration (implied by --print-data-log) one
  "| offset: ..." line per record (keySize valueSize sequence headerKeys, end-transaction
  markers, KRaft SnapshotHeader/SnapshotFooter/KRaftVersion/KRaftVoters control records as JSON,
  "key: ... payload: ..." as UTF-8 with --print-data-log, or as the decoders print them:
  --offsets-decoder (__consumer_offsets), --transaction-log-decoder (__transaction_state),
  --cluster-metadata-decoder (__cluster_metadata), each Kafka 4's JSON (cli/record_json.py);
  --remote-log-metadata-decoder (__remote_log_metadata: which segments are in remote storage,
  printed as Kafka's toString, cli/remote_log_metadata_text.py);
  a decoder implies --print-data-log). Bytes after the last
  whole batch: "Found N invalid bytes at the end of F". Offsets that do not follow each
  other are listed on stderr at the end ("Non-consecutive offsets in ...").
- .checkpoint (a KRaft metadata snapshot, or bootstrap.checkpoint): as a .log, headed
  "Snapshot end offset: N, epoch: E" (or "KRaft bootstrap snapshot").
- .index: "offset: O position: P" per entry (stopping at the first zero entry of a
  preallocated file), each checked against the .log beside it (mismatches on stderr);
  --index-sanity-check runs Kafka's OffsetIndex.sanityCheck instead and prints
  "F passed sanity check." or fails (exit 1); --verify-index-only checks without printing.
- .timeindex: "timestamp: T offset: O", checked against the log like Kafka's (mismatched
  timestamps, out-of-order entries, offsets that are not a batch's last offset: stderr).
- .snapshot: the producer-state snapshot, one line per producer (Kafka's fields).
- .txnindex: one line per aborted transaction.
Other files: "Ignoring unknown file F" on stderr. A missing file: one line, exit 2.
The .log is memory-mapped read-only; the files are never written.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import bisect
import mmap
import os
import struct
from pathlib import Path
from typing import Any, TextIO

from pybroker._native import crc32c as _crc32c
from pybroker.cli import record_json
from pybroker.cli.common import EXIT_FAILURE, EXIT_OK, CliError
from pybroker.cli.remote_log_metadata_text import remote_log_metadata_payload
from pybroker.client.admin import AdminClient
from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    DELETE_HORIZON_FLAG,
    LOG_OVERHEAD,
    BatchHeader,
    iter_batch_records,
)
from pybroker.records.compression import CODEC_NAMES

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
INT32_MAX = 2**31 - 1


def register(parser: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker dump-log"
    parser.add_argument("--files", required=True, metavar="FILE[,FILE...]",
                        help="comma-separated .log, .index, .timeindex, .snapshot and .txnindex files")
    parser.add_argument("--print-data-log", action="store_true", help="print record keys and values (implies "
                        "--deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--skip-record-metadata", action="store_true", help="leave out the per-record metadata")
    parser.add_argument("--max-bytes", type=int, default=INT32_MAX, metavar="N",
                        help="read at most N bytes of each .log")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run the index sanity check (what the broker checks at start-up)")
    parser.add_argument("--verify-index-only", action="store_true", help="check index entries without printing them")
    parser.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, metavar="N",
                        help="largest batch looked at for an index entry (default 5242880)")
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="decode __consumer_offsets records (keys and values as JSON); implies --print-data-log")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="decode __transaction_state records (keys and values as JSON); implies "
                          "--print-data-log")
    decoders.add_argument("--cluster-metadata-decoder", action="store_true",
                          help="decode __cluster_metadata records (type, version and data as JSON); implies "
                          "--print-data-log")
    decoders.add_argument("--remote-log-metadata-decoder", action="store_true",
                          help="decode __remote_log_metadata records (the remote segments' metadata, as "
                          "TopicBasedRemoteLogMetadataManager writes it); implies --print-data-log")
    parser.set_defaults(handler=run)


def _seq(base: int, delta: int) -> int:
    """DefaultRecordBatch.incrementSequence; -1 stays -1."""
    if base < 0:
        return -1
    return (base + delta) % (INT32_MAX + 1) if base + delta > INT32_MAX else base + delta


class Problems:
    """What Kafka's tool reports on stderr after all files."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}

    def report(self, err: TextIO) -> None:
        for f, items in self.index_mismatches.items():
            err.write(f"Mismatches in :{f}\n")
            for a, b in items:
                err.write(f"  Index offset: {a}, log offset: {b}\n")
        for f, items in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{f}\n")
            for a, b in items:
                err.write(f"  Index timestamp: {a}, log timestamp: {b}\n")
        for f, items in self.time_out_of_order.items():
            err.write(f"Found out of order timestamp in :{f}\n")
            for a, b in items:
                err.write(f"  Index timestamp: {a}, Previously indexed timestamp: {b}\n")
        for items in self.time_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for a, b in items:
                err.write(f"Indexed offset: {a}, found log offset: {b}\n")
        for f, items in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {f}\n")
            for a, b in items:
                err.write(f"  {a} is followed by {b}\n")


def _base_offset(path: Path) -> int:
    stem = path.name.split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise CliError(f"cannot read a base offset from the file name '{path.name}'") from None


class LogFile:
    """A read-only view of a .log file and its batch headers."""

    def __init__(self, path: Path, max_bytes: int = INT32_MAX) -> None:
        self.path = path
        self._f = open(path, "rb")  # noqa: SIM115 - closed in close()
        size = os.fstat(self._f.fileno()).st_size
        self.size = size
        self.buf: Any = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.limit = min(size, max_bytes)

    def batches(self, start: int = 0) -> Any:
        """(position, header, valid crc) per whole batch from `start`, until the limit or a
        batch that does not fit."""
        pos = start
        view = memoryview(self.buf)
        try:
            while pos + LOG_OVERHEAD <= self.limit:
                if pos + BATCH_HEADER_SIZE > self.limit:
                    return
                h = BatchHeader._make(_HEADER.unpack_from(self.buf, pos))
                size = h.batch_length + LOG_OVERHEAD
                if h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + size > self.limit:
                    return
                valid = h.magic == 2 and _crc32c.crc32c(view[pos + 21:pos + size]) == h.crc
                yield pos, h, valid
                pos += size
        finally:
            view.release()

    def chunk(self, pos: int, header: BatchHeader) -> bytes:
        return bytes(self.buf[pos:pos + header.batch_length + LOG_OVERHEAD])

    def close(self) -> None:
        if not isinstance(self.buf, bytes):
            self.buf.close()
        self._f.close()


def _log_header(path: Path) -> str:
    """Kafka's first line: a segment's base offset, or a KRaft snapshot's id."""
    if path.suffix != ".checkpoint":
        return f"Log starting offset: {_base_offset(path)}"
    if path.name == "bootstrap.checkpoint":
        return "KRaft bootstrap snapshot"
    from pybroker.raft.snapshots import parse_snapshot_file_name

    parsed = parse_snapshot_file_name(path.name)
    if parsed is None:
        raise CliError(f"cannot read a snapshot id from the file name '{path.name}'")
    return f"Snapshot end offset: {parsed[0].offset}, epoch: {parsed[0].epoch}"


def dump_log(path: Path, args: argparse.Namespace, out: TextIO, problems: Problems) -> None:
    out.write(_log_header(path) + "\n")
    if (args.offsets_decoder or args.transaction_log_decoder or args.cluster_metadata_decoder
            or args.remote_log_metadata_decoder):
        args.print_data_log = True  # Kafka: any decoder implies --print-data-log
    deep = args.deep_iteration or args.print_data_log
    log = LogFile(path, args.max_bytes)
    valid_bytes = 0
    last_offset = -1
    try:
        for pos, h, valid in log.batches():
            delete_horizon = (f"OptionalLong[{h.base_timestamp}]" if h.attributes & DELETE_HORIZON_FLAG
                              else "OptionalLong.empty")
            out.write(f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                      f"baseSequence: {h.base_sequence} lastSequence: {_seq(h.base_sequence, h.last_offset_delta)} "
                      f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                      f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                      f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                      f"deleteHorizonMs: {delete_horizon} position: {pos} {TIMESTAMP_TYPES[h.timestamp_type]}: "
                      f"{h.max_timestamp} size: {h.size_in_bytes} magic: {h.magic} "
                      f"compresscodec: {CODEC_NAMES.get(h.compression, 'unknown')} crc: {h.crc} "
                      f"isvalid: {str(valid).lower()}\n")
            if deep:
                _, records = iter_batch_records(log.chunk(pos, h))
                for r in records:
                    if last_offset != -1 and r.offset != last_offset + 1:
                        problems.non_consecutive.setdefault(str(path.resolve()), []).append((last_offset, r.offset))
                    last_offset = r.offset
                    line = "| "
                    sep = ""
                    if not args.skip_record_metadata:
                        line += (f"offset: {r.offset} {TIMESTAMP_TYPES[h.timestamp_type]}: {r.timestamp_ms} "
                                 f"keySize: {len(r.key) if r.key is not None else -1} "
                                 f"valueSize: {len(r.value) if r.value is not None else -1} "
                                 f"sequence: {_seq(h.base_sequence, r.offset - h.base_offset)} "
                                 f"headerKeys: [{','.join(k.decode('utf-8', 'replace') for k, _ in r.headers)}]")
                        sep = " "
                        if h.is_control:
                            line += _control_text(r.key, r.value)
                    if args.print_data_log and not h.is_control:
                        key, payload = _parse(args, r.offset, r.key, r.value)
                        if key is not None:
                            line += f"{sep}key: {key}"
                            sep = " "
                        if payload is not None:
                            line += f" payload: {payload}"
                    out.write(line + "\n")
            valid_bytes += h.size_in_bytes
        trailing = log.size - valid_bytes
        if trailing > 0 and args.max_bytes == INT32_MAX:
            out.write(f"Found {trailing} invalid bytes at the end of {path.name}\n")
    finally:
        log.close()


def _parse(args: argparse.Namespace, offset: int, key: bytes | None, value: bytes | None
           ) -> tuple[str | None, str | None]:
    """(key text, payload text) of a data record: the chosen decoder's, else UTF-8."""
    if args.cluster_metadata_decoder:
        return None, record_json.cluster_metadata_payload(offset, value)
    if args.remote_log_metadata_decoder:  # no key, as Kafka's RemoteMetadataLogMessageParser
        return None, remote_log_metadata_payload(offset, value)
    if args.offsets_decoder:
        return record_json.offsets_key_payload(offset, key, value)
    if args.transaction_log_decoder:
        return record_json.transaction_log_key_payload(offset, key, value)
    return (None if key is None else key.decode("utf-8", "replace"),
            None if value is None else value.decode("utf-8", "replace"))


# Kafka 4 prints these KRaft control records as their JSON (DumpLogSegments.printControlRecord)
_CONTROL_JSON = {3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion", 6: "KRaftVoters"}


def _control_text(key: bytes | None, value: bytes | None) -> str:
    if key is None or len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    (ctype,) = struct.unpack_from(">h", key, 2)
    if ctype in (0, 1) and value is not None and len(value) >= 6:
        (epoch,) = struct.unpack_from(">i", value, 2)
        return f" endTxnMarker: {CONTROL_TYPES[ctype]} coordinatorEpoch: {epoch}"
    if ctype in _CONTROL_JSON and value is not None:
        from pybroker.raft.control_records import decode_control_record

        try:
            message = decode_control_record(key, value).message
        except Exception:  # an undecodable control record: fall back to its type
            message = None
        if message is not None:
            return f" {_CONTROL_JSON[ctype]} {record_json.dumps(record_json.message_json(message, message.version))}"
    return f" controlType: {CONTROL_TYPES.get(ctype, 'UNKNOWN')}({ctype})"


def _read_entries(path: Path, entry: struct.Struct) -> tuple[bytes, int]:
    data = path.read_bytes()
    return data, len(data) // entry.size


def dump_index(path: Path, args: argparse.Namespace, out: TextIO, problems: Problems) -> None:
    base = _base_offset(path)
    data, entries = _read_entries(path, _OFFSET_ENTRY)
    if args.index_sanity_check:
        # OffsetIndex.sanityCheck
        if entries and base + _OFFSET_ENTRY.unpack_from(data, (entries - 1) * 8)[0] < base:
            raise CliError(f"Corrupt index found, index file ({path}) has non-zero size but the last offset is "
                           f"{base + _OFFSET_ENTRY.unpack_from(data, (entries - 1) * 8)[0]} which is less than the "
                           f"base offset {base}.", EXIT_FAILURE)
        if len(data) % _OFFSET_ENTRY.size:
            raise CliError(f"Index file {path} is corrupt, found {len(data)} bytes which is neither positive nor a "
                           f"multiple of {_OFFSET_ENTRY.size}.", EXIT_FAILURE)
        out.write(f"{path} passed sanity check.\n")
        return
    if entries == 0:
        out.write(f"{path} is empty.\n")
        return
    log_path = path.with_name(path.name.split(".")[0] + ".log")
    log = LogFile(log_path) if log_path.exists() else None
    try:
        for i in range(entries):
            rel, position = _OFFSET_ENTRY.unpack_from(data, i * 8)
            offset = base + rel
            if offset == base and i > 0:  # the zeroed, preallocated tail
                return
            if log is not None:
                first = next(iter(log.batches(position)), None)
                last = first[1].last_offset if first is not None else -1
                if last != offset:
                    problems.index_mismatches.setdefault(str(path.resolve()), []).append((offset, last))
            if not args.verify_index_only:
                out.write(f"offset: {offset} position: {position}\n")
    finally:
        if log is not None:
            log.close()


def dump_time_index(path: Path, args: argparse.Namespace, out: TextIO, problems: Problems) -> None:
    base = _base_offset(path)
    data, entries = _read_entries(path, _TIME_ENTRY)
    if args.index_sanity_check:
        # TimeIndex.sanityCheck
        if entries:
            first_ts = _TIME_ENTRY.unpack_from(data, 0)[0]
            last_ts, last_rel = _TIME_ENTRY.unpack_from(data, (entries - 1) * 12)
            if last_ts < first_ts:
                raise CliError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                               f"timestamp is {last_ts} which is less than the first timestamp {first_ts}",
                               EXIT_FAILURE)
            if base + last_rel < base:
                raise CliError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                               f"offset is {base + last_rel} which is less than the first offset {base}", EXIT_FAILURE)
        if len(data) % _TIME_ENTRY.size:
            raise CliError(f"Time index file {path} is corrupt, found {len(data)} bytes which is not positive or "
                           f"not a multiple of {_TIME_ENTRY.size}.", EXIT_FAILURE)
        out.write(f"{path} passed sanity check.\n")
        return
    log_path = path.with_name(path.name.split(".")[0] + ".log")
    log = LogFile(log_path) if log_path.exists() else None
    key = str(path.resolve())
    prev_ts = -1
    # (last offset, position, header) of every batch, once: entries are looked up by offset.
    batches = [(h.last_offset, p, h) for p, h, _ in log.batches()] if log is not None else []
    lasts = [b[0] for b in batches]
    try:
        for i in range(entries):
            ts, rel = _TIME_ENTRY.unpack_from(data, i * 12)
            offset = base + rel
            if offset == base and i > 0:
                return
            if log is not None:
                j = bisect.bisect_left(lasts, offset)
                if j == len(batches):
                    problems.time_not_found.setdefault(key, []).append((offset, -1))
                elif batches[j][0] != offset:
                    problems.time_not_found.setdefault(key, []).append((offset, batches[j][0]))
                else:
                    _, records = iter_batch_records(log.chunk(batches[j][1], batches[j][2]))
                    max_ts = max((r.timestamp_ms for r in records), default=-1)
                    if max_ts != ts:
                        problems.time_mismatches.setdefault(key, []).append((ts, max_ts))
                    if prev_ts >= ts:
                        problems.time_out_of_order.setdefault(key, []).append((ts, prev_ts))
            if not args.verify_index_only:
                out.write(f"timestamp: {ts} offset: {offset}\n")
            prev_ts = ts
    finally:
        if log is not None:
            log.close()


def dump_snapshot(path: Path, out: TextIO, err: TextIO) -> None:
    from pybroker.log.errors import CorruptSnapshotError
    from pybroker.log.producer_state import read_snapshot

    try:
        entries = read_snapshot(path)
    except CorruptSnapshotError as exc:
        err.write(f"{exc}\n")
        return
    for e in entries:
        txn = "OptionalLong.empty" if e.current_txn_first_offset is None else \
            f"OptionalLong[{e.current_txn_first_offset}]"
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp} ")
        if e.batch_metadata:
            m = e.batch_metadata[0]
            line += (f"firstSequence: {m.first_seq} lastSequence: {m.last_seq} lastOffset: {m.last_offset} "
                     f"offsetDelta: {m.offset_delta} timestamp: {m.timestamp}")
        out.write(line + "\n")


def dump_txn_index(path: Path, out: TextIO) -> None:
    data = path.read_bytes()
    for i in range(len(data) // _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, i * _TXN_ENTRY.size)
        out.write(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                  f"lastStableOffset: {lso}\n")


def run(admin: AdminClient | None, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    files = [Path(f.strip()) for f in args.files.split(",") if f.strip()]
    if not files:
        raise CliError("--files needs at least one file")
    for f in files:
        if not f.is_file():
            raise CliError(f"file '{f}' does not exist")
    problems = Problems()
    for f in files:
        out.write(f"Dumping {f}\n")
        suffix = f.suffix
        try:
            if suffix in (".log", ".checkpoint"):  # KRaft snapshots are record batches too
                dump_log(f, args, out, problems)
            elif suffix == ".index":
                dump_index(f, args, out, problems)
            elif suffix == ".timeindex":
                dump_time_index(f, args, out, problems)
            elif suffix == ".snapshot":
                dump_snapshot(f, out, err)
            elif suffix == ".txnindex":
                dump_txn_index(f, out)
            else:
                err.write(f"Ignoring unknown file {f}\n")
        except BrokenPipeError:
            raise  # stdout's reader left: not a file problem (cli/common.py run_handler)
        except OSError as exc:
            raise CliError(f"cannot read '{f}': {exc.strerror or exc}", EXIT_FAILURE) from None
    out.flush()
    problems.report(err)
    return EXIT_OK
