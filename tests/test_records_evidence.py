"""Reading outside evidence: the framework's pmctrace NDJSON and measurement CSVs.
Every malformed file is an InputError naming the file, line and field."""

from __future__ import annotations

import pytest

from dse.errors import InputError
from dse.records.evidence import parse_evidence


def metrics_of(parsed, scope="total"):
    return {(m["name"], m["scope_key"]): m["value"] for m in parsed.metrics if m["scope"] == scope}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_pmctrace_lines_as_in_the_hardware_notes_without_type_or_clk(tmp_path):
    # HARDWARE.md's form: no "type", no "clk" -> busy cycles and counts, but no latency.
    path = write(tmp_path, "trace.jsonl", "\n".join([
        '{"event":"ball","ball_id":0,"rob_id":3,"elapsed":412}',
        '{"event":"ball","ball_id":1,"rob_id":4,"elapsed":100}',
        '{"event":"store","rob_id":5,"elapsed":7}',
    ]))  # fmt: skip
    parsed = parse_evidence(path, "rtl_cycles")
    assert parsed.format == "pmctrace" and parsed.role == "trace"
    totals = metrics_of(parsed)
    assert "latency_cycles" not in {name for name, _ in totals}
    assert totals[("ball_busy_cycles", "")] == 512 and totals[("ball_ops", "")] == 2
    assert totals[("store_busy_cycles", "")] == 7 and totals[("load_ops", "")] == 0
    assert metrics_of(parsed, "ball")[("busy_cycles", "1")] == 100
    assert {m["kind"] for m in parsed.metrics} == {"rtl_cycles"}
    assert parsed.summary == {"pmctrace_lines": 3, "other_lines_skipped": 0, "balls": 2}


def test_format_is_guessed_from_content_when_the_name_says_nothing(tmp_path):
    trace = write(tmp_path, "bdb", '{"type":"pmctrace","clk":9,"event":"load","rob_id":0,"elapsed":9}\n')
    assert parse_evidence(trace, "fpga_cycles").format == "pmctrace"
    table = write(tmp_path, "measured", "name,value\nlatency_cycles,12\n")
    assert parse_evidence(table, "fpga_cycles").format == "csv"
    # An explicit format wins over the extension.
    assert parse_evidence(write(tmp_path, "x.txt", "name,value\na,1\n"), "rtl_cycles", "csv").format == "csv"


@pytest.mark.parametrize("body, field, allowed", [
    ('{"type":"pmctrace","event":"ball","rob_id":1,"elapsed":5}', "line 2: ball_id", "whole number"),
    ('{"type":"pmctrace","event":"ball","ball_id":0,"rob_id":1,"elapsed":true}', "line 2: elapsed", "whole number"),
    ('{"type":"pmctrace","event":"ball","ball_id":0,"rob_id":1,"elapsed":1.5}', "line 2: elapsed", "whole number"),
    ('{"type":"pmctrace","event":"fence","rob_id":1,"elapsed":1}', "line 2: event", "ball, load, store"),
    ('{"type":"pmctrace","event":"ball",', "line 2", "one JSON object per line"),
    ('[1, 2]', "line 2", "one JSON object per line"),
])  # fmt: skip
def test_malformed_pmctrace_names_line_and_field(tmp_path, body, field, allowed):
    path = write(tmp_path, "t.ndjson", '{"type":"itrace","clk":1}\n' + body + "\n")
    with pytest.raises(InputError) as caught:
        parse_evidence(path, "rtl_cycles")
    assert caught.value.file == str(path)
    assert caught.value.field == field
    assert allowed in caught.value.allowed
    assert "\n" not in str(caught.value)


def test_a_trace_with_no_pmctrace_lines_is_refused(tmp_path):
    path = write(tmp_path, "t.ndjson", '{"type":"itrace","clk":1,"event":"issue"}\n\n')
    with pytest.raises(InputError, match="pmctrace lines"):
        parse_evidence(path, "rtl_cycles")
    with pytest.raises(InputError, match="FILE"):
        parse_evidence(write(tmp_path, "empty", "   \n"), "rtl_cycles")
    binary = tmp_path / "b.ndjson"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="UTF-8"):
        parse_evidence(binary, "rtl_cycles")


def test_csv_measurements_with_defaults_scopes_and_comments(tmp_path):
    path = write(tmp_path, "fpga.csv", "\n".join([
        "# board: vcu118, 100 MHz",
        "Name,Value,Unit,Scope,Scope_Key",
        "latency_cycles,123456,,,",
        "",
        "cycles,4000,cycles,core,0",
        "cycles,4100,cycles,core,1",
        "wall_time,1.5e-3,s,total,",
    ]))  # fmt: skip
    parsed = parse_evidence(path, "fpga_cycles")
    assert (parsed.format, parsed.role, parsed.media_type) == ("csv", "measurements", "text/csv")
    by_key = {(m["name"], m["scope"], m["scope_key"]): (m["value"], m["unit"]) for m in parsed.metrics}
    assert by_key == {
        ("latency_cycles", "total", ""): (123456.0, "cycles"),
        ("cycles", "core", "0"): (4000.0, "cycles"),
        ("cycles", "core", "1"): (4100.0, "cycles"),
        ("wall_time", "total", ""): (0.0015, "s"),
    }


@pytest.mark.parametrize("text, field, allowed", [
    ("metric,value\nx,1\n", "line 1: header", "columns name, value"),
    ("name,value,board\nx,1,a\n", "line 1: header", "columns name, value"),
    ("name,value\nx,fast\n", "line 2: value", "a finite number"),
    ("name,value\nx,nan\n", "line 2: value", "a finite number"),
    ("name,value\n,1\n", "line 2: name", "non-empty"),
    ("name,value\nx,1,2\n", "line 2", "2 cells"),
    ("name,value,scope\nx,1,chip\n", "line 2: scope", "total, op, core, ball, bank"),
    ("name,value,scope\nx,1,core\n", "line 2: scope_key", "empty for scope 'total'"),
    ("name,value\nx,1\nx,2\n", "line 3: name", "also on line 2"),
    ("name,value\n", "rows", "at least one"),
])  # fmt: skip
def test_malformed_csv_names_line_and_field(tmp_path, text, field, allowed):
    path = write(tmp_path, "m.csv", text)
    with pytest.raises(InputError) as caught:
        parse_evidence(path, "fpga_cycles")
    assert caught.value.field == field
    assert allowed in caught.value.allowed


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(InputError, match="--format"):
        parse_evidence(write(tmp_path, "m.csv", "name,value\nx,1\n"), "fpga_cycles", "xlsx")
