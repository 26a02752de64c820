"""The console's pages as server-rendered HTML. Pure functions of a Snapshot: no broker access, no I/O.

Every number a test or a script may want carries a ``data-field`` attribute, and every row a
``data-*`` key, so the page reads the same to a browser and to a test.
"""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote

from tieredlog.console.charts import charts_section
from tieredlog.console.cost import monthly_cost
from tieredlog.console.model import GroupView, PartitionView, Snapshot, TopicView
from tieredlog.console.offset_line import fmt_bytes, offset_line_svg
from tieredlog.console.static import CSS, SCRIPT

BASE = "/console"


def _td(field: str, value: object, title: str = "") -> str:
    t = f' title="{escape(title)}"' if title else ""
    return f'<td data-field="{field}"{t}>{escape(str(value))}</td>'


def _ms(ms: int | None) -> str:
    if ms is None:
        return "—"
    s = ms / 1000
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.01 or x == 0 else f"${x:.4f}"


def topic_href(name: str) -> str:
    return f"{BASE}/topic/{quote(name, safe='')}"


def group_href(group_id: str) -> str:
    return f"{BASE}/group/{quote(group_id, safe='')}"


def page(snapshot: Snapshot, title: str, body: str) -> str:
    taken = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snapshot.taken_ms / 1000))
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)} · tieredlog broker {snapshot.broker_id}</title>"
        f"<style>{CSS}</style></head><body>"
        f'<header><a class="home" href="{BASE}">tieredlog</a> <span>broker {snapshot.broker_id}</span>'
        f' <span class="muted">cluster {escape(snapshot.cluster_id)}</span>'
        f' <span class="muted" data-field="taken">{taken}</span>'
        ' <label class="muted"><input type="checkbox" id="auto-refresh" checked> refresh every 5 s</label>'
        f' <a class="muted" href="/metrics">/metrics</a></header>'
        f'<main id="main">{body}</main><script>{SCRIPT}</script></body></html>'
    )


def _cluster_section(s: Snapshot) -> str:
    offline = [p for p in s.cluster_partitions if p.offline]
    urp = [p for p in s.cluster_partitions if p.under_replicated]
    under_min = [p for p in s.cluster_partitions if p.under_min_isr]
    rows = "".join(
        f'<tr data-broker="{b.broker_id}"><td>{b.broker_id}{" (this broker)" if b.is_self else ""}</td>'
        f"<td>{escape(b.host)}:{b.port}</td><td>{escape(b.rack or '')}</td>"
        f"<td>{'controller' if b.is_controller else ''}</td></tr>"
        for b in s.brokers)

    def flag(name: str, field: str, parts: list) -> str:
        css = "bad" if parts else "ok"
        names = ", ".join(f"{p.topic}-{p.partition}" for p in parts[:20]) + (" …" if len(parts) > 20 else "")
        return (f'<div class="stat {css}"><div class="num" data-field="{field}">{len(parts)}</div>'
                f'<div>{name}</div><div class="muted small">{escape(names)}</div></div>')

    return (
        "<section><h2>Cluster</h2>"
        f'<div class="stats"><div class="stat"><div class="num" data-field="brokers">{len(s.brokers)}</div><div>brokers</div></div>'
        f'<div class="stat"><div class="num" data-field="controller">{"—" if s.controller_id is None else s.controller_id}'
        "</div><div>controller</div></div>"
        f'<div class="stat"><div class="num" data-field="partitions">{len(s.cluster_partitions)}</div><div>partitions</div></div>'
        + flag("offline", "offline", offline) + flag("under-replicated", "under-replicated", urp)
        + flag("under min ISR", "under-min-isr", under_min) + "</div>"
        f"<table><tr><th>broker</th><th>endpoint</th><th>rack</th><th></th></tr>{rows}</table></section>"
    )


def _topic_row(s: Snapshot, t: TopicView) -> str:
    parts = s.partitions_of(t.name)
    led = [p for p in parts if p.is_leader]
    local = sum(p.local_bytes for p in parts)
    remote = sum(p.remote_bytes for p in led)
    lag = sum(p.tiering_lag.bytes for p in led if p.tiering_lag is not None)
    cost = monthly_cost(s.prices, remote, t.usage, s.taken_ms - s.started_ms)
    u = t.usage
    return (
        f'<tr data-topic="{escape(t.name)}"><td><a href="{topic_href(t.name)}">{escape(t.name)}</a></td>'
        + _td("partitions", t.partitions) + _td("replication-factor", t.replication_factor)
        + _td("tiered", "yes" if t.tiered else "no") + _td("led-here", len(led))
        + _td("local-bytes", fmt_bytes(local)) + _td("remote-bytes", fmt_bytes(remote) if t.tiered else "—")
        + _td("tiering-lag-bytes", fmt_bytes(lag) if t.tiered else "—")
        + _td("requests", f"{u.puts} / {u.gets} / {u.lists} / {u.deletes}" if t.tiered else "—",
              "PUT / GET / LIST / DELETE counted since this broker started")
        + _td("monthly-cost", _money(cost.total) if t.tiered else "—",
              f"storage {_money(cost.storage)} + requests {_money(cost.requests)} a month")
        + "</tr>"
    )


def _topics_section(s: Snapshot) -> str:
    rows = "".join(_topic_row(s, t) for t in s.topics if not t.internal)
    internal = "".join(_topic_row(s, t) for t in s.topics if t.internal)
    head = ("<tr><th>topic</th><th>partitions</th><th>RF</th><th>tiered</th><th>led here</th><th>local</th>"
            "<th>remote</th><th>tiering lag</th><th>PUT / GET / LIST / DELETE</th><th>est. $/month</th></tr>")
    return (
        "<section><h2>Topics</h2>"
        '<p class="muted small">Local bytes of the partitions hosted here; remote bytes, tiering lag and cost of '
        "the partitions led here. Cost: remote bytes at the storage price plus the requests since start-up "
        "(at least an hour's worth) extrapolated to 30 days.</p>"
        f"<table>{head}{rows}</table>"
        f"<details><summary>internal topics</summary><table>{head}{internal}</table></details></section>"
    )


def _groups_section(s: Snapshot) -> str:
    rows = "".join(
        f'<tr data-group="{escape(g.group_id)}"><td><a href="{group_href(g.group_id)}">{escape(g.group_id)}</a></td>'
        + _td("protocol", g.protocol) + _td("state", g.state) + _td("members", len(g.members))
        + _td("lag", "—" if g.total_lag is None else g.total_lag)
        + _td("from-remote", sum(1 for o in g.offsets if o.from_remote)) + "</tr>"
        for g in s.groups)
    return (
        "<section><h2>Consumer groups</h2>"
        '<p class="muted small">Groups coordinated by this broker.</p>'
        "<table><tr><th>group</th><th>protocol</th><th>state</th><th>members</th><th>lag</th>"
        f"<th>partitions read from the remote tier</th></tr>{rows}</table></section>"
    )


def overview_page(s: Snapshot) -> str:
    return page(s, "overview", _cluster_section(s) + charts_section(s.history) + _topics_section(s) + _groups_section(s))


def _partition_block(p: PartitionView) -> str:
    lag = p.tiering_lag
    replicas = ", ".join(str(r) for r in p.replicas)
    followers = "; ".join(f"{f.broker_id}: log end {f.log_end_offset}{'' if f.in_sync else ' (out of sync)'}"
                          for f in p.followers)
    remote = [seg for seg in p.remote_segments if seg.state == "COPY_SEGMENT_FINISHED"]
    cells = (
        _td("leader", p.leader) + _td("leader-epoch", p.leader_epoch) + _td("replicas", replicas)
        + _td("isr", ", ".join(str(r) for r in p.isr))
        + _td("log-start", p.log_start_offset, "ListOffsets -2: the oldest offset, remote or local")
        + _td("local-start", p.local_log_start_offset, "ListOffsets -4: the first local offset")
        + _td("high-watermark", p.high_watermark, "ListOffsets -1") + _td("lso", p.last_stable_offset)
        + _td("log-end", p.log_end_offset)
        + _td("remote-end", p.highest_offset_in_remote_storage, "ListOffsets -5: the last tiered offset")
        + _td("remote-segments", len(remote)) + _td("local-segments", p.local_segment_count)
        + _td("tiered-local-segments", sum(1 for seg in p.local_segments if seg.tiered))
        + _td("remote-bytes", fmt_bytes(p.remote_bytes)) + _td("local-bytes", fmt_bytes(p.local_bytes))
        + _td("tiering-lag-bytes", "—" if lag is None else lag.bytes)
        + _td("tiering-lag-segments", "—" if lag is None else lag.segments)
        + _td("tiering-lag-time", "—" if lag is None else _ms(lag.oldest_ms))
    )
    head = ("<tr><th>leader</th><th>epoch</th><th>replicas</th><th>ISR</th><th>log start</th><th>local start</th>"
            "<th>HW</th><th>LSO</th><th>log end</th><th>last tiered</th><th>remote segs</th><th>local segs</th>"
            "<th>local, also remote</th><th>remote</th><th>local</th><th>tiering lag (B)</th><th>(segs)</th>"
            "<th>(age)</th></tr>")
    note = f'<p class="muted small">{escape(p.remote_note)}</p>' if p.remote_note else ""
    role = "leader" if p.is_leader else "follower"
    return (
        f'<div class="partition" data-partition="{escape(p.name)}"><h3>{escape(p.name)} '
        f'<span class="muted small">{role} here</span></h3>'
        f"<table>{head}<tr>{cells}</tr></table>{note}"
        + (f'<p class="small">followers: <span data-field="followers">{escape(followers)}</span></p>' if followers else "")
        + offset_line_svg(p) + "</div>"
    )


_LEGEND = (
    '<p class="legend small"><span class="key finished"></span> remote segment <span class="key copying"></span> '
    'being copied <span class="key deleting"></span> being deleted <span class="key local"></span> local only '
    '<span class="key tiered"></span> local, also remote <span class="key active"></span> active segment</p>'
)


def topic_page(s: Snapshot, name: str) -> str:
    t = s.topic(name)
    if t is None:
        return not_found_page(s, f"no topic {name} on this broker")
    parts = s.partitions_of(name)
    others = sorted({cp.leader for cp in s.cluster_partitions if cp.topic == name} - {s.broker_id})
    elsewhere = (f'<p class="muted small">Partitions led by broker(s) {", ".join(map(str, others))} show their '
                 "remote tier on those brokers' consoles.</p>") if others else ""
    body = (
        f'<section><h2>Topic {escape(name)}</h2><p>{t.partitions} partition(s), replication factor '
        f"{t.replication_factor}, {'tiered' if t.tiered else 'local only'}; {len(parts)} hosted here.</p>"
        + elsewhere + _LEGEND + "".join(_partition_block(p) for p in parts) + "</section>"
    )
    return page(s, f"topic {name}", body)


def _group_body(g: GroupView) -> str:
    members = "".join(
        f"<tr><td>{escape(m.member_id)}</td><td>{escape(m.client_id)}</td><td>{escape(m.client_host)}</td>"
        f"<td>{escape(', '.join(f'{t}-{p}' for t, p in m.assigned))}</td></tr>" for m in g.members)
    offsets = "".join(
        f'<tr data-partition="{escape(o.topic)}-{o.partition}"{" class=remote" if o.from_remote else ""}>'
        f"<td>{escape(o.topic)}-{o.partition}</td>" + _td("committed", o.committed)
        + _td("high-watermark", "—" if o.high_watermark is None else o.high_watermark)
        + _td("lag", "—" if o.lag is None else o.lag)
        + _td("from-remote", "remote tier" if o.from_remote else ("local" if o.lag is not None else "—")) + "</tr>"
        for o in g.offsets)
    return (
        f"<section><h2>Group {escape(g.group_id)}</h2><p>{g.protocol} protocol, state {escape(g.state)}</p>"
        "<h3>Members</h3><table><tr><th>member</th><th>client id</th><th>host</th><th>assigned</th></tr>"
        f"{members}</table><h3>Committed offsets</h3>"
        '<p class="muted small">Lag against the high watermark of the partitions led here; '
        "&ldquo;remote tier&rdquo;: the next offset is below the local log start, so it is read from the "
        "object store.</p>"
        "<table><tr><th>partition</th><th>committed</th><th>HW</th><th>lag</th><th>read from</th></tr>"
        f"{offsets}</table></section>"
    )


def group_page(s: Snapshot, group_id: str) -> str:
    g = s.group(group_id)
    if g is None:
        return not_found_page(s, f"no group {group_id} coordinated by this broker")
    return page(s, f"group {group_id}", _group_body(g))


def not_found_page(s: Snapshot, what: str) -> str:
    return page(s, "not found", f'<section><h2>Not found</h2><p data-field="not-found">{escape(what)}</p></section>')
