"""Outputs a user can depend on: every file the toolkit writes and reads back names its schema."""

from __future__ import annotations

import json

import pytest

from shuffledp.accounting.ledger import event_of_report
from shuffledp.safe_io import (
    LOG_FORMAT,
    REPORT_SCHEMA,
    ChainedLog,
    TamperedLog,
    check_schema,
    write_report,
)


def test_report_json_names_its_schema_first(tmp_path):
    path = write_report(tmp_path, {"guarantee": {"epsilon": 1.0}})
    doc = json.loads(path.read_text())
    assert next(iter(doc)) == "schema" and doc["schema"] == REPORT_SCHEMA


@pytest.mark.parametrize("schema", ["shuffledp-report/2", "other/1"])
def test_a_later_or_foreign_schema_is_refused(schema):
    with pytest.raises(ValueError, match="schema='" + schema):
        check_schema({"schema": schema})
    with pytest.raises(ValueError, match="schema="):
        event_of_report({"schema": schema, "guarantee": {}}, "day1/report.json")


def test_a_report_without_schema_reads_as_version_1():
    check_schema({"guarantee": {}})  # written before versioning: same layout


def test_chained_log_head_names_its_format(tmp_path):
    log = ChainedLog(tmp_path / "l.jsonl")
    with log.locked() as lg:
        lg.append({"x": 1})
        lg.append({"x": 2})
    head = json.loads((tmp_path / "l.jsonl.head").read_text())
    assert head["format"] == LOG_FORMAT
    head["format"] = "shuffledp-chained-log/9"
    (tmp_path / "l.jsonl.head").write_text(json.dumps(head))
    with pytest.raises(TamperedLog, match="format"), log.locked():
        pass


def test_params_json_names_its_format():
    from shuffledp.grid import Grid
    from shuffledp.protocol.params import FORMAT_NAME, ProtocolParams, derive_params

    p = derive_params(Grid(8, 8), 50, epsilon=1.0, delta=1e-5, B=16)
    d = json.loads(p.to_json())
    assert d["format"] == FORMAT_NAME
    d["format"] = FORMAT_NAME.replace("/1", "/2")
    with pytest.raises(ValueError, match="format="):
        ProtocolParams.from_json(json.dumps(d))
