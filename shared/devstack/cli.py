"""The `switchyard` command: `up` starts the pipeline, `topics` shows topics and lag, `asyncapi` the topic API,
`adapters` builds and uploads LoRA adapters (shared/devstack/adapters_cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict

from shared.runtime.config import Settings
from shared.runtime.service import settings_or_exit as _settings


def _with_running_broker(settings: Settings) -> Settings:
    """Use SY_KAFKA_BOOTSTRAP, else the broker a running `switchyard up` wrote down."""
    if settings.kafka_bootstrap:
        return settings
    from shared.devstack.wiring import endpoints_file

    path = endpoints_file(settings)
    if not path.is_file():
        print("no broker: set SY_KAFKA_BOOTSTRAP or start `switchyard up`", file=sys.stderr)
        raise SystemExit(2)
    return settings.model_copy(update={"kafka_bootstrap": json.loads(path.read_text())["kafka"]})


def cmd_up(args: argparse.Namespace) -> int:
    from shared.devstack.launcher import available_services, up
    from shared.runtime.production import HeldSecrets
    from shared.runtime.telemetry import configure_logging

    settings = _settings(  # it starts every service: the secrets of all of them
        lambda s: HeldSecrets(
            tenant_keys=s.api_keys,
            token=s.internal_token.get_secret_value(),
            signing_secrets={t: v.get_secret_value() for t, v in s.ingest_secrets.items()},
        )
    )
    configure_logging("launcher", "WARNING", settings.log_format)
    names = available_services()
    if args.services:
        wanted = [n.strip() for n in args.services.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"unknown services {unknown}; available: {names}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    return asyncio.run(up(settings, names))


def cmd_topics(args: argparse.Namespace) -> int:
    from shared.runtime.kafka_admin import create_topics, topic_report

    settings = _with_running_broker(_settings())
    if args.create:
        created = asyncio.run(create_topics(settings))
        print(f"created {len(created)} topics: {', '.join(created) or '-'}")
    rows = asyncio.run(topic_report(settings))
    if args.json:
        print(json.dumps([{**r.__dict__, "lag": r.lag} for r in rows], indent=2))
        return 0
    per_topic: dict[str, dict[str | None, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    ends: dict[str, dict[int, int]] = defaultdict(dict)
    for r in rows:
        ends[r.topic][r.partition] = r.end
        if r.group is not None:
            acc = per_topic[r.topic][r.group]
            acc[0] += r.lag or 0
    print(f"{'topic':<24} {'parts':>5} {'records':>9}  group lag")
    for topic in sorted(ends):
        groups = per_topic.get(topic, {})
        lag = ", ".join(f"{g}={v[0]}" for g, v in sorted(groups.items(), key=lambda kv: str(kv[0]))) or "-"
        print(f"{topic:<24} {len(ends[topic]):>5} {sum(ends[topic].values()):>9}  {lag}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from shared.devstack.models.build import main as build_main

    settings = _settings()
    argv = ["--name", args.name, "--models-dir", str(settings.model_dir)]
    if args.minutes is not None:
        argv += ["--minutes", str(args.minutes)]
    if args.force:
        argv.append("--force")
    rc = build_main(argv)
    if rc == 0 and args.name == "sy-tiny":
        from shared.devstack.models.vlm import build_vlm

        print(json.dumps({"path": str(build_vlm(settings.model_dir)), "name": "sy-vlm"}))
        from services.cache.minilm import export_minilm_onnx  # the cache's embedder

        print(json.dumps({"path": str(export_minilm_onnx(settings.model_dir)), "name": "all-minilm-l6-v2"}))
    return rc


def cmd_asyncapi(args: argparse.Namespace) -> int:
    from shared.devstack.asyncapi import render

    print(render(_settings()), end="")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from shared.devstack.profiling import report, runner
    from shared.devstack.profiling.scenarios import SCENARIOS, Scenario
    from shared.devstack.wiring import endpoints_file

    out = Path(args.out)
    if args.report_only:
        path, a = report.write(json.loads(Path(args.report_only).read_text()), out)
        print(f"report: {path}\n{json.dumps(a['dominant_stage'])}")
        return 0
    if args.scenario not in SCENARIOS:
        print(f"unknown scenario {args.scenario!r}; choose from {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    over = {k: v for k, v in (("duration_s", args.duration), ("rate_rps", args.rate)) if v is not None}
    if args.concurrency is not None:
        over.update(concurrency=args.concurrency, mode="concurrency")
    elif args.rate is not None:
        over["mode"] = "rate"
    if args.cache_hit_ratio is not None:
        over["cache_hit_ratio"] = args.cache_hit_ratio
    if args.adapter_mix:
        over["adapter_mix"] = json.loads(args.adapter_mix)
    sc = Scenario.model_validate({**SCENARIOS[args.scenario].model_dump(), **over})
    settings = _settings()
    services: dict[str, str] = {}
    gateway = args.url
    ep = endpoints_file(settings)
    if ep.is_file():
        services = {n: i["url"] for n, i in json.loads(ep.read_text())["services"].items()}
        gateway = gateway or services.get("gateway")
    if not gateway:
        print("no gateway: pass --url or start `switchyard up`", file=sys.stderr)
        return 2
    key = args.api_key or next(iter(settings.api_keys), "")
    print(f"profile {sc.name}: {sc.mode}, {sc.duration_s:.0f} s against {gateway}")
    load = runner.run(sc, gateway, services, key)
    if args.engine_trace:
        from shared.devstack.profiling import engine_trace

        worker = services.get("vllm_worker")
        if not worker:
            load.close()
            print("--engine-trace needs the vLLM worker of a running `switchyard up`", file=sys.stderr)
            return 2
        data, answer = asyncio.run(
            engine_trace.capture(
                load,
                worker,
                settings.internal_token.get_secret_value(),
                delay_s=min(2.0, sc.duration_s / 4),
                window_s=min(args.engine_trace_s, sc.duration_s / 2),
                prefix=f"sy-{sc.name}-{int(time.time())}",
            )
        )
        data["engine_trace"] = engine_trace.collect(answer, out)
    else:
        data = asyncio.run(load)
    if ep.is_file():  # restarts during the run, by cause (SIGKILL: most often the OOM killer)
        data["service_exits"] = {
            n: i.get("exits", {}) for n, i in json.loads(ep.read_text())["services"].items()
        }
    runner.save(data, out)
    path, a = report.write(data, out)
    print(f"report: {path}")
    print(json.dumps({k: a[k] for k in ("completed", "failed", "tokens_per_s", "e2e_ms", "dominant_stage")}))
    return 0 if a["completed"] else 1


def cmd_hash_key(args: argparse.Namespace) -> int:
    from shared.runtime.auth import hash_key

    print(hash_key(args.key))
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the embedded parts and every service")
    p_up.add_argument("--services", help="comma-separated subset of services to start")
    p_up.set_defaults(func=cmd_up)
    p_hash = sub.add_parser("hash-key", help="print the sha256:<hex> form of an API key for SY_API_KEYS")
    p_hash.add_argument("key")
    p_hash.set_defaults(func=cmd_hash_key)
    p_topics = sub.add_parser("topics", help="list topics with record counts and consumer lag")
    p_topics.add_argument("--json", action="store_true")
    p_topics.add_argument(
        "--create", action="store_true", help="create missing topics first (production init)"
    )
    p_topics.set_defaults(func=cmd_topics)
    p_models = sub.add_parser("models", help="local models")
    models_sub = p_models.add_subparsers(dest="models_cmd", required=True)
    p_build = models_sub.add_parser("build", help="build and train the small local model (cached)")
    p_build.add_argument("--name", default="sy-tiny")
    p_build.add_argument("--minutes", type=float, default=None, help="training budget")
    p_build.add_argument("--force", action="store_true", help="rebuild even when cached")
    p_build.set_defaults(func=cmd_models)
    p_async = sub.add_parser("asyncapi", help="print the AsyncAPI document of the topics")
    p_async.set_defaults(func=cmd_asyncapi)
    p_prof = sub.add_parser("profile", help="load a running stack with a scenario; HTML + JSON report")
    p_prof.add_argument(
        "--scenario", default="smoke", help="smoke, interactive, saturate, long-prompts, cache-heavy"
    )
    p_prof.add_argument("--duration", type=float, help="seconds (overrides the scenario)")
    p_prof.add_argument("--rate", type=float, help="open loop: requests per second")
    p_prof.add_argument("--concurrency", type=int, help="closed loop: requests in flight")
    p_prof.add_argument("--cache-hit-ratio", type=float, help="share of repeated prompts")
    p_prof.add_argument("--adapter-mix", help='JSON, e.g. {"": 0.5, "math": 0.5}')
    p_prof.add_argument("--url", help="gateway URL (default: the running `switchyard up`)")
    p_prof.add_argument("--api-key", help="default: the first of SY_API_KEYS")
    p_prof.add_argument("--out", default="var/profile", help="where run.json, analysis.json, report.html go")
    p_prof.add_argument(
        "--engine-trace",
        action="store_true",
        help="capture a torch profiler trace of the vLLM engine during the run (linked in the report)",
    )
    p_prof.add_argument("--engine-trace-s", type=float, default=3.0, help="length of that trace window")
    p_prof.add_argument("--report-only", metavar="RUN_JSON", help="only render the report of a recorded run")
    p_prof.set_defaults(func=cmd_profile)
    from shared.devstack.batch_cli import add_parser as add_batch_parser  # batch jobs (issue 9)

    add_batch_parser(sub)
    from shared.devstack.adapters_cli import add_parser as add_adapters_parser

    add_adapters_parser(sub)
    args = parser.parse_args(argv)
    raise SystemExit(args.func(args))


if __name__ == "__main__":
    main()
