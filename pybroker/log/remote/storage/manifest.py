"""A remote segment's manifest (Aiven's SegmentManifestV1, the `.rsm-manifest` object, JSON):
which chunk of the segment lives at which bytes of the `.log` object, whether chunks are
compressed, and where each index sits in the `.indexes` object.

    {"version": "1",
     "chunkIndex": {"type": "fixed", "originalChunkSize": 4194304, "originalFileSize": 10485760,
                    "transformedChunkSize": 4194304, "finalTransformedChunkSize": 2097152},
     "segmentIndexes": {"offset": {"position": 0, "size": 80}, "timestamp": {...},
                        "producerSnapshot": {...}, "leaderEpoch": {...}, "transaction": null},
     "compression": false}

Chunk i holds the segment's bytes [i * originalChunkSize, min((i + 1) * originalChunkSize,
originalFileSize)). Uncompressed chunks map 1:1 ("fixed"); compressed chunks (one zstd frame
each) have their own sizes ("variable": `transformedChunks`, a plain list of sizes where Aiven
writes a base64 binary codec). Immutable values; any thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import accumulate

from pybroker.log.remote.remote_storage_manager import IndexType, RemoteStorageError

INDEX_FIELDS = {IndexType.OFFSET: "offset", IndexType.TIMESTAMP: "timestamp",
                IndexType.PRODUCER_SNAPSHOT: "producerSnapshot", IndexType.LEADER_EPOCH: "leaderEpoch",
                IndexType.TRANSACTION: "transaction"}


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    original_chunk_size: int
    original_file_size: int
    transformed_sizes: tuple[int, ...]  # one per chunk
    fixed: bool
    offsets: tuple[int, ...] = field(default=(), compare=False)  # start of each chunk, then the end

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", (0, *accumulate(self.transformed_sizes)))

    @property
    def chunk_count(self) -> int:
        return len(self.transformed_sizes)

    def original_range(self, chunk: int) -> tuple[int, int]:
        start = chunk * self.original_chunk_size
        return start, min(start + self.original_chunk_size, self.original_file_size)

    def transformed_range(self, chunk: int) -> tuple[int, int]:
        """[start, end) of chunk `chunk` in the `.log` object."""
        return self.offsets[chunk], self.offsets[chunk + 1]

    @staticmethod
    def build(original_chunk_size: int, original_file_size: int, transformed: list[int],
              compressed: bool) -> ChunkIndex:
        return ChunkIndex(original_chunk_size, original_file_size, tuple(transformed), fixed=not compressed)

    def to_json(self) -> dict[str, object]:
        if self.fixed:
            return {"type": "fixed", "originalChunkSize": self.original_chunk_size,
                    "originalFileSize": self.original_file_size,
                    "transformedChunkSize": self.transformed_sizes[0] if self.transformed_sizes else 0,
                    "finalTransformedChunkSize": self.transformed_sizes[-1] if self.transformed_sizes else 0}
        return {"type": "variable", "originalChunkSize": self.original_chunk_size,
                "originalFileSize": self.original_file_size, "transformedChunks": list(self.transformed_sizes)}

    @staticmethod
    def from_json(obj: dict[str, object]) -> ChunkIndex:
        chunk, size = int(obj["originalChunkSize"]), int(obj["originalFileSize"])  # type: ignore[call-overload]
        count = -(-size // chunk) if chunk else 0
        if obj["type"] == "fixed":
            t, last = int(obj["transformedChunkSize"]), int(obj["finalTransformedChunkSize"])  # type: ignore[call-overload]
            sizes = tuple([t] * (count - 1) + [last]) if count else ()
            return ChunkIndex(chunk, size, sizes, fixed=True)
        sizes = tuple(int(s) for s in obj["transformedChunks"])  # type: ignore[attr-defined]
        if len(sizes) != count:
            raise ValueError(f"{len(sizes)} chunk sizes for {count} chunks")
        return ChunkIndex(chunk, size, sizes, fixed=False)


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    chunk_index: ChunkIndex
    indexes: dict[IndexType, tuple[int, int] | None]  # (position, size) in the .indexes object
    compression: bool

    def to_bytes(self) -> bytes:
        indexes = {INDEX_FIELDS[t]: None if r is None else {"position": r[0], "size": r[1]}
                   for t, r in self.indexes.items()}
        return json.dumps({"version": "1", "chunkIndex": self.chunk_index.to_json(),
                           "segmentIndexes": indexes, "compression": self.compression}).encode()

    @staticmethod
    def from_bytes(data: bytes, key: str) -> SegmentManifest:
        try:
            obj = json.loads(data)
            if obj.get("version") != "1":
                raise ValueError(f"unknown manifest version {obj.get('version')!r}")
            raw = obj["segmentIndexes"]
            indexes: dict[IndexType, tuple[int, int] | None] = {}
            for t, name in INDEX_FIELDS.items():
                entry = raw.get(name)
                indexes[t] = None if entry is None else (int(entry["position"]), int(entry["size"]))
            return SegmentManifest(ChunkIndex.from_json(obj["chunkIndex"]), indexes, bool(obj["compression"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise RemoteStorageError(f"{key} is not a valid segment manifest: {e}") from e


__all__ = ["ChunkIndex", "INDEX_FIELDS", "SegmentManifest"]
