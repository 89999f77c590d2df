"""Figures of a recorded profile run (runner.py's output), as pure functions of it.

Why per pool and per request: requests of one run may take different paths (a vLLM pool, a Triton
pool, a cache hit), so medians of different paths never add up to anything real. Each pool gets
its own stack of stage medians, checked against that pool's measured e2e median. The headline
("where the time goes") comes from each request's critical path: its top-level breakdown rows in
order (the pipeline is a chain) plus the time outside them, summed over the requests sent, so a
stage weighs as much as the requests that went through it.

Stage names: Kafka hops are `hop:<topic>` (queue wait: consume time − produce time), the rest are
the stages' own rows (gateway_accept, preprocess, cache, router, vllm_worker, gateway_reply, …);
rows with a parent (ttft, decode, cache_embed, adapter_load, …) refine their parent and are
reported apart, never added twice.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

# Client-measured time that no breakdown row covers (HTTP, SSE framing, the client's own loop).
OUTSIDE = "outside the breakdown"
CACHE_HIT = "cache hit"
STACK_TOLERANCE = 0.10  # a pool's stack of medians within 10% of its measured e2e median


def pct(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3) if xs else None


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def stages_of(rec: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Top-level stage durations (in breakdown order) and refinements (child rows) of one request, in ms."""
    top: dict[str, float] = defaultdict(float)
    sub: dict[str, float] = defaultdict(float)
    for row in (rec.get("switchyard") or {}).get("breakdown", []):
        name = f"hop:{row.get('topic', '?')}" if row["stage"] == "queue" else row["stage"]
        (sub if "parent" in row else top)[name] += float(row["duration_ms"])
    return dict(top), dict(sub)


def critical_path(rec: dict[str, Any]) -> dict[str, float]:
    """One request's critical path: its top-level rows in order, then the client time outside them."""
    path = stages_of(rec)[0]
    outside = float(rec["e2e_ms"]) - sum(path.values())
    if path and outside > 0:
        path[OUTSIDE] = round(outside, 3)
    return path


def itl_of(rec: dict[str, Any]) -> list[float]:
    for row in (rec.get("switchyard") or {}).get("breakdown", []):
        if row["stage"] == "decode" and row.get("itl_ms"):
            return [float(x) for x in str(row["itl_ms"]).split(",") if x]
    return []


def completed(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The requests that completed (200, no error)."""
    return [r for r in run["requests"] if r["status"] == 200 and "error" not in r]


def is_hit(rec: dict[str, Any]) -> bool:
    return bool(((rec.get("switchyard") or {}).get("cache") or {}).get("hit"))


def pool_of(rec: dict[str, Any]) -> str:
    """Which path answered: a cache hit, else the pool the reply names."""
    if is_hit(rec):
        return CACHE_HIT
    return str((rec.get("switchyard") or {}).get("pool") or "?")


def by_pool(ok: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ok:
        out[pool_of(r)].append(r)
    return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))


def _order(paths: list[dict[str, float]]) -> list[str]:
    order: list[str] = []
    for p in paths:
        order += [k for k in p if k not in order]
    if OUTSIDE in order:  # always last: it is what is left after the stages
        order.remove(OUTSIDE)
        order.append(OUTSIDE)
    return order


def slowest(reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The slowest 1% of `reqs` by e2e (at least one)."""
    return sorted(reqs, key=lambda r: r["e2e_ms"])[-max(1, len(reqs) // 100) :] if reqs else []


def median_band(reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests around the median e2e: the 40th to 60th percentile (at least the median one)."""
    ranked = sorted(reqs, key=lambda r: r["e2e_ms"])
    n = len(ranked)
    lo, hi = int(0.4 * n), max(int(0.6 * n), int(0.4 * n) + 1)
    return ranked[lo:hi] if n else []


def _mean_stack(paths: list[dict[str, float]], order: list[str]) -> dict[str, float]:
    return {s: round(statistics.fmean([p.get(s, 0.0) for p in paths]), 3) for s in order} if paths else {}


def pool_stack(reqs: list[dict[str, Any]]) -> dict[str, Any]:
    """One pool's stacks, never mixed with another pool's. The p50 bar is the breakdown of the
    pool's median requests (the 40th-60th percentile of e2e, mean per stage): stage medians alone
    do not add up to the median request when stages vary apart (a slow hop in some requests, a
    slow worker in others). Its total is checked against the pool's measured e2e median. The
    second bar is the slowest 1%'s mean per stage, beside those requests' own measured e2e (their
    mean): the p99 is not their e2e (with one slowest request, it is the slowest's alone)."""
    with_rows = [r for r in reqs if (r.get("switchyard") or {}).get("breakdown")]
    paths = [critical_path(r) for r in with_rows]
    order = _order(paths)
    band = median_band(with_rows)
    p50 = _mean_stack([critical_path(r) for r in band], order)
    slow_reqs = slowest(with_rows)
    slow = [critical_path(r) for r in slow_reqs]
    e2e = [float(r["e2e_ms"]) for r in reqs]
    measured = median(e2e) or 0.0
    total = round(sum(p50.values()), 3)
    diff = (total - measured) / measured if measured else 0.0
    return {
        "requests": len(reqs),
        "with_breakdown": len(paths),
        "e2e_ms": {"p50": measured, "p99": pct(e2e, 0.99)},
        "p50_stack_ms": p50,
        "p50_band": {"n": len(band), "e2e_ms": [band[0]["e2e_ms"], band[-1]["e2e_ms"]] if band else []},
        "slowest_1pct_mean_ms": _mean_stack(slow, order),
        "slowest_1pct_n": len(slow),
        "slowest_1pct_e2e_ms": round(statistics.fmean(float(r["e2e_ms"]) for r in slow_reqs), 3)
        if slow_reqs
        else 0.0,
        "stage_p50_ms": {s: median([p.get(s, 0.0) for p in paths]) or 0.0 for s in order},
        "check": {
            "stack_ms": total,
            "e2e_p50_ms": measured,
            "diff_pct": round(100 * diff, 1),
            "within_tolerance": abs(diff) <= STACK_TOLERANCE,
        },
    }


def headline(ok: list[dict[str, Any]], sent: int) -> dict[str, Any]:
    """Where the time goes over the requests sent: each request's critical path summed per stage."""
    paths = [critical_path(r) for r in ok if (r.get("switchyard") or {}).get("breakdown")]
    total: dict[str, float] = defaultdict(float)
    seen: Counter[str] = Counter()
    for p in paths:
        for k, v in p.items():
            total[k] += v
            seen[k] += 1
    n, grand = len(paths), sum(total.values())
    ranked = [
        {
            "stage": k,
            "ms_per_request": round(v / n, 3),
            "share_of_time": round(v / grand, 4) if grand else 0.0,
            "share_of_requests": round(seen[k] / n, 4),
            "ms_when_present": round(v / seen[k], 3),
        }
        for k, v in sorted(total.items(), key=lambda kv: -kv[1])
    ]
    slow_sum: Counter[str] = Counter()
    slow = slowest([r for r in ok if (r.get("switchyard") or {}).get("breakdown")])
    for r in slow:
        slow_sum.update(critical_path(r))
    slow_top = slow_sum.most_common(1)[0] if slow_sum else None
    return {
        "requests_sent": sent,
        "requests_counted": n,
        "critical_path": ranked,
        "top": ranked[0] if ranked else None,
        "slowest_1pct": {
            "n": len(slow),
            "stage": slow_top[0] if slow_top else None,
            "share_of_time": round(slow_top[1] / sum(slow_sum.values()), 4) if slow_top else 0.0,
        },
    }


def stage_table(ok: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per stage (first-seen order) and per refinement: p50/p99/mean over the requests that went
    through it, and how many did."""
    per_stage: dict[str, list[float]] = defaultdict(list)
    per_sub: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        top, sub = stages_of(r)
        for k, v in top.items():
            per_stage[k].append(v)
        for k, v in sub.items():
            per_sub[k].append(v)
    stages = {
        k: {
            "p50_ms": pct(v, 0.5),
            "p99_ms": pct(v, 0.99),
            "mean_ms": round(statistics.fmean(v), 3),
            "n": len(v),
        }
        for k, v in per_stage.items()
    }
    refinements = {
        k: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "n": len(v)} for k, v in per_sub.items()
    }
    return stages, refinements


def health(run: dict[str, Any]) -> dict[str, Any]:
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
    ok = completed(run)
    span = max(run["finished"] - run["started"], 1e-9)
    stages, refinements = stage_table(ok)
    head = headline(ok, len(reqs))
    e2e = [r["e2e_ms"] for r in ok]
    ttft = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    itl = [x for r in ok for x in itl_of(r)]
    groups = by_pool(ok)
    errors = Counter(str(r.get("error") or r["status"])[:80] for r in reqs if r not in ok)
    covered = [
        (r["switchyard"]["e2e_ms"], r["switchyard"]["stages_total_ms"])
        for r in ok
        if (r.get("switchyard") or {}).get("e2e_ms")
    ]
    return {
        "scenario": run["scenario"]["name"],
        "client": run.get("client"),
        **health(run),
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
        "headline": head,
        "dominant_stage": {
            "overall": head["top"]["stage"] if head["top"] else None,
            "slowest_1pct": head["slowest_1pct"]["stage"],
        },
        "pools": {k: pool_stack(v) for k, v in groups.items()},
        "stages": stages,
        "refinements": refinements,
        "breakdown_coverage_ms": {
            "gap_p50": pct([e - s for e, s in covered], 0.5),
            "gap_max": round(max((abs(e - s) for e, s in covered), default=0.0), 3),
        },
        "cache_hit_rate": round(sum(map(is_hit, ok)) / len(ok), 4) if ok else 0.0,
        "adapter_loads": sum(1 for r in ok if "adapter_load" in stages_of(r)[1]),
        "engine_trace": run.get("engine_trace"),
    }
