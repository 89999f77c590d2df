"""Analyse a recorded profile run and render a self-contained HTML report (plots inline as PNG).

Pure functions of the run (runner.py's output): `analyse(run)` gives the figures and names the
dominant stage ("where the time goes") at p50 and p99; `render(run, analysis)` draws the plots.
Stage names: Kafka hops are `hop:<topic>` (queue wait: consume time − produce time), the rest are
the stages' own rows (gateway_accept, preprocess, cache, router, vllm_worker, gateway_reply, …);
rows with a parent (ttft, decode, cache_embed, adapter_load, …) refine their parent and are
reported apart, never added twice.
"""

from __future__ import annotations

import base64
import html
import io
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

PLOTS = ("stages", "ttft", "itl", "throughput", "lag", "cache", "adapters", "pools")


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


def _stages(rec: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Top-level stage durations and refinements (child rows) of one request, in ms."""
    top: dict[str, float] = defaultdict(float)
    sub: dict[str, float] = defaultdict(float)
    for row in (rec.get("switchyard") or {}).get("breakdown", []):
        name = f"hop:{row.get('topic', '?')}" if row["stage"] == "queue" else row["stage"]
        (sub if "parent" in row else top)[name] += float(row["duration_ms"])
    return dict(top), dict(sub)


def _itl(rec: dict[str, Any]) -> list[float]:
    for row in (rec.get("switchyard") or {}).get("breakdown", []):
        if row["stage"] == "decode" and row.get("itl_ms"):
            return [float(x) for x in str(row["itl_ms"]).split(",") if x]
    return []


def _ok(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The requests that completed (200, no error)."""
    return [r for r in run["requests"] if r["status"] == 200 and "error" not in r]


def _stage_figures(ok: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Per stage (in first-seen order) and per refinement: p50/p99; the dominant stage at p50 and p99."""
    per_stage: dict[str, list[float]] = defaultdict(list)
    per_sub: dict[str, list[float]] = defaultdict(list)
    stage_order: list[str] = []
    for r in ok:
        top, sub = _stages(r)
        for k, v in top.items():
            per_stage[k].append(v)
            if k not in stage_order:
                stage_order.append(k)
        for k, v in sub.items():
            per_sub[k].append(v)
    stages = {
        k: {
            "p50_ms": pct(v, 0.5),
            "p99_ms": pct(v, 0.99),
            "mean_ms": round(statistics.fmean(v), 3),
            "n": len(v),
        }
        for k, v in ((k, per_stage[k]) for k in stage_order)
    }
    dominant_p50 = max(stages, key=lambda k: stages[k]["p50_ms"] or 0) if stages else None
    # p99: the slowest 1% of requests (at least one): which stage holds most of their time.
    slow = sorted(ok, key=lambda r: r["e2e_ms"])[-max(1, len(ok) // 100) :] if ok else []
    slow_sum: Counter[str] = Counter()
    for r in slow:
        slow_sum.update(_stages(r)[0])
    dominant_p99 = slow_sum.most_common(1)[0][0] if slow_sum else None
    refinements = {
        k: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "n": len(v)} for k, v in per_sub.items()
    }
    return stages, refinements, {"p50": dominant_p50, "p99": dominant_p99}


def _health(run: dict[str, Any]) -> dict[str, Any]:
    """Engine preemptions over the run, and the services' restarts by cause."""
    preempt = [
        v
        for smp in run["samples"]
        for k, v in (smp.get("series") or {}).items()
        if k.startswith("vllm:num_preemptions")
    ]
    exits = {n: e for n, e in (run.get("service_exits") or {}).items() if e}
    return {
        "preemptions": (max(preempt) - min(preempt)) if preempt else None,
        "service_exits": exits,
        "oom_kills_suspected": sum(e.get("SIGKILL", 0) for e in exits.values()),
    }


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    reqs = run["requests"]
    ok = _ok(run)
    span = max(run["finished"] - run["started"], 1e-9)
    stages, refinements, dominant = _stage_figures(ok)
    e2e = [r["e2e_ms"] for r in ok]
    ttft = [r["ttft_ms"] for r in ok if r["ttft_ms"] is not None]
    hits = [r for r in ok if ((r.get("switchyard") or {}).get("cache") or {}).get("hit")]
    itl = [x for r in ok for x in _itl(r)]
    pools = Counter((r.get("switchyard") or {}).get("pool") or ("cache" if r in hits else "?") for r in ok)
    errors = Counter(str(r.get("error") or r["status"])[:80] for r in reqs if r not in ok)
    covered = [
        (r["switchyard"]["e2e_ms"], r["switchyard"]["stages_total_ms"])
        for r in ok
        if (r.get("switchyard") or {}).get("e2e_ms")
    ]
    return {
        "scenario": run["scenario"]["name"],
        **_health(run),
        "duration_s": round(span, 2),
        "requests": len(reqs),
        "completed": len(ok),
        "failed": len(reqs) - len(ok),
        "errors": dict(errors.most_common(10)),
        "requests_per_s": round(len(ok) / span, 3),
        "tokens_per_s": round(sum(r["tokens"] for r in ok) / span, 1),
        "e2e_ms": {"p50": pct(e2e, 0.5), "p99": pct(e2e, 0.99)},
        "ttft_ms": {"p50": pct(ttft, 0.5), "p99": pct(ttft, 0.99)},
        "itl_ms": {"p50": pct(itl, 0.5), "p99": pct(itl, 0.99), "n": len(itl)},
        "stages": stages,
        "refinements": refinements,
        "dominant_stage": dominant,
        "breakdown_coverage_ms": {
            "gap_p50": pct([e - s for e, s in covered], 0.5),
            "gap_max": round(max((abs(e - s) for e, s in covered), default=0.0), 3),
        },
        "cache_hit_rate": round(len(hits) / len(ok), 4) if ok else 0.0,
        "adapter_loads": sum(1 for r in ok if "adapter_load" in _stages(r)[1]),
        "pools": dict(pools),
        "engine_trace": run.get("engine_trace"),
    }


# --------------------------------------------------------------------------- plots


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _series(run: dict[str, Any], prefix: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in run["samples"]:
        for k, v in (s.get("series") or {}).items():
            if k.startswith(prefix):
                out[f"{s['service']}:{k}"].append((s["t"] - run["started"], v))
    return out


def _plot_stages(plt: Any, a: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    names = list(a["stages"])
    for i, q in enumerate(("p50_ms", "p99_ms")):
        left = 0.0
        for j, n in enumerate(names):
            v = a["stages"][n][q] or 0.0
            ax.barh(i, v, left=left, color=plt.cm.tab20(j % 20), label=n if i == 0 else None)
            left += v
    ax.set_yticks([0, 1], ["p50", "p99"])
    ax.set_xlabel("ms (stacked per stage; Kafka hops are hop:<topic>)")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title("Where the time goes")
    return _png(fig)


def _plot_hist(plt: Any, vals: list[float], title: str) -> str:
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(vals or [0], bins=40, color="tab:blue")
    ax.set_title(title)
    return _png(fig)


def _per_second(ok: list[dict[str, Any]], t0: float, value: Any) -> dict[int, list[int]]:
    """Per second of the run (by end time): [requests, sum of value(request)]."""
    bins: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in ok:
        b = bins[int(r["end"] - t0)]
        b[0] += 1
        b[1] += value(r)
    return bins


def _plot_throughput(plt: Any, ok: list[dict[str, Any]], t0: float) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    bins = _per_second(ok, t0, lambda r: r["tokens"])
    xs = sorted(bins)
    ax.plot(xs, [bins[x][1] for x in xs], label="tokens/s")
    ax2 = ax.twinx()
    ax2.plot(xs, [bins[x][0] for x in xs], color="tab:orange", label="requests/s")
    ax.set_xlabel("s")
    ax.set_title("Throughput over time (tokens/s, requests/s orange)")
    return _png(fig)


def _plot_lag(plt: Any, run: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    for k, pts in sorted(_series(run, "sy_consumer_lag").items()):
        if any(v for _, v in pts):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=k, lw=1)
    for k, pts in sorted(_series(run, "vllm:num_requests_waiting").items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", label=k, lw=1)
    ax.set_title("Consumer lag and engine queue over time")
    ax.set_xlabel("s")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)
    return _png(fig)


def _plot_cache(plt: Any, ok: list[dict[str, Any]], t0: float, rate: float) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    hit_bins = _per_second(
        ok, t0, lambda r: bool(((r.get("switchyard") or {}).get("cache") or {}).get("hit"))
    )
    xs = sorted(hit_bins)
    ax.plot(xs, [hit_bins[x][1] / hit_bins[x][0] for x in xs])
    ax.set_ylim(0, 1)
    ax.set_title(f"Cache hit rate over time (overall {rate:.1%})")
    return _png(fig)


def _plot_adapters(plt: Any, ok: list[dict[str, Any]], t0: float) -> str:
    fig, ax = plt.subplots(figsize=(7, 3))
    loads = sorted(r["end"] - t0 for r in ok if "adapter_load" in _stages(r)[1])
    ax.step(loads or [0], list(range(1, len(loads) + 1)) or [0], where="post")
    ax.set_title(f"Adapter loads (cumulative: {len(loads)})")
    return _png(fig)


def _plot_pools(plt: Any, ok: list[dict[str, Any]]) -> str:
    fig, ax = plt.subplots(figsize=(6, 3))
    by_pool: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        by_pool[(r.get("switchyard") or {}).get("pool") or "cache"].append(r["e2e_ms"])
    pools = sorted(by_pool)
    ax.bar(pools, [len(by_pool[p]) for p in pools])
    for i, p in enumerate(pools):
        ax.text(
            i, len(by_pool[p]), f"p50 {pct(by_pool[p], 0.5):.0f} ms", ha="center", va="bottom", fontsize=8
        )
    ax.set_title("Requests per pool (with e2e p50)")
    return _png(fig)


def plots(run: dict[str, Any], a: dict[str, Any]) -> dict[str, str]:
    """Every plot of PLOTS, as base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = _ok(run)
    t0 = run["started"]
    return {
        "stages": _plot_stages(plt, a),
        "ttft": _plot_hist(plt, [r["ttft_ms"] for r in ok if r["ttft_ms"] is not None], "TTFT (client) ms"),
        "itl": _plot_hist(plt, [x for r in ok for x in _itl(r)], "Inter-token latency (engine) ms"),
        "throughput": _plot_throughput(plt, ok, t0),
        "lag": _plot_lag(plt, run),
        "cache": _plot_cache(plt, ok, t0, a["cache_hit_rate"]),
        "adapters": _plot_adapters(plt, ok, t0),
        "pools": _plot_pools(plt, ok),
    }


def render(run: dict[str, Any], a: dict[str, Any]) -> str:
    imgs = plots(run, a)
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v['p50_ms']}</td><td>{v['p99_ms']}</td><td>{v['mean_ms']}</td></tr>"
        for k, v in a["stages"].items()
    )
    figs = "".join(
        f'<figure id="plot-{k}"><img alt="{k}" src="data:image/png;base64,{imgs[k]}"><figcaption>{k}</figcaption></figure>'
        for k in PLOTS
    )
    dom = a["dominant_stage"]
    trace = a.get("engine_trace")
    trace_html = ""
    if trace:
        links = " ".join(f'<a href="{html.escape(u)}">{html.escape(u)}</a>' for u in trace.get("links", []))
        ops = "".join(
            f"<tr><td>{html.escape(t['category'])}</td><td style='text-align:left'>{html.escape(t['name'])}"
            f"</td><td>{t['self_ms']}</td><td>{t['total_ms']}</td><td>{t['calls']}</td></tr>"
            for t in trace.get("top", [])
        )
        trace_html = f"""<h2 id="engine-trace">Engine trace ({trace.get("window_s")} s window)</h2>
<p>torch profiler trace of the vLLM engine (open in https://ui.perfetto.dev): {links}.
CPU-GPU syncs: {trace["cpu_gpu_sync"]["calls"] if "cpu_gpu_sync" in trace else 0}.</p>
<table><tr><th>category</th><th>name</th><th>self ms</th><th>total ms</th><th>calls</th></tr>{ops}</table>"""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Switchyard profile: {html.escape(a["scenario"])}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:auto}}td,th{{padding:2px 8px;text-align:right}}
figure{{display:inline-block;margin:8px}}</style></head><body>
<h1>Switchyard profile: {html.escape(a["scenario"])}</h1>
<p id="dominant">Where the time goes: <b>{html.escape(str(dom["p50"]))}</b> at p50,
<b>{html.escape(str(dom["p99"]))}</b> at p99.</p>
<p>{a["completed"]} of {a["requests"]} requests in {a["duration_s"]} s: {a["requests_per_s"]} req/s,
{a["tokens_per_s"]} tokens/s; e2e p50/p99 {a["e2e_ms"]["p50"]}/{a["e2e_ms"]["p99"]} ms; TTFT p50/p99
{a["ttft_ms"]["p50"]}/{a["ttft_ms"]["p99"]} ms; ITL p50/p99 {a["itl_ms"]["p50"]}/{a["itl_ms"]["p99"]} ms;
cache hit rate {a["cache_hit_rate"]:.1%}; adapter loads {a["adapter_loads"]}; engine preemptions
{a["preemptions"]}; service exits {html.escape(json.dumps(a["service_exits"]))}
(SIGKILL, most often the OOM killer: {a["oom_kills_suspected"]}).</p>
<table><tr><th>stage</th><th>p50 ms</th><th>p99 ms</th><th>mean ms</th></tr>{rows}</table>
{figs}
{trace_html}
<h2>Figures (JSON)</h2><pre>{html.escape(json.dumps(a, indent=2))}</pre></body></html>"""


def write(run: dict[str, Any], out: Path) -> tuple[Path, dict[str, Any]]:
    a = analyse(run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "analysis.json").write_text(json.dumps(a, indent=2))
    path = out / "report.html"
    path.write_text(render(run, a))
    return path, a
