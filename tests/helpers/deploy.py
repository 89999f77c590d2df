"""Checks of the deployment files against the code (no Docker engine or cluster here: parse them).

Each check returns a list of problems (empty = fine), so the tests can also run them on broken
samples and prove they catch what they claim to. The source of truth is the code: the services of
shared/devstack/launcher.py and services/, Settings and DEFAULT_PORTS of shared/runtime/config/, and the settings
each service's code actually reads.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from shared.devstack.launcher import SERVICES
from shared.runtime.config import DEFAULT_PORTS, ConfigError, Settings, known_env_vars, load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "deploy" / "k8s"
OVERLAY = K8S / "overlays" / "production"

# Settings added by branches being built in parallel. Until they land in Settings the deployment
# files may already carry them for the services that will read them; once they exist they are
# validated like every other setting.
PENDING_SETTINGS = {
    "SY_CELERY_BROKER": "batch (issue 9)",
    "SY_TRITON_URL": "triton worker (issue 6)",
    "SY_REWARD_TRITON_URL": "reward (issue 8)",
}
# Files another branch adds (deploy/triton is built on the `triton` branch).
PENDING_FILES = {"deploy/triton/models", "deploy/triton/requirements.txt"}

# Settings whose unset default is fine in production. Every other setting that defaults to None
# (= "use the embedded/local thing") must be set for a service whose code reads it.
OPTIONAL_UNSET = {
    "kafka_port",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "health_port",
    "trace_file",
    "vllm_model_path",
    "s3_region",
    "storage_dir",
    "adapter_cache_dir",
    "triton_metrics_url",  # default: http://<SY_TRITON_URL host>:8002/metrics
    "cache_embed_triton_url",  # unset: the cache embeds in-process
    "router_stale_after_s",  # default: 3 heartbeat intervals
    "frontend_cpus",  # only `switchyard up` sets it; a pod gets its CPUs from Kubernetes
    "cache_embed_cpus",  # the same
}
# Settings with a default that only suits one machine: loopback addresses, the local API key and
# internal token, a relative state directory.
LOCAL_DEFAULTS = {"health_host", "registry_url", "internal_token", "api_keys", "var_dir", "models_dir"}
# Properties and helpers of Settings that read a field.
FIELD_ALIASES = {"model_dir": "models_dir", "model_path": "vllm_model_path", "object_dir": "storage_dir"}
SECRET_SETTINGS = {
    "internal_token",
    "api_keys",
    "s3_access_key",
    "s3_secret_key",
    "kafka_sasl_password",
    "ingest_secrets",
}

# Dummy values the checks substitute for secrets (the files hold references, never values).
DUMMY_SECRETS = {
    "SY_API_KEYS": '{"sk-test": "tenant-test"}',
    "SY_CELERY_BROKER": "redis://:pw@redis:6379/0",
    "SY_GATEWAY_STATE_URL": "redis://:pw@redis:6379/1",
    "SY_LIMITS_STORAGE_URI": "redis://:pw@redis:6379/1",
    "SY_INGEST_SECRETS": '{"tenant-test": "dummy-ingest-secret-0123"}',
}
SECRET_NAME = re.compile(
    r"(PASSWORD|SECRET|TOKEN|API_KEYS?|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|REDISCLI_AUTH)", re.I
)
SECRET_SHAPES = [
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bminioadmin\b"),
    re.compile(r"sk-switchyard-local|sy-internal-local"),  # the embedded defaults
]


# --------------------------------------------------------------------------- the code's side


def service_names() -> list[str]:
    """Every service process: the launcher's list plus any folder with a main.py."""
    found = {p.parent.name for p in (ROOT / "services").glob("*/main.py")}
    return list(dict.fromkeys([*SERVICES, *sorted(found)]))


def existing_services() -> list[str]:
    return [s for s in service_names() if (ROOT / "services" / s / "main.py").is_file()]


@cache
def _imports(path: Path) -> frozenset[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(out)


def _module_file(module: str) -> Path | None:
    rel = Path(*module.split("."))
    for cand in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


@cache
def import_closure(service: str) -> tuple[Path, ...]:
    """The service's own files and every shared module they reach (statically, lazy imports too)."""
    todo = sorted((ROOT / "services" / service).rglob("*.py"))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for mod in _imports(path):
            if mod.split(".")[0] == "shared" and (f := _module_file(mod)) is not None:
                todo.append(f)
    return tuple(sorted(seen))


def third_party_imports(service: str) -> set[str]:
    tops = set()
    for path in import_closure(service):
        for mod in _imports(path):
            top = mod.split(".")[0]
            if top not in ("shared", "services", "switchyard") and top not in sys.stdlib_module_names:
                tops.add(top)
    return tops


@cache
def fields_read(service: str) -> frozenset[str]:
    """Settings fields the service's code reads (attribute names that are fields, or their helpers)."""
    fields = set(Settings.model_fields)
    names: set[str] = set()
    for path in import_closure(service):
        if path.parent.name == "config" and path.parent.parent.name == "runtime":
            continue
        for attr in re.findall(r"\.([a-z_][a-z0-9_]*)\b", path.read_text()):
            if attr in fields:
                names.add(attr)
            elif attr in FIELD_ALIASES:
                names.add(FIELD_ALIASES[attr])
    return frozenset(names)


@cache
def required_settings(service: str) -> frozenset[str]:
    """Settings the deployment must set for this service: read by its code, and the default is the
    embedded/local one."""
    required = set()
    for name in fields_read(service):
        f = Settings.model_fields[name]
        unset = f.default is None and f.default_factory is None
        if (unset and name not in OPTIONAL_UNSET) or name in LOCAL_DEFAULTS:
            required.add(name)
    return frozenset(required)


def env_name(field: str) -> str:
    return "SY_" + field.upper()


# --------------------------------------------------------------------------- settings checks


@contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    try:
        for k in list(os.environ):
            if k.startswith("SY_"):
                del os.environ[k]
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def settings_problems(where: str, service: str | None, env: Mapping[str, str]) -> list[str]:
    """The env validates with the settings module and sets what the service needs in production."""
    problems = []
    known = set(known_env_vars())
    sy = {k: v for k, v in env.items() if k.startswith("SY_")}
    for k in sorted(sy):
        if k not in known:
            if k in PENDING_SETTINGS:
                del sy[k]
                continue
            problems.append(f"{where}: unknown setting {k}")
    try:
        with _environ({k: v for k, v in sy.items() if k in known}):
            settings = load_settings()
    except ConfigError as exc:
        return [*problems, f"{where}: {exc}"]
    if service is None:
        return problems
    for name in sorted(required_settings(service)):
        if env_name(name) not in sy:
            problems.append(
                f"{where}: {service} reads {env_name(name)} but it is not set (its default is the "
                "embedded/local one); set it, or add it to OPTIONAL_UNSET if unset is right in production"
            )
    if settings.health_host in ("127.0.0.1", "localhost"):
        problems.append(f"{where}: SY_HEALTH_HOST is loopback: probes and Prometheus cannot reach it")
    for name in ("registry_url", "milvus_uri", "kafka_bootstrap", "s3_endpoint"):
        value = str(getattr(settings, name) or "")
        if name in fields_read(service) and re.search(r"127\.0\.0\.1|localhost", value):
            problems.append(f"{where}: {env_name(name)}={value} points at the container itself")
    if (
        "SY_HEALTH_PORT" in sy
        and service in DEFAULT_PORTS
        and int(sy["SY_HEALTH_PORT"]) != DEFAULT_PORTS[service]
    ):
        problems.append(f"{where}: SY_HEALTH_PORT {sy['SY_HEALTH_PORT']} != DEFAULT_PORTS[{service!r}]")
    return problems


# --------------------------------------------------------------------------- images


def image_pinned(ref: str) -> bool:
    """A digest, or a tag that is an exact version (not latest, not a bare major)."""
    if "@sha256:" in ref:
        return True
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag or not tag:
        return False
    if tag in ("latest", "stable", "main", "nightly") or "${" in ref:
        return False
    return bool(re.search(r"\d+\.\d+|\d{4}-\d{2}-\d{2}|^\d{2}\.\d{2}", tag))


def dockerfile_problems(path: Path, build_args: Mapping[str, str] | None = None) -> list[str]:
    problems = []
    args = dict(build_args or {})
    text = path.read_text().replace("\\\n", " ")
    rel = path.relative_to(ROOT)
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        op = parts[0].upper()
        if op == "ARG" and "=" in parts[1]:
            k, _, v = parts[1].partition("=")
            args.setdefault(k, v)
        elif op == "FROM":
            ref = parts[1]
            for k, v in args.items():
                ref = ref.replace("${" + k + "}", v).replace("$" + k, v)
            if ref.startswith("$"):
                problems.append(f"{rel}: FROM {parts[1]} has no pinned build arg")
            elif not image_pinned(ref):
                problems.append(f"{rel}: base image not pinned: {ref}")
        elif op == "COPY" and not any(p.startswith("--from") for p in parts[1:]):
            for src in [p for p in parts[1:-1] if not p.startswith("--")]:
                if not (ROOT / src).exists() and src not in PENDING_FILES:
                    problems.append(f"{rel}: COPY source {src} does not exist")
    return problems


# --------------------------------------------------------------------------- compose


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, shell: Mapping[str, str]) -> Any:
    """Compose's variable substitution: ${X}, ${X:-default}, ${X:?error}, $$ -> $."""
    if isinstance(value, dict):
        return {k: interpolate(v, shell) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, shell) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        got = shell.get(name)
        if op in (":-", "-"):
            return got if got not in (None, "") or (op == "-" and got is not None) else arg
        if op in (":?", "?") and not got:
            raise KeyError(f"{name} required: {arg}")
        return got or ""

    return _VAR.sub(sub, value).replace("$$", "$")


def compose_shell_vars(compose_text: str) -> set[str]:
    """The variables compose requires from the shell or .env (`${X:?...}`); the others default."""
    return {m.group(1) for m in _VAR.finditer(compose_text) if m.group(2) and "?" in m.group(2)}


def dummy_shell(names: set[str]) -> dict[str, str]:
    """Values for the variables compose reads from the shell / .env (secrets get dummies)."""
    out = {}
    for n in names:
        out[n] = DUMMY_SECRETS.get(n, f"dummy-{n.lower()}")
    return out


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; compose refuses the file. So do we (a merge
    that adds a second `reward:` block must fail here, not shadow the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_compose(text: str | None = None) -> dict[str, Any]:
    text = COMPOSE.read_text() if text is None else text
    raw = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    return interpolate(raw, dummy_shell(compose_shell_vars(text)))


def _env_dict(env: Any) -> dict[str, str]:
    if isinstance(env, list):
        return dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: "" if v is None else str(v) for k, v in (env or {}).items()}


def one_shot(svc: Mapping[str, Any]) -> bool:
    return svc.get("restart") == "no"


def compose_problems(compose: Mapping[str, Any]) -> list[str]:
    problems = []
    services = compose.get("services", {})
    for name, svc in services.items():
        image = svc.get("image", "")
        if not image_pinned(image):
            problems.append(f"compose {name}: image not pinned: {image!r}")
        build = svc.get("build")
        if isinstance(build, dict) and build.get("args"):
            for k, v in build["args"].items():
                if k == "BASE" and not image_pinned(str(v)):
                    problems.append(f"compose {name}: build arg {k} not pinned: {v}")
        if not one_shot(svc):
            test = (svc.get("healthcheck") or {}).get("test")
            if not test or svc["healthcheck"].get("disable") or test == ["NONE"]:
                problems.append(f"compose {name}: no healthcheck")
        deps = svc.get("depends_on", {})
        if isinstance(deps, list):
            problems.append(f"compose {name}: depends_on without conditions: {deps}")
            deps = {}
        for dep, how in deps.items():
            if dep not in services:
                problems.append(f"compose {name}: depends on unknown service {dep}")
                continue
            want = "service_completed_successfully" if one_shot(services[dep]) else "service_healthy"
            if (how or {}).get("condition") != want:
                problems.append(f"compose {name}: depends_on {dep} needs condition {want}")
    return problems


def compose_service_problems(compose: Mapping[str, Any], names: list[str]) -> list[str]:
    """Every Switchyard service runs its module, on its port, with its settings."""
    problems = []
    services = compose.get("services", {})
    for name in names:
        svc = services.get(name)
        if svc is None:
            problems.append(f"compose: service {name} missing")
            continue
        cmd = svc.get("command") or []
        if cmd[-2:] != ["-m", f"services.{name}.main"] and cmd[-1:] != [f"services.{name}.main"]:
            problems.append(f"compose {name}: command {cmd} does not run services.{name}.main")
        env = _env_dict(svc.get("environment"))
        port = DEFAULT_PORTS.get(name)
        if port is None:
            problems.append(f"compose {name}: no DEFAULT_PORTS entry in shared/runtime/config/")
            continue
        if env.get("SY_HEALTH_PORT") != str(port):
            problems.append(f"compose {name}: SY_HEALTH_PORT should be {port}")
        test = " ".join((svc.get("healthcheck") or {}).get("test") or [])
        if f":{port}/readyz" not in test:
            problems.append(f"compose {name}: healthcheck does not ask :{port}/readyz")
        deps = svc.get("depends_on") or {}
        if not isinstance(deps, dict) or "kafka" not in deps or "init-topics" not in deps:
            problems.append(f"compose {name}: must wait for kafka (healthy) and init-topics (completed)")
        service = name if (ROOT / "services" / name / "main.py").is_file() else None
        problems += settings_problems(f"compose {name}", service, env)
        needs = {
            "milvus_uri": "milvus",
            "s3_endpoint": "minio",
            "celery_broker": "redis",
            "triton_url": "triton",
        }
        for field, infra in needs.items():
            if service and field in required_settings(service) and infra not in deps:
                problems.append(f"compose {name}: reads {env_name(field)} but does not wait for {infra}")
        required = required_settings(service) if service else frozenset()
        if "registry_url" in required and name != "registry" and "registry" not in deps:
            problems.append(f"compose {name}: calls the registry but does not wait for it")
        mounts = [str(v).split(":")[1] for v in svc.get("volumes", []) if ":" in str(v)]
        if "models_dir" in required and env.get("SY_MODELS_DIR") not in mounts:
            problems.append(f"compose {name}: reads models from SY_MODELS_DIR but mounts nothing there")
    return problems


def compose_consistency_problems(compose: Mapping[str, Any], names: list[str]) -> list[str]:
    """Topics, pools, bucket and ports agree across the file and with the settings module."""
    problems = []
    services = compose["services"]
    envs = {n: _env_dict(services[n].get("environment")) for n in [*names, "init-topics"] if n in services}
    for var in ("SY_TOPIC_PREFIX", "SY_TOPIC_PARTITIONS", "SY_POOLS", "SY_KAFKA_BOOTSTRAP"):
        values = {n: e.get(var) for n, e in envs.items()}
        if len(set(values.values())) != 1:
            problems.append(f"compose: {var} differs between services: {values}")
    pools = {p["name"]: p for p in json.loads(envs["init-topics"].get("SY_POOLS", "[]"))}
    problems += pool_problems("compose", list(pools.values()))
    for n, e in envs.items():
        if "SY_VLLM_POOL" in e and pools.get(e["SY_VLLM_POOL"], {}).get("engine") != "vllm":
            problems.append(f"compose {n}: SY_VLLM_POOL {e['SY_VLLM_POOL']} is not a vllm pool of SY_POOLS")
    kafka = _env_dict(services.get("kafka", {}).get("environment"))
    bootstrap = envs["init-topics"].get("SY_KAFKA_BOOTSTRAP", "")
    if f"//{bootstrap}" not in kafka.get("KAFKA_ADVERTISED_LISTENERS", ""):
        problems.append(f"compose: SY_KAFKA_BOOTSTRAP {bootstrap} is not Kafka's advertised listener")
    max_bytes = Settings.model_fields["kafka_max_request_bytes"].default
    if int(kafka.get("KAFKA_MESSAGE_MAX_BYTES", 1048588)) < max_bytes:
        problems.append("compose: KAFKA_MESSAGE_MAX_BYTES below SY_KAFKA_MAX_REQUEST_BYTES")
    buckets = {e["SY_S3_BUCKET"] for e in envs.values() if "SY_S3_BUCKET" in e}
    if len(buckets) > 1:
        problems.append(f"compose: services use different buckets {buckets}")
    milvus_bucket = _env_dict(services.get("milvus", {}).get("environment")).get("MINIO_BUCKET_NAME")
    if milvus_bucket in buckets:
        problems.append("compose: Milvus shares the Switchyard bucket")
    for n, e in envs.items():
        uri = e.get("SY_MILVUS_URI")
        if uri and not uri.endswith(":19530"):
            problems.append(f"compose {n}: SY_MILVUS_URI {uri} is not Milvus's gRPC port 19530")
        s3 = e.get("SY_S3_ENDPOINT")
        if s3 and s3 != "minio:9000":
            problems.append(f"compose {n}: SY_S3_ENDPOINT {s3} is not the minio service")
        reg = e.get("SY_REGISTRY_URL")
        if reg and reg != f"http://registry:{DEFAULT_PORTS['registry']}":
            problems.append(f"compose {n}: SY_REGISTRY_URL {reg} is not the registry's port")
    return problems


def pool_problems(where: str, pools: list[dict[str, Any]]) -> list[str]:
    """Every model the default pools serve is served by the deployment's pools too."""
    served = {m for p in pools for m in p.get("models", [])}
    default = {m for p in Settings().pools for m in p.models}
    missing = sorted(default - served)
    return [f"{where}: SY_POOLS serves none of {missing} (the default pools do)"] if missing else []


# --------------------------------------------------------------------------- prometheus


def prometheus_problems(config: Mapping[str, Any], names: list[str], host: str = "{name}") -> list[str]:
    problems = []
    targets: dict[str, str] = {}
    for job in config.get("scrape_configs", []):
        if job.get("metrics_path", "/metrics") != "/metrics":
            continue
        for sc in job.get("static_configs", []):
            for t in sc.get("targets", []):
                targets[t] = sc.get("labels", {}).get("service", "")
    for name in names:
        want = f"{host.format(name=name)}:{DEFAULT_PORTS[name]}"
        if want not in targets:
            problems.append(f"prometheus: no scrape of {want}")
        elif targets[want] != name:
            problems.append(f"prometheus: target {want} lacks the label service={name}")
    return problems


# --------------------------------------------------------------------------- secrets


def _secret_like(key: str) -> bool:
    return bool(SECRET_NAME.search(key))


def _is_reference(value: str) -> bool:
    v = value.strip()
    return (
        v == ""
        or bool(re.fullmatch(r"(redis://:)?\$\{[A-Za-z_][A-Za-z0-9_]*(:?[-?][^}]*)?\}(@.*)?", v))
        or (v.startswith("<") and v.endswith(">"))
        or v.startswith("/run/secrets/")  # a mounted secret file (Prometheus credentials_file)
    )


def secret_problems_in_text(rel: str, text: str) -> list[str]:
    problems = []
    for shape in SECRET_SHAPES:
        for m in shape.finditer(text):
            problems.append(f"{rel}: looks like a secret: {m.group(0)[:12]}...")
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#"):
            continue
        m = re.match(r"^-?\s*([A-Za-z_][A-Za-z0-9_]*)\s*[:=]\s*(.+)$", s)
        if not m or not _secret_like(m.group(1)):
            continue
        key, value = m.group(1), m.group(2).strip().strip("'\"")
        if key.lower() in ("name", "key", "secretkeyref", "valuefrom"):
            continue
        # JSON/URL values: only the secret parts matter.
        value = re.sub(r"<[^>]*>", "", value)
        if "${" in m.group(2) or _is_reference(m.group(2).strip().strip("'\"")):
            continue
        if re.fullmatch(r'[{}":,\s]*', value) or re.fullmatch(r"redis://:@[^/]*/\d+", value):
            continue
        problems.append(f"{rel}:{lineno}: {key} has a literal value")
    return problems


def deploy_files() -> list[Path]:
    files = [COMPOSE, ROOT / "Dockerfile", ROOT / ".dockerignore"]
    for p in sorted((ROOT / "deploy").rglob("*")):
        suffixes = (".yml", ".yaml", ".env", ".example", ".json", ".Dockerfile", ".md", ".txt", ".pbtxt")
        if p.is_file() and (p.suffix in suffixes or p.name == "Dockerfile"):
            if p.name == "secrets.env":  # git-ignored: the operator's own copy
                continue
            files.append(p)
    return files


# --------------------------------------------------------------------------- kubernetes


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        s = line.strip()
        if s and not s.startswith("#") and "=" in s:
            k, _, v = s.partition("=")
            out[k.strip()] = v
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def kustomization_problems(directory: Path) -> list[str]:
    """Every file a kustomization names exists (recursively), and every resource file parses."""
    problems = []
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        return [f"{_rel(directory)}: no kustomization.yaml"]
    k = yaml.safe_load(kfile.read_text())
    rel = _rel(kfile)
    paths: list[str] = [*k.get("resources", []), *k.get("components", [])]
    for gen in [*k.get("configMapGenerator", []), *k.get("secretGenerator", [])]:
        paths += gen.get("envs", []) + [f.split("=", 1)[-1] for f in gen.get("files", [])]
    for p in k.get("patches", []):
        if "path" in p:
            paths.append(p["path"])
    for p in paths:
        target = (directory / p).resolve()
        if target.is_dir():
            problems += kustomization_problems(target)
        elif not target.is_file():
            example = target.with_name(target.name + ".example")
            if target.name == "secrets.env" and example.is_file():
                continue  # the operator's git-ignored copy of the example
            problems.append(f"{rel}: {p} does not exist")
        elif target.suffix in (".yaml", ".yml") and p in k.get("resources", []) + k.get("components", []):
            try:
                docs = [d for d in yaml.safe_load_all(target.read_text()) if d is not None]
            except yaml.YAMLError as exc:
                problems.append(f"{_rel(target)}: does not parse: {exc}")
                continue
            for d in docs:
                if not (d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name")):
                    problems.append(f"{_rel(target)}: a document lacks apiVersion/kind/name")
    return problems


def kustomize_resources(directory: Path) -> list[dict[str, Any]]:
    """The resources a kustomization pulls in (base, components), without transformations."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for p in [*k.get("resources", []), *k.get("components", [])]:
        target = (directory / p).resolve()
        if target.is_dir():
            docs += kustomize_resources(target)
        else:
            docs += [d for d in yaml.safe_load_all(target.read_text()) if d]
    return docs


def overlay_config(directory: Path = OVERLAY) -> tuple[dict[str, str], dict[str, str]]:
    """The switchyard-config ConfigMap data (base merged with the overlay) and the Secret's keys."""
    config = read_env_file(K8S / "base" / "config.env")
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for gen in k.get("configMapGenerator", []):
        if gen["name"] == "switchyard-config":
            for e in gen.get("envs", []):
                config.update(read_env_file(directory / e))
    secrets: dict[str, str] = {}
    for gen in k.get("secretGenerator", []):
        for e in gen.get("envs", []):
            example = directory / (e + ".example")
            for key in read_env_file(example):
                secrets[key] = DUMMY_SECRETS.get(key, f"dummy-{key.lower()}")
    return config, secrets


def _generated(name: str | None, base: str) -> bool:
    """The generator's name, or kustomize's rendering of it with a content hash."""
    return name is not None and re.fullmatch(rf"{re.escape(base)}(-[a-z0-9]{{10}})?", name) is not None


def render_overlay(workdir: Path, overlay: str = "production") -> list[dict[str, Any]] | None:
    """`kubectl kustomize` of a copy of deploy/k8s (secrets.env from its example); None without kubectl."""
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    tree = workdir / "k8s"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("secrets.env"))
    for example in tree.glob("overlays/*/secrets.env.example"):
        shutil.copy(example, example.with_name("secrets.env"))
    out = subprocess.run(
        [kubectl, "kustomize", str(tree / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize failed: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def rendered_config(docs: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    config: dict[str, str] = {}
    secrets: dict[str, str] = {}
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "ConfigMap" and _generated(name, "switchyard-config"):
            config = {k: str(v) for k, v in doc["data"].items()}
        elif doc["kind"] == "Secret" and _generated(name, "switchyard-secrets"):
            secrets = {k: DUMMY_SECRETS.get(k, f"dummy-{k.lower()}") for k in doc["data"]}
    return config, secrets


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Deployment", "StatefulSet")}


def container_env(
    container: Mapping[str, Any], config: Mapping[str, str], secrets: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    problems = []
    for src in container.get("envFrom", []):
        if _generated(src.get("configMapRef", {}).get("name"), "switchyard-config"):
            env.update(config)
        elif _generated(src.get("secretRef", {}).get("name"), "switchyard-secrets"):
            env.update(secrets)
        else:
            problems.append(f"{container['name']}: envFrom an unknown source {src}")
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        ref = e.get("valueFrom", {})
        if "secretKeyRef" in ref:
            key = ref["secretKeyRef"]["key"]
            if not _generated(ref["secretKeyRef"].get("name"), "switchyard-secrets") or key not in secrets:
                problems.append(
                    f"{container['name']}: {e['name']} refers to a secret key {key} not generated"
                )
            env[e["name"]] = secrets.get(key, "")
        elif "fieldRef" in ref:
            env[e["name"]] = "pod-name-0"
        elif "configMapKeyRef" in ref:
            env[e["name"]] = config.get(ref["configMapKeyRef"]["key"], "")
    return env, problems


def _port_number(container: Mapping[str, Any], port: Any) -> int | None:
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    return None


def probe_problems(where: str, container: Mapping[str, Any], port: int | None = None) -> list[str]:
    problems = []
    for kind, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        probe = container.get(kind)
        if not probe:
            problems.append(f"{where}: no {kind}")
            continue
        get = probe.get("httpGet")
        if port is None:
            continue
        if not get or get.get("path") != path or _port_number(container, get.get("port")) != port:
            problems.append(f"{where}: {kind} should GET {path} on port {port}, has {get}")
    return problems


def k8s_problems(
    docs: list[dict[str, Any]], config: Mapping[str, str], secrets: Mapping[str, str]
) -> list[str]:
    problems = []
    wl = workloads(docs)
    pdbs = {
        d["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name")
        for d in docs
        if d["kind"] == "PodDisruptionBudget"
    }
    hpas = {d["spec"]["scaleTargetRef"]["name"]: d for d in docs if d["kind"] == "HorizontalPodAutoscaler"}
    partitions = int(config.get("SY_TOPIC_PARTITIONS", Settings.model_fields["topic_partitions"].default))
    problems += pool_problems("k8s config", json.loads(config.get("SY_POOLS", "[]")))
    for wname, w in wl.items():
        pod = w["spec"]["template"]["spec"]
        for c in pod["containers"]:
            problems += probe_problems(f"k8s {wname}/{c['name']}", c)
            if not image_pinned(c.get("image", "")):
                problems.append(f"k8s {wname}: image not pinned: {c.get('image')}")
        gpu = any("nvidia.com/gpu" in c.get("resources", {}).get("limits", {}) for c in pod["containers"])
        pool = pod.get("nodeSelector", {}).get("switchyard.io/pool")
        tolerates_gpu = any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", []))
        if gpu and (pool != "gpu" or not tolerates_gpu):
            problems.append(
                f"k8s {wname}: GPU pod must select switchyard.io/pool=gpu and tolerate nvidia.com/gpu"
            )
        if not gpu and (pool != "cpu" or tolerates_gpu):
            problems.append(
                f"k8s {wname}: CPU pod must select switchyard.io/pool=cpu and not tolerate GPU taints"
            )
        singleton = w["spec"].get("strategy", {}).get("type") == "Recreate"
        if singleton and w["spec"].get("replicas") != 1:
            problems.append(f"k8s {wname}: Recreate (single writer) needs replicas: 1")
        if not singleton and wname not in pdbs:
            problems.append(f"k8s {wname}: no PodDisruptionBudget")
        if wname in hpas:
            hpa = hpas[wname]
            if "replicas" in w["spec"]:
                problems.append(f"k8s {wname}: replicas set while an HPA owns it")
            if hpa["spec"]["scaleTargetRef"]["kind"] != w["kind"]:
                problems.append(f"k8s {wname}: HPA targets the wrong kind")
    for name in service_names():
        dns = name.replace("_", "-")
        w = wl.get(dns)
        if w is None:
            problems.append(f"k8s: no workload for service {name}")
            continue
        c = w["spec"]["template"]["spec"]["containers"][0]
        port = DEFAULT_PORTS[name]
        cmd = c.get("command", []) + c.get("args", [])
        if cmd[-2:] != ["-m", f"services.{name}.main"]:
            problems.append(f"k8s {dns}: command {cmd} does not run services.{name}.main")
        problems += probe_problems(f"k8s {dns}", c, port)
        ann = w["spec"]["template"]["metadata"].get("annotations", {})
        if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(port):
            problems.append(f"k8s {dns}: prometheus.io annotations should scrape port {port}")
        env, env_problems = container_env(c, config, secrets)
        problems += [f"k8s {dns}: {p}" for p in env_problems]
        service = name if (ROOT / "services" / name / "main.py").is_file() else None
        problems += settings_problems(f"k8s {dns}", service, env)
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        if service and "models_dir" in required_settings(service) and env.get("SY_MODELS_DIR") not in mounts:
            problems.append(f"k8s {dns}: reads models from SY_MODELS_DIR but mounts nothing there")
        for e in c.get("env", []):
            field = e["name"].removeprefix("SY_").lower()
            if field in SECRET_SETTINGS and "value" in e:
                problems.append(f"k8s {dns}: {e['name']} must come from the Secret")
        for k in config:
            if k.removeprefix("SY_").lower() in SECRET_SETTINGS:
                problems.append(f"k8s: {k} is in the ConfigMap; secrets belong in switchyard-secrets")
        stage = _stage_of(name)
        hpa = hpas.get(dns)
        if stage:
            if hpa is None:
                problems.append(f"k8s {dns}: stage service without an HPA on consumer lag")
                continue
            ext = [m for m in hpa["spec"]["metrics"] if m["type"] == "External"]
            sel = [m["external"]["metric"].get("selector", {}).get("matchLabels", {}) for m in ext]
            if (
                not ext
                or {"stage": stage} not in sel
                or ext[0]["external"]["metric"]["name"] != "sy_stage_lag"
            ):
                problems.append(f"k8s {dns}: HPA must scale on external sy_stage_lag{{stage={stage!r}}}")
            if hpa["spec"]["maxReplicas"] > partitions:
                problems.append(
                    f"k8s {dns}: maxReplicas {hpa['spec']['maxReplicas']} > {partitions} partitions (idle pods)"
                )
    problems += scale_out_problems(docs, config, secrets)
    return problems


# Services whose replicas must share state to scale out (issue 37): the gateway's async requests
# and limits, the registry's limits.
SHARED_STATE = {
    "gateway": ("SY_GATEWAY_STATE_URL", "SY_LIMITS_STORAGE_URI"),
    "registry": ("SY_LIMITS_STORAGE_URI",),
}


def scale_out_problems(
    docs: list[dict[str, Any]], config: Mapping[str, str], secrets: Mapping[str, str]
) -> list[str]:
    """Replicas any request may reach: stateless Deployments on shared Redis, no session affinity."""
    problems = []
    wl = workloads(docs)
    for name, keys in SHARED_STATE.items():
        w = wl.get(name)
        if w is None:
            continue
        if w["kind"] != "Deployment" or "volumeClaimTemplates" in w["spec"]:
            problems.append(f"k8s {name}: must be a stateless Deployment (its state lives in Redis)")
        env, _ = container_env(w["spec"]["template"]["spec"]["containers"][0], config, secrets)
        for key in keys:
            if not env.get(key, "").startswith(("redis://", "rediss://")):
                problems.append(f"k8s {name}: {key} must name the shared Redis, got {env.get(key)!r}")
    for x in docs:
        if x["kind"] == "Service" and x["spec"].get("sessionAffinity", "None") != "None":
            problems.append(f"k8s service {x['metadata']['name']}: session affinity (replicas share state)")
    return problems


def _stage_of(name: str) -> str | None:
    """The consumer-group stage a service runs (its name, by convention), or None if it has none."""
    main = ROOT / "services" / name / "main.py"
    if not main.is_file():
        # Not built yet: the pending stage services are named like their service.
        return name if name in ("triton_worker", "reward") else None
    return name if re.search(rf"envelope_consumer\(\s*\"{name}\"", main.read_text()) else None
