"""A string field longer than a view can show (a 200 KB model name made the Runs page
2,244,243 px wide) is refused at ingest with its line number; the body's other lines are
stored."""

from __future__ import annotations

from collector.lineprotocol import parse_body
from contract.identifiers import MAX_STRING_FIELD_CHARS, string_field_problem


def _run_start(model: str, host: str = "n1") -> str:
    return f'workload,host={host},run_id=r,rank=0,framework=tf event="run_start",model="{model}" 2'


def test_a_200_kb_model_name_is_refused_with_its_line_number():
    body = "\n".join(["cpu,host=n1 user=1 1", _run_start("m" * 204800), _run_start("resnet50")])
    parsed = parse_body(body)
    assert [error.line for error in parsed.errors] == [2]
    assert "field 'model' is 204,800 characters, over the 1,024 a string field may hold" in str(
        parsed.errors[0]
    )
    assert [event.fields["model"] for event in parsed.events] == ["resnet50"]
    assert len(parsed.groups) == 1


def test_a_string_at_the_limit_is_stored():
    parsed = parse_body(_run_start("m" * MAX_STRING_FIELD_CHARS))
    assert parsed.errors == []
    assert len(parsed.events[0].fields["model"]) == MAX_STRING_FIELD_CHARS


def test_numbers_are_not_strings():
    assert string_field_problem({"images": 10**30, "model": "resnet50"}) is None
