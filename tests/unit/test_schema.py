from contract import schema
from contract.point import Point, encode_line


def test_every_measurement_name_is_unique_and_fields_have_kinds():
    names = [m.NAME for m in schema.ALL_MEASUREMENTS]
    assert len(names) == len(set(names))
    for measurement in schema.ALL_MEASUREMENTS:
        for name, spec in measurement.fields().items():
            assert name == str(spec)
            assert spec.kind in schema.Kind


def test_prometheus_names_follow_conventions():
    assert (
        schema.prometheus_name(schema.Disk.NAME, schema.Disk.READ_BYTES)
        == "epochscope_disk_read_bytes_total"
    )
    assert (
        schema.prometheus_name(schema.Memory.NAME, schema.Memory.CACHED_BYTES)
        == "epochscope_memory_cached_bytes"
    )


def test_hw_counters_are_counters():
    spec = schema.field_spec(schema.Infiniband.NAME, "hw_rx_write_requests")
    assert spec is not None and spec.is_counter
    assert schema.field_spec(schema.Infiniband.NAME, "nonsense") is None


def test_line_protocol_escaping_and_types():
    point = Point(
        "disk",
        {"device": "my disk", "kind": "disk", "host": "a,b", "empty": ""},
        {
            "read_bytes": 512,
            "in_flight": 1.5,
            "note": 'say "hi"\\',
            "ok": True,
            "bad": float("nan"),
        },
        1700000000000000000,
    )
    assert encode_line(point) == (
        r"disk,device=my\ disk,host=a\,b,kind=disk read_bytes=512i,in_flight=1.5,"
        r'note="say \"hi\"\\",ok=true 1700000000000000000'
    )
    assert encode_line(Point("x", {}, {"bad": float("inf")}, 1)) == ""


def test_no_name_is_declared_twice_in_a_schema_class():
    # a second declaration silently replaces the first: its help text and unit are lost
    import ast
    from pathlib import Path

    import contract.schema

    tree = ast.parse(Path(contract.schema.__file__).read_text())
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = [
            target.id
            for statement in node.body
            if isinstance(statement, ast.Assign)
            for target in statement.targets
            if isinstance(target, ast.Name)
        ]
        duplicates = {name for name in names if names.count(name) > 1}
        assert not duplicates, f"{node.name}: {sorted(duplicates)}"
