"""Any text the agent can see (process names, Slurm accounts, device names, a run's model)
survives the agent's line protocol and the collector's own parser (issue 44, item 4).

Line protocol cannot carry a newline in a line, nor the C parser a NUL, and the collector
refuses tags with control or bidirectional formatting characters: names and tags are written
as contract.text.visible shows them (``\\x1b``), string fields with their line breaks and NULs
as those escapes; every other character comes back as written. Measurement names are the
project's own: they may not start with whitespace or ``#`` (a comment line).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.lineprotocol import parse_body, parse_line_full
from contract.point import Point, encode_line, encode_lines, name_as_read, string_as_read
from contract.schema import Workload

any_text = st.text(min_size=1, max_size=40)
measurement_names = any_text.filter(lambda name: not name[0].isspace() and name[0] != "#")


def test_a_tag_ending_in_a_backslash_is_read_back() -> None:
    line = encode_line(Point("processes", {"comm": "evil\\", "host": "n1"}, {"cpu": 48.0}, 1))
    assert parse_line_full(line)[1] == {"comm": "evil\\", "host": "n1"}


def test_control_characters_are_written_as_their_escapes() -> None:
    assert string_as_read("a\nb\r\nc\0\x1b[2J") == "a\\x0ab\\x0d\\x0ac\\x00\x1b[2J"
    assert name_as_read("a\nb\x1b[2J\u202e") == "a\\x0ab\\x1b[2J\\u202e"
    line = encode_line(Point("workload", {"host": "n\n1"}, {"model": "x\ny"}, 1))
    assert "\n" not in line
    assert parse_line_full(line)[1:3] == ({"host": "n\\x0a1"}, {"model": "x\\x0ay"})


@settings(max_examples=300, deadline=None)
@given(measurement=measurement_names, key=any_text, value=any_text)
def test_any_tag_round_trips_through_the_collector(measurement: str, key: str, value: str) -> None:
    body = encode_lines(
        [Point(measurement, {key: value}, {"n": 1.5}, 7), Point("m", {"k": value}, {"n": 2.0}, 8)]
    )
    parsed = parse_body(body)
    assert parsed.errors == []
    tag_sets = {(group.measurement, tuple(group.tags.items())) for group in parsed.groups}
    assert tag_sets == {
        (name_as_read(measurement), ((name_as_read(key), name_as_read(value)),)),
        ("m", (("k", name_as_read(value)),)),
    }


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60), tag=any_text)
def test_any_string_field_round_trips_through_the_collector(text: str, tag: str) -> None:
    body = encode_lines([Point(Workload.NAME, {"host": tag}, {"model": text, "n": 1}, 7)])
    parsed = parse_body(body)
    assert parsed.errors == []
    [event] = parsed.events
    assert event.tags == {"host": name_as_read(tag)}
    assert event.fields["model"] == string_as_read(text)
