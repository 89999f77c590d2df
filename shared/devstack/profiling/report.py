"""Render a recorded profile run as a self-contained HTML report (charts inline as PNG).

The page opens with who the load ran as (tenant and key) and the scenario in force beside its
defaults, then the headline from the requests' critical paths, each pool's own stack, and every
chart; a chart without data shows why in its place. Figures: analysis.py; charts: plots.py.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .analysis import OUTSIDE, analyse
from .plots import PLOTS, Chart, plots
from .scenarios import ROW_OF, SCENARIOS, Scenario, describe

__all__ = ["PLOTS", "analyse", "render", "write"]

STYLE = """body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px}
td,th{padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
table{border-collapse:collapse;margin:8px 0}tr:nth-child(even){background:#f4f4f4}
figure{display:inline-block;margin:8px;vertical-align:top;max-width:100%}img{max-width:100%}
figure.nodata{border:1px dashed #999;padding:12px;width:460px;background:#fafafa}
.reason{color:#a33}.note{color:#555;font-size:90%}.bad{color:#c00;font-weight:bold}"""

CAPTIONS = {
    "stages": "Where the time goes, per pool",
    "ttft": "Time to first token",
    "itl": "Inter-token latency",
    "throughput": "Throughput",
    "lag": "Consumer lag and engine queue",
    "cache": "Cache hits",
    "adapters": "Adapters",
    "pools": "Requests per pool",
}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _figure(name: str, c: Chart) -> str:
    note = f'<p class="note">{_e(c.note)}</p>' if c.note else ""
    cap = f"<figcaption><b>{_e(CAPTIONS[name])}</b>{note}</figcaption>"
    if c.png is None:
        return (
            f'<figure id="plot-{name}" class="nodata">{cap}'
            f'<p class="reason">No data: {_e(c.reason)}</p></figure>'
        )
    return f'<figure id="plot-{name}"><img alt="{name}" src="data:image/png;base64,{c.png}">{cap}</figure>'


def _client(run: dict[str, Any]) -> str:
    c = run.get("client")
    if not c:
        return '<p id="client">Tenant and API key: not recorded in this run.</p>'
    return (
        f'<p id="client">Sent as tenant <b>{_e(c.get("tenant"))}</b> with API key '
        f"<code>{_e(c.get('api_key'))}</code> ({_e(c.get('source'))}) to {_e(run.get('gateway'))}.</p>"
    )


def _scenario(run: dict[str, Any]) -> str:
    """The scenario in force beside the named scenario's defaults, and what changed them."""
    sc = Scenario.model_validate(run["scenario"])
    named = SCENARIOS.get(sc.name)
    over = run.get("overrides") or {}  # field -> the flag that set it
    changed: dict[str, list[str]] = {}
    for field, flag in over.items():
        changed.setdefault(ROW_OF.get(field, field), []).append(flag)
    now, dflt = describe(sc), describe(named) if named else {}
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td><td>{_e(dflt.get(k, '-'))}</td>"
        f"<td>{_e(', '.join(sorted(set(changed.get(k, [])))))}</td></tr>"
        for k, v in now.items()
    )
    return (
        f'<h2 id="scenario">Scenario <code>{_e(sc.name)}</code></h2>'
        "<table><tr><th>setting</th><th>this run</th><th>scenario default</th><th>changed by</th></tr>"
        f"{rows}</table>"
    )


def _headline(a: dict[str, Any]) -> str:
    h = a["headline"]
    top = h["top"]
    if not top:
        return '<p id="dominant">Where the time goes: no completed request carried a breakdown.</p>'
    rest = ", ".join(
        f"{_e(r['stage'])} {r['ms_per_request']:.1f} ms ({r['share_of_requests']:.0%} of requests)"
        for r in h["critical_path"][1:4]
    )
    slow = h["slowest_1pct"]
    return f"""<p id="dominant">Where the time goes, over the critical paths of the {h["requests_counted"]}
completed requests (of {h["requests_sent"]} sent): <b>{_e(top["stage"])}</b>,
{top["ms_per_request"]:.1f} ms per request sent ({top["share_of_time"]:.0%} of all their time; it is on the
path of {top["share_of_requests"]:.0%} of requests, {top["ms_when_present"]:.1f} ms each). Then {rest}.
The slowest {slow["n"]} request(s) spend most time in <b>{_e(slow["stage"])}</b>
({slow["share_of_time"]:.0%} of theirs).</p>"""


def _tables(a: dict[str, Any]) -> str:
    path = "".join(
        f"<tr><td>{_e(r['stage'])}</td><td>{r['ms_per_request']}</td><td>{r['share_of_time']:.1%}</td>"
        f"<td>{r['share_of_requests']:.0%}</td><td>{r['ms_when_present']}</td></tr>"
        for r in a["headline"]["critical_path"]
    )
    pools = "".join(
        f"<tr><td>{_e(k)}</td><td>{p['requests']}</td><td>{p['check']['stack_ms']}</td>"
        f'<td>{p["e2e_ms"]["p50"]}</td><td class="{"" if p["check"]["within_tolerance"] else "bad"}">'
        f"{p['check']['diff_pct']:+.1f}%</td><td>{p['e2e_ms']['p99']}</td></tr>"
        for k, p in a["pools"].items()
    )
    stages = "".join(
        f"<tr><td>{_e(k)}</td><td>{v['n']}</td><td>{v['p50_ms']}</td><td>{v['p99_ms']}</td><td>{v['mean_ms']}</td></tr>"
        for k, v in a["stages"].items()
    )
    return f"""<h2>Critical path, over every completed request</h2>
<table id="critical-path"><tr><th>stage</th><th>ms per request</th><th>share of time</th><th>share of requests</th>
<th>ms when on the path</th></tr>{path}</table>
<p class="note">"{OUTSIDE}": what the client measured beyond the reply's breakdown rows (HTTP, streaming).</p>
<h2>Per pool: the median requests' stack against the measured median</h2>
<table id="pool-stacks"><tr><th>pool</th><th>requests</th><th>median requests' stack ms</th><th>measured e2e p50 ms</th>
<th>difference</th><th>measured e2e p99 ms</th></tr>{pools}</table>
<h2>Stages, over the requests that went through each</h2>
<table id="stages"><tr><th>stage</th><th>requests</th><th>p50 ms</th><th>p99 ms</th><th>mean ms</th></tr>{stages}</table>"""


def _missing(trace: dict[str, Any]) -> str:
    gone = trace.get("missing") or []
    return f" (named by the worker but not found here: {_e(', '.join(gone))})" if gone else ""


def _trace(a: dict[str, Any]) -> str:
    trace = a.get("engine_trace")
    if not trace:
        return ""
    links = " ".join(f'<a href="{_e(u)}">{_e(u)}</a>' for u in trace.get("links", []))
    ops = "".join(
        f"<tr><td>{_e(t['category'])}</td><td style='text-align:left'>{_e(t['name'])}"
        f"</td><td>{t['self_ms']}</td><td>{t['total_ms']}</td><td>{t['calls']}</td></tr>"
        for t in trace.get("top", [])
    )
    return f"""<h2 id="engine-trace">Engine trace ({trace.get("window_s")} s window)</h2>
<p>torch profiler trace of the vLLM engine (open in https://ui.perfetto.dev): {links or "no trace file was found"}{_missing(trace)}.
CPU-GPU syncs: {trace["cpu_gpu_sync"]["calls"] if "cpu_gpu_sync" in trace else 0}.</p>
<table><tr><th>category</th><th>name</th><th>self ms</th><th>total ms</th><th>calls</th></tr>{ops}</table>"""


def render(run: dict[str, Any], a: dict[str, Any]) -> str:
    charts = plots(run, a)
    figs = "".join(_figure(k, charts[k]) for k in PLOTS)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Switchyard profile: {_e(a["scenario"])}</title>
<style>{STYLE}</style></head><body>
<h1>Switchyard profile: {_e(a["scenario"])}</h1>
{_client(run)}
{_scenario(run)}
{_headline(a)}
<p id="summary">{a["completed"]} of {a["requests"]} requests completed in {a["duration_s"]} s: {a["requests_per_s"]} req/s,
{a["tokens_per_s"]} tokens/s; e2e p50/p99 {a["e2e_ms"]["p50"]}/{a["e2e_ms"]["p99"]} ms (all pools together); TTFT p50/p99
{a["ttft_ms"]["p50"]}/{a["ttft_ms"]["p99"]} ms; ITL p50/p99 {a["itl_ms"]["p50"]}/{a["itl_ms"]["p99"]} ms;
cache hit rate {a["cache_hit_rate"]:.1%}; adapter loads {a["adapter_loads"]}; engine preemptions
{a["preemptions"]}; service exits {_e(json.dumps(a["service_exits"]))}
(SIGKILL, most often the OOM killer: {a["oom_kills_suspected"]}); errors {_e(json.dumps(a["errors"]))}.</p>
{figs}
{_tables(a)}
{_trace(a)}
<h2>Figures (JSON)</h2><pre>{_e(json.dumps(a, indent=2, ensure_ascii=False))}</pre></body></html>"""


def write(run: dict[str, Any], out: Path) -> tuple[Path, dict[str, Any]]:
    a = analyse(run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(a, indent=2))
    path = out / "report.html"
    path.write_text(render(run, a))
    return path, a
