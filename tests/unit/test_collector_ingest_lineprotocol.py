"""Line-protocol parsing: real-world lines (Telegraf output, InfluxDB docs), escapes, types,
precision, server time, and malformed lines reported by number without losing the rest."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.lineprotocol import (
    PrecisionError,
    parse_body,
    parse_body_bytes,
    parse_line_full,
    precision_factor,
)
from contract.point import Point, encode_lines

NOW = 1_700_000_000_123_456_789


def only_group(parsed):
    assert len(parsed.groups) == 1, parsed.groups
    return parsed.groups[0]


def column(group, name):
    return group.values[group.fields.index(name)]


def series_of(parsed) -> dict[tuple, list[tuple[int, float]]]:
    """(measurement, tags, field) -> [(time, value)] over every group, whatever the grouping
    (NaN stands for "no value")."""
    found: dict[tuple, dict[int, float]] = {}
    for group in parsed.groups:
        for name, values in zip(group.fields, group.values, strict=True):
            key = (group.measurement, tuple(sorted(group.tags.items())), name)
            points = zip(group.times_ns.tolist(), values.tolist(), strict=True)
            found.setdefault(key, {}).update((t, v) for t, v in points if not math.isnan(v))
    return {key: sorted(points.items()) for key, points in found.items()}


def test_telegraf_cpu_and_disk_lines():
    body = (
        "cpu,cpu=cpu-total,host=telegraf-host usage_idle=98.5,usage_user=1.2,usage_system=0.3"
        " 1700000000000000000\n"
        "disk,device=sda1,fstype=ext4,host=telegraf-host,mode=rw,path=/ free=1234i,"
        "inodes_free=56i,used_percent=12.3 1700000000000000000\n"
    )
    parsed = parse_body(body)
    assert parsed.errors == []
    assert parsed.points == 2
    cpu, disk = sorted(parsed.groups, key=lambda g: g.measurement)
    assert cpu.tags == {"cpu": "cpu-total", "host": "telegraf-host"}
    assert set(cpu.fields) == {"usage_idle", "usage_user", "usage_system"}
    assert column(cpu, "usage_idle").tolist() == [98.5]
    assert disk.tags["path"] == "/"
    assert column(disk, "free").tolist() == [1234.0]
    assert column(disk, "inodes_free").tolist() == [56.0]
    assert disk.times_ns.tolist() == [1_700_000_000_000_000_000]


def test_telegraf_string_fields_are_named_not_dropped_silently():
    # Telegraf's system input: uptime_format holds a space and commas inside quotes
    body = (
        'system,host=h uptime_format="10 days,  3:04",uptime=867911i 1700000000000000000\n'
        'procstat,exe=python3,host=h cmdline="python3 -m x --a=b c",pid=123i 1700000000000000000\n'
        'system,host=h motd="only text" 1700000000000000000'
    )
    parsed = parse_body(body)
    # each string field is named (a 400), and the numbers of its line are stored all the same
    assert [error.line for error in parsed.errors] == [1, 2, 3]
    assert parsed.errors[0].message.startswith(
        'field "uptime_format" is a string, not stored (samples are numbers'
    )
    assert "the line's numeric fields were stored" in parsed.errors[1].message
    assert "numeric fields were stored" not in parsed.errors[2].message  # motd: text only
    assert parsed.points == 2  # the lines whose numbers were stored
    by_name = {g.measurement: g for g in parsed.groups}
    assert by_name["system"].fields == ("uptime",)
    assert by_name["system"].values.tolist() == [[867911.0]]
    assert by_name["procstat"].fields == ("pid",)


def test_influxdb_docs_escaping_example():
    # From the InfluxDB line protocol reference, "Special characters" section.
    line = (
        r"measurement\ with\ spaces,tag\ key\ with\ spaces=tag\,value\,with"
        r'"commas" field_key\\\\="string field value, only \" need be escaped",n=1i'
        " 1556813561098000000"
    )
    measurement, tags, fields, timestamp = parse_line_full(line)
    assert measurement == "measurement with spaces"
    assert tags == {"tag key with spaces": 'tag,value,with"commas"'}
    assert fields["field_key\\\\"] == 'string field value, only " need be escaped'
    assert fields["n"] == 1
    assert timestamp == 1556813561098000000
    group = only_group(parse_body(line))
    assert group.measurement == "measurement with spaces"
    assert group.fields == ("n",)


def test_escaped_equals_and_comma_in_keys_and_gpu_name_with_space():
    body = (
        r"gpu,gpu=0,host=n1,name=Tesla\ V100-SXM2-32GB,uuid=GPU-1 utilization_percent=97.5,"
        r"energy_millijoules=123456789i 1700000000000000000" + "\n"
        r"m,k\=1=v\,2 f\=x=1,f\ y=2 5"
    )
    parsed = parse_body(body)
    assert parsed.errors == []
    gpu, m = sorted(parsed.groups, key=lambda g: g.measurement)
    assert gpu.tags["name"] == "Tesla V100-SXM2-32GB"
    assert column(gpu, "energy_millijoules").tolist() == [123456789.0]
    assert m.tags == {"k=1": "v,2"}
    assert set(m.fields) == {"f=x", "f y"}


def test_value_types_integer_unsigned_boolean_float_forms():
    body = (
        "t i=-9223372036854775808i,u=18446744073709551615u,b1=t,b2=FALSE,b3=True,"
        "e=-1.5e-3,d=1.,p=.5 1"
    )
    group = only_group(parse_body(body))
    assert column(group, "i").tolist() == [-9223372036854775808.0]
    assert column(group, "u").tolist() == [18446744073709551615.0]
    assert column(group, "b1").tolist() == [1.0]
    assert column(group, "b2").tolist() == [0.0]
    assert column(group, "b3").tolist() == [1.0]
    assert column(group, "e").tolist() == [-0.0015]
    assert column(group, "d").tolist() == [1.0]
    assert column(group, "p").tolist() == [0.5]
    # integers stay integers where types matter (workload events)
    _, _, fields, _ = parse_line_full('t i=5i,f=5,s="5",b=t 1')
    assert fields == {"i": 5, "f": 5.0, "s": "5", "b": True}
    assert type(fields["i"]) is int and type(fields["f"]) is float


@pytest.mark.parametrize(
    "bad",
    [
        "cpu v=1i00 1",
        "cpu v=nan 1",
        "cpu v=inf 1",
        "cpu v=1_0 1",
        "cpu v=1.5i 1",
        "cpu v=9223372036854775808i 1",  # int64 overflow
        "cpu v=-1u 1",
        "cpu v=tRUE 1",
        'cpu v="unterminated 1',
        "cpu v=1 1.5",  # fractional timestamp
        "cpu v=1 abc",
        "cpu v=",
        "cpu",
        "cpu,host=a",
        ",host=a v=1",
        "cpu,host= v=1",
        "cpu v=1,",
    ],
)
def test_malformed_lines_are_reported_by_number_and_the_rest_kept(bad):
    body = f"cpu,host=a v=1 10\n{bad}\ncpu,host=a v=3 30"
    parsed = parse_body(body)
    assert [error.line for error in parsed.errors] == [2]
    assert str(parsed.errors[0]).startswith("line 2: ")
    assert parsed.points == 2
    group = only_group(parsed)
    assert group.times_ns.tolist() == [10, 30]
    assert group.values.tolist() == [[1.0, 3.0]]


def test_blank_lines_comments_and_line_numbers():
    body = "# written by hand\n\ncpu v=1 1\n   \nbroken\r\ncpu v=2 2\n\nalso broken\n"
    parsed = parse_body(body)
    assert [error.line for error in parsed.errors] == [5, 8]
    assert only_group(parsed).values.tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize(
    ("precision", "timestamp", "expected_ns"),
    [
        ("ns", 1641024000123456789, 1641024000123456789),
        ("n", 5, 5),
        ("us", 1641024000123456, 1641024000123456000),
        ("u", 7, 7_000),
        ("ms", 1641024000123, 1641024000123000000),
        ("s", 1641024000, 1641024000000000000),
        ("m", 2, 120_000_000_000),
        ("h", 1, 3_600_000_000_000),
    ],
)
def test_precision_conversion(precision, timestamp, expected_ns):
    # InfluxDB docs "home" example written at each precision
    group = only_group(parse_body(f"home,room=Living\\ Room temp=21.1 {timestamp}", precision))
    assert group.tags == {"room": "Living Room"}
    assert group.times_ns.tolist() == [expected_ns]


def test_unknown_precision_and_out_of_range_time():
    with pytest.raises(PrecisionError):
        precision_factor("seconds")
    assert precision_factor(None) == 1
    # 9223372036854775807 s is far beyond int64 nanoseconds
    parsed = parse_body("cpu v=1 9223372036854775807\ncpu v=2 3", "s")
    assert [error.line for error in parsed.errors] == [1]
    assert only_group(parsed).times_ns.tolist() == [3_000_000_000]


def test_missing_timestamp_gets_server_time_truncated_to_precision():
    parsed = parse_body("cpu v=1\ncpu v=2 5", "ms", now_ns=NOW)
    assert parsed.untimed_lines == [1]
    # 1_700_000_000_123_456_789 ns truncated to ms: ..._123_000_000
    assert parsed.server_time_ns == 1_700_000_000_123_000_000
    assert series_of(parsed) == {
        ("cpu", (), "v"): [(5_000_000, 2.0), (1_700_000_000_123_000_000, 1.0)]
    }


def test_same_series_same_time_last_write_wins_and_unsorted_input():
    parsed = parse_body("cpu v=1 30\ncpu v=2 10\ncpu v=3 30\ncpu v=4 20")
    group = only_group(parsed)
    assert group.times_ns.tolist() == [10, 20, 30]
    assert group.values.tolist() == [[2.0, 4.0, 3.0]]


def test_tag_sets_and_field_sets_make_separate_groups():
    parsed = parse_body(
        "cpu,host=a v=1 1\ncpu,host=b v=1 1\ncpu,host=a v=2,w=3 2\ncpu,host=a v=4 3"
    )
    shapes = sorted((g.tags["host"], sorted(g.fields), g.times_ns.tolist()) for g in parsed.groups)
    assert shapes == [("a", ["v"], [1, 3]), ("a", ["v", "w"], [2]), ("b", ["v"], [1])]


def test_workload_lines_become_typed_events():
    points = [
        Point(
            "workload",
            {"host": "n1", "run_id": "r1", "rank": "0", "framework": "pytorch"},
            {"event": "run_start", "model": "resnet50", "world_size": 8, "batch_size": 256},
            1_000,
        ),
        Point(
            "workload",
            {"host": "n1", "run_id": "r1", "rank": "0", "framework": "pytorch"},
            {"event": "epoch_end", "epoch": 1, "images": 1281167, "seconds": 301.5},
            2_000,
        ),
    ]
    parsed = parse_body(encode_lines(points) + "\ncpu,host=n1 user_seconds=5i 1000")
    assert parsed.errors == []
    assert parsed.points == 3
    assert [event.fields for event in parsed.events] == [point.fields for point in points]
    assert parsed.events[0].tags == points[0].tags
    assert [event.time_ns for event in parsed.events] == [1_000, 2_000]
    assert only_group(parsed).measurement == "cpu"  # events are not samples


def test_agent_encoded_points_round_trip():
    point = Point(
        "nfs",
        {"host": "n1", "mountpoint": "/data set", "server": "fs1", "export": "/x,y"},
        {"app_read_bytes": 123456789012, "age_seconds": 12.25},
        1_700_000_000_000_000_000,
    )
    group = only_group(parse_body(encode_lines([point])))
    assert group.tags == point.tags
    assert dict(zip(group.fields, group.values[:, 0].tolist(), strict=True)) == {
        "app_read_bytes": 123456789012.0,
        "age_seconds": 12.25,
    }


def test_invalid_utf8_line_is_one_bad_line():
    body = b"cpu v=1 1\ncpu,host=\xff\xfe v=2 2\ncpu v=3 3"
    parsed = parse_body_bytes(body)
    assert [(error.line, error.message) for error in parsed.errors] == [(2, "not valid UTF-8")]
    assert only_group(parsed).values.tolist() == [[1.0, 3.0]]


def test_many_lines_keep_float_values_exactly():
    rng = np.random.default_rng(7)
    values = rng.random(500) * 1e6
    body = "\n".join(f"g,host=h v={value!r} {i}" for i, value in enumerate(values))
    group = only_group(parse_body(body))
    assert np.array_equal(group.values[0], values)
    assert np.array_equal(group.times_ns, np.arange(500))


def test_backslashes_in_names_as_influxdb_reads_them():
    # InfluxDB docs: "\" -> "\", "\\" -> "\", "\\\" -> "\\", "\\\\" -> "\\"
    for written, meant in [("\\", "\\"), ("\\\\", "\\"), ("\\\\\\", "\\\\"), ("\\" * 4, "\\\\")]:
        _, tags, fields, _ = parse_line_full(f"m,t=a{written}b f{written}x=1i 1")
        assert tags == {"t": f"a{meant}b"}
        assert fields == {f"f{meant}x": 1}


# ---- the template path must accept, reject and read exactly what the general path does

PREFIXES = ["cpu,host=a", "gpu,gpu=0,host=a,name=Tesla\\ V100", "m", "m,t=x\\,y", "workload,host=a"]
NAMES = ["a", "b", "c_d", "a\\ b", "e\\=f", "pcie_rx", "multi"]
VALUES = [
    "1",
    "-2",
    "3.5",
    "1e5",
    "-1.5E-3",
    ".5",
    "5.",
    "0",
    "7i",
    "-8i",
    "9u",
    "123456789012i",
    "18446744073709551615u",
    "9223372036854775807i",
    "9223372036854775808i",
    "-1u",
    "1.5i",
    "1e3i",
    "+1",
    "+1i",
    "1e+5",
    "nan",
    "inf",
    "1_0",
    "t",
    "false",
    '"s"',
    "",
    ".",
    "1e999",
    "0x10",
    "\u0663",
    "1e-320",
    "-4.9e-324",
    "1e-400",
    "0e-400",
    "2.2250738585072014e-308",
    "1.8e308",
    "1.7976931348623157e308",
    "1-2",
    "--1",
    "1e",
    "e5",
]
TIMES = [
    "9223372036854775806",
    "9223372036854775807",
    "1",
    "2",
    "3",
    "10",
    "",
    "-1",
    "99999999999999999999",
    "9223372036854775807",
    "1.5",
    "+3",
    "\u0663",
    " 4",
]


def reference(body: str, precision: str) -> tuple[dict, list[int]]:
    """What every line means when parsed on its own by the general path."""
    factor = precision_factor(precision)
    found: dict[tuple, dict[int, float]] = {}
    bad = []
    for number, line in enumerate(body.split("\n"), 1):
        if not line or line.startswith("#") or line.isspace():
            continue
        try:
            measurement, tags, fields, timestamp = parse_line_full(line)
        except Exception:
            bad.append(number)
            continue
        time_ns = NOW // factor * factor if timestamp is None else timestamp * factor
        if not -(2**63) + 2 <= time_ns <= 2**63 - 2:  # InfluxDB's time range
            bad.append(number)
            continue
        if measurement == "workload":
            continue
        if any(isinstance(value, str) for value in fields.values()):
            bad.append(number)  # a string field is named in the errors; numbers are stored
        for name, value in fields.items():
            if not isinstance(value, str):
                key = (measurement, tuple(sorted(tags.items())), name)
                found.setdefault(key, {})[time_ns] = float(value)
    return {key: sorted(points.items()) for key, points in found.items()}, bad


@st.composite
def bodies(draw):
    lines = []
    for _ in range(draw(st.integers(1, 40))):
        prefix = draw(st.sampled_from(PREFIXES))
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4))
        values = [draw(st.sampled_from(VALUES)) for _ in names]
        fields = ",".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
        stamp = draw(st.sampled_from(TIMES))
        lines.append(f"{prefix} {fields} {stamp}".rstrip(" ") if stamp else f"{prefix} {fields}")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(bodies(), st.sampled_from(["ns", "s"]))
def test_template_path_agrees_with_the_general_path(body, precision):
    expected, bad = reference(body, precision)
    parsed = parse_body(body, precision, now_ns=NOW)
    assert [error.line for error in parsed.errors] == bad
    assert series_of(parsed) == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(VALUES[:14]), min_size=2, max_size=2), st.integers(2, 30))
def test_repeated_agent_lines_agree_with_the_general_path(values, count):
    # many lines of one prefix and one field set: the case the template path is for
    body = "\n".join(
        f"disk,device=sda,host=n{i % 3} reads={values[0]},read_bytes={values[1]} {1000 + i}"
        for i in range(count)
    )
    expected, bad = reference(body, "ns")
    parsed = parse_body(body, "ns", now_ns=NOW)
    assert [error.line for error in parsed.errors] == bad
    assert series_of(parsed) == expected


@pytest.mark.parametrize(
    "value", ["1e-320", "-4.9e-324", "1e-400", "0e-400", "1.8e308", "2.2250738585072014e-308"]
)
def test_float_range_edges_in_repeated_lines_as_the_c_parser_reads_them(value):
    # strtod's range: subnormals, underflow to zero and overflow are refused; 0e-400 and the
    # smallest normal are fine (InfluxDB itself accepts subnormals: a known deviation)
    body = "\n".join(
        f"gpu,gpu=0,host=edge power_watts={value if i == 3 else '1e-05'} {i}" for i in range(8)
    )
    expected, bad = reference(body, "ns")
    parsed = parse_body(body, "ns", now_ns=NOW)
    assert [error.line for error in parsed.errors] == bad
    assert series_of(parsed) == expected
    assert bad == ([] if value in ("0e-400", "2.2250738585072014e-308") else [4])


@pytest.mark.parametrize(
    "value",
    [
        "-i",
        "1-2i",
        "-9223372036854775808i",
        "-9223372036854775809i",
        "18446744073709551615u",
        "18446744073709551616u",
        "0i",
        "-0i",
        "007i",
        "1.5i",
        "5",
    ],
)
def test_integer_columns_beside_long_integers_as_the_c_parser_reads_them(value):
    # the template path converts every integer column of a body at once: a bad or
    # out-of-range value among 19-digit counters, and a zero counter beside a gauge in
    # e-notation (the float range check), are read as the line-by-line parser reads them
    # (a "-i" among 19-digit values once raised ValueError out of the parse: a 500)
    unsigned = value.endswith("u")
    body = "\n".join(
        f"net,host=edge,interface=ib0 "
        f"{'rx_packets' if unsigned else 'rx_bytes'}="
        f"{value if i == 3 else ('9999999999999999999u' if unsigned else '9223372036854775807i')},"
        f"errors={'0i' if i % 2 else '12i'},util=1e-05 {1000 + i}"
        for i in range(6)
    )
    expected, bad = reference(body, "ns")
    parsed = parse_body(body, "ns", now_ns=NOW)
    assert [error.line for error in parsed.errors] == bad
    assert series_of(parsed) == expected
    valid = value in ("-9223372036854775808i", "18446744073709551615u", "0i", "-0i", "007i", "5")
    assert bad == ([] if valid else [4])
