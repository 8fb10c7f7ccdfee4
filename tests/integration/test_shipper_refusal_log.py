"""A collector that refuses a line of every batch (a bad tag the agent keeps sending) used
to cost an ERROR line per batch (~17,000 a day per node); now one line per 10 minutes, the
refusals in between counted into the next. The endpoint is a real loopback HTTP server
answering the collector's partial-write 400; the dropped points are still all counted."""

from __future__ import annotations

import logging

import pytest

from agent import shipper as shipper_module
from agent.shipper import Shipper
from tests.integration.test_agent_shipper import Endpoint, points_for

PARTIAL = (
    b'{"code":"invalid","message":"partial write: 2 points written, 1 line(s) rejected: '
    b"line 1: tag 'process' holds a control character\"}"
)


@pytest.fixture
def refusing_endpoint():
    server = Endpoint()
    server.status = 400
    server.error_body = PARTIAL
    yield server
    server.stop()


def _refusal_lines(caplog) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.ERROR and "refused 1 of 3 lines" in record.getMessage()
    ]


def test_twenty_refused_batches_log_one_error_line(refusing_endpoint, tmp_path, caplog):
    endpoint = refusing_endpoint
    shipper = Shipper(endpoint.url, "t", "o", "b", tmp_path / "spool", backoff_max_seconds=0.2)
    with caplog.at_level(logging.INFO):
        shipper.start()
        for tick in range(20):
            shipper.submit(points_for(tick))
            assert shipper.flush(10)
        assert len(_refusal_lines(caplog)) == 1
        # once the interval has passed, the next refusal is logged with the count held back
        shipper._refusals_log.interval_seconds = 0.0
        shipper.submit(points_for(20))
        assert shipper.flush(10)
    shipper.close()
    assert len(endpoint.requests) == 21
    assert shipper.queue.spool.points_dropped == 21
    lines = _refusal_lines(caplog)
    assert len(lines) == 2
    assert lines[1].endswith("(and 19 more like it in the last 0 s)")
    assert shipper_module.REFUSED_LOG_SECONDS == 600.0
