"""A seeded generator of hostile request frames, built from the project's own message schemas.

`FrameFuzzer(seed).frame()` returns one frame (size prefix included): a request of a random API
key and version (most of them real, some not), whose fields are filled from boundary-biased
values (0, -1, the type's extremes, short and empty strings, names of topics and groups that
exist, a few long ones), whose records fields carry record batches that are valid, mutated with
a recomputed CRC (so the mutation gets past the checksum), or mutated with the CRC left stale;
and then, most of the time, the encoded bytes themselves are mutated: bits flipped, bytes
inserted or deleted, the body cut short, the size prefix, API key or version rewritten, an
overlong varint or a junk tagged-field section spliced in.

Everything comes from one `random.Random(seed)`: the same seed gives the same frames.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from pybroker._native import crc32c
from pybroker.protocol.api_keys import REQUEST_CLASSES, VALID_VERSIONS
from pybroker.protocol.api_message import ApiMessage, FieldSpec, in_range
from pybroker.protocol.frame import encode_request
from pybroker.records.batch import build_batch

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
NAMES = ["fuzz-t", "fuzz-u", "__consumer_offsets", "__transaction_state", "g1", "txn-1", "", "-",
         "a" * 249, "a" * 300, "with space", "..", "fuzz.t", "fuzz_t"]


class FrameFuzzer:
    def __init__(self, seed: int, served: dict[int, tuple[int, int]] | None = None) -> None:
        """`served`: the API keys and versions the broker serves, drawn most of the time so that
        most frames reach a handler rather than the framing checks."""
        self.rng = random.Random(seed)
        self.keys = sorted(k for k in VALID_VERSIONS if k in REQUEST_CLASSES)
        self.served = dict(sorted((served or {}).items()))

    # ------------------------------------------------------------------ values

    def _int(self, t: str) -> int:
        lo, hi = INT_RANGES[t]
        r = self.rng.random()
        if r < 0.35:
            v = self.rng.choice([0, 1, -1, 2, 3])
        elif r < 0.6:
            v = self.rng.randint(0, 16)
        elif r < 0.8:
            v = self.rng.choice([lo, hi, hi - 1, lo + 1, 1 << 28, -(1 << 20), 60000])
        else:
            v = self.rng.randint(lo, hi)
        return min(max(v, lo), hi)

    def _string(self, nullable: bool) -> str | None:
        r = self.rng.random()
        if nullable and r < 0.1:
            return None
        if r < 0.7:
            return self.rng.choice(NAMES)
        n = self.rng.choice([1, 3, 8, 40])
        return "".join(self.rng.choice("abcxyz-._é\u0000") for _ in range(n))

    def _records(self) -> bytes | None:
        r = self.rng.random()
        if r < 0.1:
            return None
        if r < 0.2:
            return bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(0, 80)))
        rows = [(self.rng.choice([0, 1_700_000_000_000, -1, 2**62]),
                 self.rng.choice([None, b"", b"k", bytes(20)]),
                 self.rng.choice([None, b"", b"v" * self.rng.randint(1, 200)]),
                 self.rng.choice([(), (("h", b"v"),), (("h", None),)]))
                for _ in range(self.rng.randint(1, 5))]
        try:
            batch = bytearray(build_batch(
                rows, compression=self.rng.choice([0, 0, 1, 2, 3, 4]),
                producer_id=self.rng.choice([-1, -1, 0, 1000, 2**62]),
                producer_epoch=self.rng.choice([-1, 0, 5]),
                base_sequence=self.rng.choice([-1, 0, 7, 2**31 - 1]),
                transactional=self.rng.random() < 0.15, control=self.rng.random() < 0.05,
                timestamp_type=self.rng.choice([0, 0, 1])))
        except (ValueError, OverflowError):
            return b""
        if r < 0.5:
            return bytes(batch)  # valid
        self._mutate_batch(batch)
        if self.rng.random() < 0.5 and len(batch) >= 21:  # past the checksum
            struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
        return bytes(batch)

    def _mutate_batch(self, b: bytearray) -> None:
        fields = [(0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (27, ">q"),
                  (35, ">q"), (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]
        for _ in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.7 and len(b) >= 61:
                pos, fmt = self.rng.choice(fields)
                size = struct.calcsize(fmt)
                bits = size * 8
                v = self.rng.choice([0, -1, 1, 2, (1 << (bits - 1)) - 1, -(1 << (bits - 1)), 1000])
                struct.pack_into(fmt, b, pos, v)
            elif b:
                i = self.rng.randrange(len(b))
                b[i] = self.rng.getrandbits(8)

    def _value(self, fs: FieldSpec, version: int, depth: int) -> Any:
        nullable = in_range(fs.nullable, version)
        t = fs.type
        if t.startswith("[]"):
            if nullable and self.rng.random() < 0.1:
                return None
            n = self.rng.choice([0, 1, 1, 2, 3]) if depth < 2 else self.rng.choice([0, 1])
            if self.rng.random() < 0.02:
                n = 50
            elem = t[2:]
            if fs.struct is not None:
                return [self._message(fs.struct, version, depth + 1) for _ in range(n)]
            return [self._scalar(elem, False) for _ in range(n)]
        if fs.struct is not None:
            if nullable and self.rng.random() < 0.2:
                return None
            return self._message(fs.struct, version, depth + 1)
        if t == "records":
            return self._records()
        return self._scalar(t, nullable)

    def _scalar(self, t: str, nullable: bool) -> Any:
        if t in INT_RANGES:
            return self._int(t)
        if t == "bool":
            return self.rng.random() < 0.5
        if t == "float64":
            return self.rng.choice([0.0, 1.5, -1.0, 1e300])
        if t == "string":
            return self._string(nullable)
        if t == "bytes":
            if nullable and self.rng.random() < 0.1:
                return None
            return bytes(self.rng.getrandbits(8) for _ in range(self.rng.choice([0, 1, 4, 30])))
        if t == "uuid":
            return self.rng.choice([bytes(16), bytes(range(16)), bytes(15) + b"\x01"])
        raise AssertionError(t)

    def _message(self, cls: type[ApiMessage], version: int, depth: int = 0) -> ApiMessage:
        kwargs = {fs.name: self._value(fs, version, depth) for fs in cls._FIELDS if in_range(fs.versions, version)}
        return cls(**kwargs)

    # ------------------------------------------------------------------ frames

    def request(self) -> bytes:
        """A well-formed encoding of a random request (size prefix included)."""
        while True:
            if self.served and self.rng.random() < 0.85:
                key = self.rng.choice(list(self.served))
                lo, hi = self.served[key]
            else:
                key = self.rng.choice(self.keys)
                lo, hi = VALID_VERSIONS[key]
            version = self.rng.randint(lo, hi)
            try:
                body = self._message(REQUEST_CLASSES[key], version)
                return encode_request(key, version, self.rng.randint(0, 2**31 - 1),
                                      self.rng.choice(["fuzz", None, "", "x" * 100]), body)
            except Exception:  # a value this version cannot carry: draw again
                continue

    def frame(self) -> bytes:
        frame = bytearray(self.request())
        if self.rng.random() < 0.5:
            return bytes(frame)
        for _ in range(self.rng.randint(1, 2)):
            self._mutate_frame(frame)
        return bytes(frame)

    def _mutate_frame(self, f: bytearray) -> None:
        op = self.rng.randrange(10)
        n = len(f)
        body = max(n - 4, 0)
        if op == 0 and n > 4:  # bit flips
            for _ in range(self.rng.randint(1, 8)):
                i = self.rng.randrange(4, n)
                f[i] ^= 1 << self.rng.randrange(8)
        elif op == 1 and n > 4:  # boundary bytes
            i = self.rng.randrange(4, n)
            f[i] = self.rng.choice([0x00, 0xFF, 0x7F, 0x80])
        elif op == 2 and body > 1:  # cut short, size kept consistent
            cut = self.rng.randrange(4, n)
            del f[cut:]
            struct.pack_into(">i", f, 0, len(f) - 4)
        elif op == 3:  # insert junk, size kept consistent
            i = self.rng.randrange(4, n + 1)
            f[i:i] = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 16)))
            struct.pack_into(">i", f, 0, len(f) - 4)
        elif op == 4 and n >= 4:  # a size prefix that lies
            struct.pack_into(">i", f, 0, self.rng.choice([0, -1, 1, 3, body + 1, body - 1, 2**31 - 1,
                                                          100_000_000, 104_857_601]))
        elif op == 5 and n >= 8:  # another api version
            struct.pack_into(">h", f, 6, self.rng.choice([-1, 0, 1, 17, 100, 32767]))
        elif op == 6 and n >= 6:  # another api key
            struct.pack_into(">h", f, 4, self.rng.choice([-1, 99, 1000, self.rng.choice(self.keys)]))
        elif op == 7 and n > 14:  # an overlong / huge varint spliced in
            i = self.rng.randrange(14, n)
            f[i:i + 1] = self.rng.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff", b"\x80\x00"])
            struct.pack_into(">i", f, 0, len(f) - 4)
        elif op == 8:  # junk tagged fields at the end
            f += self.rng.choice([b"\x01\x05\xff", b"\x03\x00\x00\x01\x00\x02\x00", b"\xff\xff\xff\xff\x0f"])
            struct.pack_into(">i", f, 0, len(f) - 4)
        elif n > 4:  # delete a byte
            i = self.rng.randrange(4, n)
            del f[i]
            struct.pack_into(">i", f, 0, len(f) - 4)
