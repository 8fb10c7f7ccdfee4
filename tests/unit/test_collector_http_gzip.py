"""``collector.ingest.http._gunzip`` on its own: many members decode exactly, and every
refusal keeps its status and message whatever the size of the pieces the members' inflaters
are fed (the body's end, garbage or a cut can fall in any piece)."""

from __future__ import annotations

import gzip
import os
import random
import zlib

import pytest

from collector.ingest.http import MAX_GZIP_MEMBERS, HttpError, _gunzip

TOO_LARGE = HttpError(413, "request too large", "request body exceeds the limit", close=True)
LIMIT = 64 << 20


def gunzip(raw: bytes, limit: int = LIMIT) -> bytes:
    return _gunzip(raw, limit, TOO_LARGE)


def test_many_small_non_empty_members_decode_exactly():
    pieces = [f"cpu,host=h{i} v={i}i {i}\n".encode() for i in range(MAX_GZIP_MEMBERS)]
    body = b"".join(gzip.compress(piece, mtime=0) for piece in pieces)
    assert gunzip(body) == b"".join(pieces)


def test_one_member_past_the_cap_is_refused_naming_it():
    """A body of very many tiny members costs an inflater each: the cap ends it."""
    empty = gzip.compress(b"", mtime=0)
    with pytest.raises(HttpError) as refused:
        gunzip(empty * (MAX_GZIP_MEMBERS + 1))
    assert refused.value.status == 400 and refused.value.close
    assert refused.value.message == (
        "bad gzip body: more than 1024 gzip members (send one member, or a few concatenated)"
    )


def test_members_of_every_size_decode_exactly():
    """Members from empty to larger than the pieces grow to (random bytes do not
    compress: a member of 300 kB is fed in many doubling pieces), in a random order."""
    rng = random.Random(7)
    pieces = [b"", b"x", os.urandom(63), os.urandom(64), os.urandom(65), os.urandom(300_000)]
    pieces += [b"line %d\n" % i * rng.randrange(1, 200) for i in range(500)]
    rng.shuffle(pieces)
    body = b"".join(gzip.compress(piece) for piece in pieces)
    assert gunzip(body) == b"".join(pieces)


def test_an_empty_body_is_empty():
    assert gunzip(b"") == b""


def members() -> bytes:
    return gzip.compress(b"a" * 1000) + gzip.compress(os.urandom(5000))


@pytest.mark.parametrize("cut", [1, 10, 11, 64, 100, 500, 1000])
def test_a_cut_member_is_truncated(cut):
    body = members()
    with pytest.raises(HttpError) as refused:
        gunzip(body[:-cut])
    assert refused.value.status == 400 and refused.value.close
    assert refused.value.message.startswith("bad gzip body: member 2 is truncated")
    assert f"{len(body) - cut} bytes received" in refused.value.message


@pytest.mark.parametrize("junk", [b"j", b"junk", b"\x00" * 8, b"\x1f", b"x" * 10_000])
def test_bytes_after_the_last_member_that_are_no_member(junk):
    with pytest.raises(HttpError) as refused:
        gunzip(members() + junk)
    assert refused.value.status == 400
    if junk == b"\x1f":  # a lone magic byte: it does not start a member
        assert "1 bytes after gzip member 2 that are not a gzip member" in refused.value.message
    else:
        assert refused.value.message == (
            f"bad gzip body: {len(junk)} bytes after gzip member 2 that are not a gzip member"
        )


def test_garbage_inside_a_member_names_the_member():
    second = bytearray(gzip.compress(b"b" * 5000))
    second[12:20] = b"\xff" * 8
    with pytest.raises(HttpError) as refused:
        gunzip(gzip.compress(b"a") + bytes(second))
    assert refused.value.status == 400
    assert refused.value.message.startswith("bad gzip body: member 2: ")


def test_a_body_that_is_not_gzip():
    with pytest.raises(HttpError) as refused:
        gunzip(b"cpu v=1 1")
    assert refused.value.message == "bad gzip body: it does not start with the gzip header"


@pytest.mark.parametrize("split", [False, True])
def test_a_bomb_stops_at_the_limit(split):
    """Over the limit in one member, or across many members each under it."""
    bomb = gzip.compress(b"\x00" * 200_000)
    body = bomb if not split else gzip.compress(b"\x00" * 900) * 200
    with pytest.raises(HttpError) as refused:
        gunzip(body, limit=100_000)
    assert refused.value is TOO_LARGE


def test_exactly_the_limit_is_accepted():
    assert gunzip(gzip.compress(b"z" * 1000), limit=1000) == b"z" * 1000
    assert gunzip(gzip.compress(b"z" * 500) * 2, limit=1000) == b"z" * 1000


def test_a_raw_deflate_stream_is_no_gzip_member():
    with pytest.raises(HttpError):
        gunzip(zlib.compress(b"x"))
