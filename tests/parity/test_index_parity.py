"""Index lookups: native == pure == a bisect oracle on sorted entries; native == pure on
unsorted (corrupt) ones, since both probe the same slots."""

import bisect
import mmap
import struct

import pytest
from _parity import assert_same
from hypothesis import given
from hypothesis import strategies as st

TWIN = "index"


def offset_index(keys):
    return b"".join(struct.pack(">II", k, i * 4096) for i, k in enumerate(keys))


def time_index(keys):
    return b"".join(struct.pack(">qI", k, i) for i, k in enumerate(keys))


@given(keys=st.lists(st.integers(0, 2**32 - 1), max_size=300).map(sorted),
       targets=st.lists(st.integers(-5, 2**32 + 5), min_size=1, max_size=20),
       slack=st.binary(max_size=11))
def test_offset_lookup_sorted(twins, keys, targets, slack):
    native, pure = twins
    buf = offset_index(keys) + slack
    for target in targets + keys[:5]:
        expected = bisect.bisect_right(keys, target) - 1
        assert native.offset_lookup(buf, len(keys), target) == expected
        assert pure.offset_lookup(buf, len(keys), target) == expected


@given(keys=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=300).map(sorted),
       targets=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20))
def test_time_lookup_sorted(twins, keys, targets):
    native, pure = twins
    buf = time_index(keys)
    for target in targets + keys[:5]:
        expected = bisect.bisect_right(keys, target) - 1
        assert native.time_lookup(buf, len(keys), target) == expected
        assert pure.time_lookup(buf, len(keys), target) == expected


@given(raw=st.binary(max_size=400), target=st.integers(-(2**63), 2**63 - 1))
def test_unsorted_bytes_agree(twins, raw, target):
    native, pure = twins
    assert_same(native.offset_lookup, pure.offset_lookup, raw, len(raw) // 8, target)
    assert_same(native.time_lookup, pure.time_lookup, raw, len(raw) // 12, target)


def test_mmap_buffer(twins, tmp_path):
    native, pure = twins
    keys = list(range(0, 30_000, 3))
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(offset_index(keys))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for target in (-1, 0, 1, 2, 3, 29_997, 40_000):
            expected = bisect.bisect_right(keys, target) - 1
            assert native.offset_lookup(m, len(keys), target) == expected
            assert pure.offset_lookup(m, len(keys), target) == expected


@pytest.mark.parametrize("args", [(b"\x00" * 15, 2, 0), (b"", -1, 0), (b"\x00" * 8, 1, 2**63)])
def test_bad_arguments(twins, args):
    native, pure = twins
    for name in ("offset_lookup", "time_lookup"):
        kind, _ = assert_same(getattr(native, name), getattr(pure, name), *args)
        assert kind == "raise"


@given(size=st.integers(1, 3 * 4096), writes=st.lists(
    st.tuples(st.integers(0, 3 * 4096), st.binary(min_size=1, max_size=64)), max_size=20))
def test_mapped_file_reads_writes_and_flushes_like_mmap(twins, tmp_path_factory, size, writes):
    """MappedFile: the same bytes through the buffer protocol and on disk after flush, for both
    twins; a closed mapping refuses use, and close is refused while a view is exported."""
    d = tmp_path_factory.mktemp("mapped")
    results = []
    for impl in twins:
        path = d / f"{impl.__name__}.index"
        path.write_bytes(bytes(size))
        m = impl.MappedFile(path, size)
        assert len(m) == size and not m.closed
        with memoryview(m) as view:
            for pos, data in writes:
                chunk = data[: max(0, size - pos)]
                view[pos:pos + len(chunk)] = chunk
            with pytest.raises(BufferError):
                m.close()
            struct.pack_into(">I", m, 0, 7) if size >= 4 else None
        m.flush()
        results.append((bytes(memoryview(m)), path.read_bytes()))
        m.close()
        assert m.closed
        with pytest.raises(ValueError):
            len(m)
        ro = impl.MappedFile(path, size, writable=False)
        with pytest.raises((TypeError, BufferError)):
            struct.pack_into(">B", ro, 0, 1)
        ro.close()
    assert results[0] == results[1]
    assert results[0][0] == results[0][1]


def test_mapped_file_refuses_empty_and_missing_files(twins, tmp_path):
    for impl in twins:
        with pytest.raises(ValueError):
            impl.MappedFile(tmp_path / "x", 0)
        with pytest.raises(FileNotFoundError):
            impl.MappedFile(tmp_path / "missing", 8)
