"""The report's charts (matplotlib, PNG). Each chart either has data or says why it has none,
so an empty axis never reaches the report: a silent empty chart reads as "nothing happened"."""

from __future__ import annotations

import base64
import io
import json
from collections import defaultdict
from typing import Any

from pydantic import BaseModel

from .analysis import CACHE_HIT, OUTSIDE, by_pool, completed, is_hit, itl_of, pct, stages_of

PLOTS = ("stages", "ttft", "itl", "throughput", "lag", "cache", "adapters", "pools")


class Chart(BaseModel):
    """A PNG (base64), or the reason there is none; `note` explains what the data shows (e.g. zeros)."""

    png: str | None = None
    reason: str | None = None
    note: str | None = None


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def no_requests(run: dict[str, Any]) -> str:
    """Why a chart of completed requests is empty."""
    reqs = run["requests"]
    if not reqs:
        return "no request was sent (the run ended before its first request)"
    errs = sorted({str(r.get("error") or r["status"])[:100] for r in reqs})
    return f"no request completed: {len(reqs)} sent, all failed ({'; '.join(errs[:3])})"


def _stage_colors(plt: Any, pools: dict[str, Any]) -> dict[str, Any]:
    names: list[str] = []
    for p in pools.values():
        names += [s for s in p["p50_stack_ms"] if s not in names]
    cmap = plt.get_cmap("tab20")
    return {n: ("lightgrey" if n == OUTSIDE else cmap(i % 20)) for i, n in enumerate(names)}


def plot_stages(plt: Any, run: dict[str, Any], a: dict[str, Any]) -> Chart:
    """Per pool, its own stacks: its median requests' breakdown (checked against the pool's
    measured e2e median, the black tick) and the slowest 1%'s (beside those requests' measured
    e2e, red)."""
    pools = {k: p for k, p in a["pools"].items() if p["with_breakdown"]}
    if not pools:
        return Chart(reason=no_requests(run) if not a["completed"] else "no reply carried a breakdown")
    colors = _stage_colors(plt, pools)
    fig, axes = plt.subplots(
        len(pools), 1, figsize=(9, 1.9 * len(pools) + 1.2), squeeze=False, sharex=True
    )  # one scale: pools compare at a glance
    for ax, (name, p) in zip(axes[:, 0], pools.items(), strict=True):
        for i, (stack, mark) in enumerate(
            (
                (p["p50_stack_ms"], p["e2e_ms"]["p50"]),
                (p["slowest_1pct_mean_ms"], p.get("slowest_1pct_e2e_ms", p["e2e_ms"]["p99"])),
            )
        ):
            left = 0.0
            for stage, v in stack.items():
                ax.barh(i, v, left=left, color=colors[stage], edgecolor="white", linewidth=0.5)
                left += v
            ax.plot([mark, mark], [i - 0.45, i + 0.45], color="black" if i == 0 else "red", lw=2)
        c = p["check"]
        ax.set_yticks(
            [0, 1], [f"median requests ({p['p50_band']['n']})", f"slowest 1% ({p['slowest_1pct_n']})"]
        )
        ax.set_title(
            f"{name}: {p['requests']} requests; stack {c['stack_ms']:.0f} ms, measured e2e "
            f"median {c['e2e_p50_ms']:.0f} ms ({c['diff_pct']:+.0f}%)",
            fontsize=9,
            color="black" if c["within_tolerance"] else "red",
        )
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel(
        "ms, mean per stage (black tick: measured e2e median; red tick: the slowest 1%'s own e2e)"
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(
        handles,
        list(colors),
        fontsize=7,
        ncol=4,
        loc="lower center",
        bbox_to_anchor=(0.5, -0.02 - 0.03 * (len(colors) // 4)),
    )
    fig.tight_layout()
    bad = [k for k, p in pools.items() if not p["check"]["within_tolerance"]]
    note = f"stack off its measured median by more than 10% in: {', '.join(bad)}" if bad else None
    return Chart(png=_png(fig), note=note)


def _per_pool_hist(plt: Any, groups: dict[str, list[float]], title: str) -> str:
    fig, ax = plt.subplots(figsize=(6, 3))
    hi = max(pct(v, 0.99) or 0 for v in groups.values()) or 1.0
    for name, vals in groups.items():
        ax.hist(
            vals, bins=40, range=(0, hi), alpha=0.6, label=f"{name} (n={len(vals)}, p50 {pct(vals, 0.5):.1f})"
        )
    ax.set_title(title)
    ax.set_xlabel("ms (values above the overall p99 not drawn)")
    ax.legend(fontsize=7)
    return _png(fig)


def plot_ttft(plt: Any, run: dict[str, Any], ok: list[dict[str, Any]]) -> Chart:
    if not ok:
        return Chart(reason=no_requests(run))
    if not run["scenario"].get("stream", True):
        return Chart(reason="the scenario does not stream (stream=false): the client sees no first token")
    groups = {k: [r["ttft_ms"] for r in v if r.get("ttft_ms") is not None] for k, v in by_pool(ok).items()}
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return Chart(reason="no streamed reply carried a content token (every reply was empty)")
    return Chart(png=_per_pool_hist(plt, groups, "TTFT seen by the client, per pool"))


def plot_itl(plt: Any, run: dict[str, Any], ok: list[dict[str, Any]]) -> Chart:
    if not ok:
        return Chart(reason=no_requests(run))
    groups = {k: [x for r in v for x in itl_of(r)] for k, v in by_pool(ok).items()}
    without = [k for k, v in groups.items() if not v]
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return Chart(
            reason="no reply carried token gaps (decode rows with itl_ms): replies of one token, "
            f"or pools that report none ({', '.join(without)})"
        )
    note = f"no token gaps from: {', '.join(without)}" if without else None
    return Chart(png=_per_pool_hist(plt, groups, "Inter-token latency (engine), per pool"), note=note)


def _per_second(run: dict[str, Any], ok: list[dict[str, Any]], value: Any) -> dict[int, list[float]]:
    """Per second of the run (by end time): [requests, sum of value(request)]. A last second the
    run spent under half of is left out: its few requests would read as a collapse."""
    t0 = run["started"]
    span = run["finished"] - t0
    last = int(span) if span - int(span) >= 0.5 else int(span) - 1
    bins: dict[int, list[float]] = defaultdict(lambda: [0, 0])
    for r in ok:
        second = int(r["end"] - t0)
        if second > last >= 0:
            continue
        b = bins[second]
        b[0] += 1
        b[1] += value(r)
    return bins


def plot_throughput(plt: Any, run: dict[str, Any], ok: list[dict[str, Any]]) -> Chart:
    if not ok:
        return Chart(reason=no_requests(run))
    fig, ax = plt.subplots(figsize=(7, 3))
    bins = _per_second(run, ok, lambda r: r["tokens"])
    xs = list(range(0, max(bins) + 1))
    ax.plot(xs, [bins[x][1] if x in bins else 0 for x in xs], "o-", lw=2, label="tokens/s")
    ax.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(xs, [bins[x][0] if x in bins else 0 for x in xs], "--", color="tab:orange")
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("requests/s", color="tab:orange")
    ax.set_xlabel("s into the run")
    ax.set_title("Throughput over time (tokens/s blue, requests/s orange)")
    return Chart(png=_png(fig))


def _series(run: dict[str, Any], prefix: str) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in run["samples"]:
        for k, v in (s.get("series") or {}).items():
            if k.startswith(prefix):
                out[f"{s['service']}:{k}"].append((s["t"] - run["started"], v))
    return out


def no_samples(run: dict[str, Any]) -> str:
    """Why the services' /metrics gave nothing to chart."""
    metrics = run.get("metrics") or {}
    if not run["samples"]:
        return str(metrics.get("why_none") or "no service's /metrics was sampled (no running stack found)")
    failed = [s for s in run["samples"] if "error" in s]
    if len(failed) == len(run["samples"]):
        return f"every /metrics read failed, e.g. {failed[0]['service']}: {failed[0]['error']}"
    return ""


def plot_lag(plt: Any, run: dict[str, Any]) -> Chart:
    why = no_samples(run)
    if why:
        return Chart(reason=why)
    lag = _series(run, "sy_consumer_lag")
    waiting = _series(run, "vllm:num_requests_waiting")
    if not lag and not waiting:
        services = sorted({s["service"] for s in run["samples"]})
        return Chart(reason=f"the sampled services ({', '.join(services)}) export no sy_consumer_lag")
    fig, ax = plt.subplots(figsize=(7, 3))
    for k, pts in sorted(lag.items()):
        service, series = k.split(":", 1)
        stage = series.partition("stage=")[2].rstrip("}") or "?"
        label = service if stage == service else f"{service} (stage {stage})"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, lw=1)
    for _k, pts in sorted(waiting.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", label="vLLM engine queue", lw=1)
    ax.set_title("Consumer lag (records) and engine queue (requests) over time")
    peak = max((v for pts in lag.values() for _, v in pts), default=0)
    ax.set_ylim(0, max(1.0, 1.1 * peak))
    ax.set_xlabel("s into the run")
    ax.legend(fontsize=6, ncol=2)
    return Chart(png=_png(fig), note=None if peak else "lag stayed 0 on every consumer: no stage fell behind")


def _cache_note(run: dict[str, Any], hits: int) -> str | None:
    if hits:
        return None
    if not run["scenario"].get("cache_hit_ratio"):
        return "0 hits: the scenario repeats no prompt (cache_hit_ratio 0; --cache-hit-ratio sets it)"
    return "0 hits although prompts were repeated: is the cache on (SY_CACHE_ENABLED)?"


def plot_cache(plt: Any, run: dict[str, Any], ok: list[dict[str, Any]]) -> Chart:
    if not ok:
        return Chart(reason=no_requests(run))
    hit_bins = _per_second(run, ok, lambda r: int(is_hit(r)))
    xs = list(range(0, max(hit_bins) + 1))
    hits = [hit_bins[x][1] if x in hit_bins else 0 for x in xs]
    misses = [hit_bins[x][0] - hit_bins[x][1] if x in hit_bins else 0 for x in xs]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(xs, misses, color="tab:blue", label="answered by a pool")
    ax.bar(xs, hits, bottom=misses, color="tab:green", label="answered from the cache")
    total = sum(map(is_hit, ok))
    ax.set_title(f"Cache: replies per second ({total} hits of {len(ok)}, {total / len(ok):.1%})")
    ax.set_xlabel("s into the run")
    ax.legend(fontsize=7)
    return Chart(png=_png(fig), note=_cache_note(run, total))


def plot_adapters(plt: Any, run: dict[str, Any], ok: list[dict[str, Any]]) -> Chart:
    base = run["scenario"].get("model")
    mix = run["scenario"].get("adapter_mix") or {}
    asked = [
        r for r in ok if (r.get("model") and r["model"] != base) or (r.get("switchyard") or {}).get("adapter")
    ]
    if not ok:
        return Chart(reason=no_requests(run))
    if not asked:
        return Chart(
            reason=f"every request went to the base model {base} (adapter_mix {json.dumps(mix)}): "
            'no adapter to chart; --adapter-mix \'{"": 0.5, "NAME": 0.5}\' sends adapter traffic'
        )
    t0 = run["started"]
    per: dict[str, list[float]] = defaultdict(list)
    for r in asked:
        per[(r.get("switchyard") or {}).get("adapter") or str(r["model"])].append(r["end"] - t0)
    loads = sorted(r["end"] - t0 for r in ok if "adapter_load" in stages_of(r)[1])
    fig, ax = plt.subplots(figsize=(7, 3))
    for name, ends in sorted(per.items()):
        ends.sort()
        ax.step(ends, list(range(1, len(ends) + 1)), where="post", label=f"{name} ({len(ends)})")
    if loads:
        ax.step(
            loads,
            list(range(1, len(loads) + 1)),
            "o-",
            where="post",
            color="red",
            label=f"loads ({len(loads)})",
        )
    ax.set_title("Adapter requests and adapter loads (red), cumulative")
    ax.set_xlabel("s into the run")
    ax.legend(fontsize=7)
    return Chart(png=_png(fig), note=None if loads else "no adapter load: every adapter was resident already")


def plot_pools(plt: Any, run: dict[str, Any], a: dict[str, Any]) -> Chart:
    if not a["pools"]:
        return Chart(reason=no_requests(run))
    fig, ax = plt.subplots(figsize=(6, 3))
    names = list(a["pools"])
    counts = [a["pools"][p]["requests"] for p in names]
    ax.bar(names, counts, color=["tab:green" if n == CACHE_HIT else "tab:blue" for n in names])
    for i, p in enumerate(names):
        e = a["pools"][p]["e2e_ms"]
        ax.text(
            i,
            counts[i],
            f"{counts[i] / a['completed']:.0%}\np50 {e['p50']:.0f} ms, p99 {e['p99']:.0f} ms",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylim(0, max(counts) * 1.35)
    ax.set_title("Requests per pool (share, e2e p50 and p99)")
    return Chart(png=_png(fig))


def plots(run: dict[str, Any], a: dict[str, Any]) -> dict[str, Chart]:
    """Every chart of PLOTS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = completed(run)
    return {
        "stages": plot_stages(plt, run, a),
        "ttft": plot_ttft(plt, run, ok),
        "itl": plot_itl(plt, run, ok),
        "throughput": plot_throughput(plt, run, ok),
        "lag": plot_lag(plt, run),
        "cache": plot_cache(plt, run, ok),
        "adapters": plot_adapters(plt, run, ok),
        "pools": plot_pools(plt, run, a),
    }
