"""The console's pure parts: the offset-line picture, the pages' escaping, the cost arithmetic."""

from __future__ import annotations

import pytest

from tieredlog.console.cost import MONTH_MS, monthly_cost
from tieredlog.console.model import (
    LocalSegment,
    PartitionView,
    Prices,
    RemoteSegment,
    Snapshot,
    TopicUsage,
    TopicView,
)
from tieredlog.console.offset_line import offset_line_svg
from tieredlog.console.render import overview_page, topic_page

S3 = Prices(0.023, 0.005, 0.0004)


def _view(**kw) -> PartitionView:
    base = dict(
        topic="t<x>", partition=0, is_leader=True, leader=0, leader_epoch=0, replicas=(0,), isr=(0,),
        log_start_offset=0, local_log_start_offset=100, high_watermark=250, last_stable_offset=240,
        log_end_offset=250, highest_offset_in_remote_storage=199, tiered=True,
        local_segments=(LocalSegment(100, 200, 1000, False, True), LocalSegment(200, 250, 500, True, False)),
        remote_segments=(RemoteSegment("a", 0, 99, 1000, "COPY_SEGMENT_FINISHED", 0),
                         RemoteSegment("b", 100, 199, 1000, "COPY_SEGMENT_FINISHED", 0)),
    )
    base.update(kw)
    return PartitionView(**base)  # type: ignore[arg-type]


def test_offset_line_draws_each_segment_on_one_offset_scale():
    svg = offset_line_svg(_view())
    assert svg.count('class="seg remote finished"') == 2
    assert svg.count('class="seg local tiered"') == 1 and svg.count('class="seg local active"') == 1
    # 0..250 over 1000 units: the second remote segment starts at 400, the active one at 800
    assert 'x="400.0" y="14" width="400.0"' in svg and 'data-base="200"' in svg
    assert "HW 250" in svg and "LSO 240" in svg and "local start 100" in svg
    assert "t&lt;x&gt;" in svg and "t<x>" not in svg


def test_an_empty_partition_still_draws():
    svg = offset_line_svg(_view(log_start_offset=0, local_log_start_offset=0, high_watermark=0, last_stable_offset=0,
                                log_end_offset=0, local_segments=(LocalSegment(0, 0, 0, True, False),),
                                remote_segments=()))
    assert svg.count('class="seg local active"') == 1


def test_monthly_cost_is_storage_plus_requests_extrapolated():
    usage = TopicUsage(puts=1000, gets=10_000, lists=1000, deletes=5)
    # a day of requests: 30 days of them a month; 50 GB stored
    cost = monthly_cost(S3, 50 * 10**9, usage, MONTH_MS // 30)
    assert cost.storage == pytest.approx(50 * 0.023)
    assert cost.requests == pytest.approx(30 * (2 * 0.005 + 10 * 0.0004))
    assert cost.total == pytest.approx(cost.storage + cost.requests)


def test_pages_render_from_a_snapshot_alone():
    snap = Snapshot(broker_id=0, cluster_id="c", taken_ms=120_000, started_ms=0, brokers=(), controller_id=0,
                    cluster_partitions=(), topics=(TopicView("t<x>", 1, 1, True, False, TopicUsage(puts=3)),),
                    partitions=(_view(),), groups=(), remote_tier=True, prices=S3)
    page = topic_page(snap, "t<x>")
    assert 'data-partition="t&lt;x&gt;-0"' in page and '<td data-field="high-watermark"' in page
    assert 'data-field="remote-segments">2<' in page
    assert '>3 / 0 / 0 / 0</td>' in overview_page(snap)
    assert 'data-field="not-found"' in topic_page(snap, "other")


def test_a_few_minutes_of_requests_are_priced_as_an_hour_of_them():
    usage = TopicUsage(puts=1000)
    assert monthly_cost(S3, 0, usage, 60_000).requests == monthly_cost(S3, 0, usage, 3_600_000).requests
    assert monthly_cost(S3, 0, usage, 3_600_000).requests == pytest.approx(720 * 0.005)


def test_charts_turn_counter_samples_into_rates():
    from tieredlog.console.charts import chart_svg
    from tieredlog.console.history import History, points

    totals = iter([{"bytes_in": 0.0, "loop_lag": 0.01}, {"bytes_in": 1000.0, "loop_lag": 0.02},
                   {"bytes_in": 500.0, "loop_lag": 0.0}])  # the last: a restart reset the counter
    h = History(lambda: next(totals))
    for at in (0.0, 10.0, 20.0):
        h.sample(at)
    assert points(h.samples(), "bytes_in") == [(10.0, 100.0), (20.0, 0.0)]
    assert points(h.samples(), "loop_lag") == [(0.0, 0.01), (10.0, 0.02), (20.0, 0.0)]
    svg = chart_svg("bytes_in", h.samples())
    assert "<polyline" in svg and 'data-field="chart-bytes_in-now">0 B/s<' in svg
    assert "collecting" in chart_svg("bytes_in", h.samples()[:1])
