"""The `switchyard` command: `up` starts the pipeline, `topics` shows topics and lag, `asyncapi` the topic API,
`adapters` builds and uploads LoRA adapters (shared/devstack/adapters_cli.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
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
    from shared.devstack.profiling.command import add_parser as add_profile_parser

    add_profile_parser(sub)  # `switchyard profile` (shared/devstack/profiling/command.py)
    from shared.devstack.batch_cli import add_parser as add_batch_parser  # batch jobs (issue 9)

    add_batch_parser(sub)
    from shared.devstack.adapters_cli import add_parser as add_adapters_parser

    add_adapters_parser(sub)
    args = parser.parse_args(argv)
    raise SystemExit(args.func(args))


if __name__ == "__main__":
    main()
