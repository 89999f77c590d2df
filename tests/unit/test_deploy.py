"""The deployment files agree with the code (no Docker engine or cluster here: they are parsed).

Compose, the Kubernetes manifests, Prometheus, Grafana and the Dockerfiles are checked against the
services of shared/devstack/launcher.py, DEFAULT_PORTS and Settings in shared/runtime/config/, and the settings each
service's code reads. The checkers live in tests/helpers/deploy.py; the last tests run them on
broken copies to show each one catches what it claims to.
"""

from __future__ import annotations

import copy
import json
import re
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.runtime.config import DEFAULT_PORTS
from tests.helpers import deploy as d

ROOT = d.ROOT


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return d.load_compose()


@pytest.fixture(scope="module")
def k8s() -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]:
    config, secrets = d.overlay_config()
    return d.kustomize_resources(d.OVERLAY), config, secrets


def test_every_service_has_a_default_port() -> None:
    missing = [s for s in d.service_names() if s not in DEFAULT_PORTS]
    assert not missing, f"services without a DEFAULT_PORTS entry in shared/runtime/config/: {missing}"


# --------------------------------------------------------------------------- compose


def test_compose_healthchecks_dependencies_and_pinned_images(compose: dict[str, Any]) -> None:
    assert d.compose_problems(compose) == []


def test_compose_runs_every_service_with_its_port_and_settings(compose: dict[str, Any]) -> None:
    assert d.compose_service_problems(compose, d.service_names()) == []


def test_compose_topics_pools_bucket_and_ports_agree(compose: dict[str, Any]) -> None:
    assert d.compose_consistency_problems(compose, d.service_names()) == []


def test_compose_has_the_production_infrastructure(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for infra in ("kafka", "milvus", "etcd", "minio", "redis", "triton", "otel-collector", "jaeger"):
        assert infra in services, infra
    for infra in ("prometheus", "grafana"):
        assert infra in services, infra
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    gpu = services["vllm_worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu and gpu[0]["capabilities"] == ["gpu"] and gpu[0]["driver"] == "nvidia"
    assert "deploy" not in services["triton"], "Triton serves the CPU pool: no GPU reservation"
    assert services["triton"]["build"]["dockerfile"] == "deploy/triton.Dockerfile"
    for name in d.service_names():
        env = services[name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http://otel-collector:4318"), name


def test_compose_secrets_are_listed_in_the_env_template() -> None:
    required = d.compose_shell_vars(d.COMPOSE.read_text())
    template = d.read_env_file(ROOT / "deploy" / "compose.env.example")
    assert required == set(template), "deploy/compose.env.example must list exactly what compose requires"
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_compose_mounts_the_files_it_names(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            src = str(vol).split(":")[0]
            if src.startswith("./") and not src.startswith("./var/"):
                assert (ROOT / src).exists(), f"{name} mounts missing {src}"
        build = svc.get("build")
        if build is not None:
            build = build if isinstance(build, dict) else {"context": build}
            assert (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).is_file(), name


# --------------------------------------------------------------------------- prometheus and grafana


def test_prometheus_scrapes_every_service() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    assert d.prometheus_problems(config, d.service_names()) == []


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:sy|nv)_[a-z_]+|vllm:[a-z_:]+)", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_grafana_dashboard_uses_metrics_that_exist() -> None:
    dash = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "switchyard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = set().union(*(_metric_names(e) for e in exprs))
    code = "\n".join(
        p.read_text() for p in [*(ROOT / "shared").rglob("*.py"), *(ROOT / "services").rglob("*.py")]
    )
    for name in sorted(n for n in used if n.startswith("sy_")):
        assert f'"{name}"' in code, f"dashboard uses {name}, which no service exports"
    # vLLM's own metrics, re-exported by the worker's /metrics (RUNTIME-NOTES; vLLM 0.32 names).
    vllm_known = {
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    }
    assert {n for n in used if n.startswith("vllm:")} <= vllm_known
    for wanted in (
        "sy_stage_seconds",
        "sy_consumer_lag",
        "sy_queue_wait_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
    ):
        assert wanted in used, f"dashboard lacks {wanted}"
    assert any('service="cache"' in e for e in exprs), "dashboard lacks the cache hit rate"
    # Provisioning points where compose mounts the dashboards.
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/switchyard.yaml").read_text())
    mounts = d.load_compose()["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['providers'][0]['options']['path']}:ro" in mounts


# --------------------------------------------------------------------------- kubernetes


def test_every_file_a_kustomization_names_exists_and_parses() -> None:
    for directory in [d.K8S / "base", d.OVERLAY, *(d.K8S / "components").iterdir()]:
        assert d.kustomization_problems(directory) == [], directory


def test_k8s_probes_pools_pdbs_hpas_and_settings(
    k8s: tuple[list[dict[str, Any]], dict[str, str], dict[str, str]],
) -> None:
    docs, config, secrets = k8s
    assert d.k8s_problems(docs, config, secrets) == []


def test_k8s_gpu_worker_and_secrets(k8s: tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]) -> None:
    docs, config, secrets = k8s
    wl = d.workloads(docs)
    vllm = wl["vllm-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert vllm["image"].startswith("switchyard-vllm:")
    assert wl["triton"]["spec"]["template"]["spec"]["nodeSelector"] == {"switchyard.io/pool": "cpu"}
    # The Secret is generated from a git-ignored env file; the example has placeholders only.
    assert "deploy/k8s/overlays/*/secrets.env" in (ROOT / ".gitignore").read_text()
    example = d.read_env_file(d.OVERLAY / "secrets.env.example")
    for key, value in example.items():
        stripped = re.sub(r"<[^>]*>", "", value)
        assert "<" in value and not re.search(r"[A-Za-z0-9]{12,}", stripped), (
            f"{key} example is not a placeholder"
        )


def test_k8s_overlay_renders_with_kustomize(tmp_path: Path) -> None:
    """The real kustomize (kubectl's) builds the overlay; the same checks hold on what it renders."""
    docs = d.render_overlay(tmp_path)
    if docs is None:
        pytest.skip("kubectl is not installed: the file-level kustomize checks above still ran")
    config, secrets = d.rendered_config(docs)
    assert config and secrets, "the ConfigMap and Secret generators produced nothing"
    assert d.k8s_problems(docs, config, secrets) == []
    assert {x["metadata"].get("namespace") for x in docs if x["kind"] != "Namespace"} == {"switchyard"}
    for w in d.workloads(docs).values():
        for c in w["spec"]["template"]["spec"]["containers"]:
            assert c["image"].startswith("registry.example.com/switchyard/"), c["image"]
    kinds = {x["kind"] for x in docs}
    assert {"PodMonitor", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Job", "Deployment"} <= kinds


def test_k8s_images_are_pinned_after_the_overlay() -> None:
    k = yaml.safe_load((d.OVERLAY / "kustomization.yaml").read_text())
    for img in k["images"]:
        assert d.image_pinned(f"{img.get('newName', img['name'])}:{img['newTag']}"), img


def test_prometheus_adapter_exposes_the_metric_the_hpas_use() -> None:
    values = yaml.safe_load((d.K8S / "prometheus-adapter" / "values.yaml").read_text())
    rule = values["rules"]["external"][0]
    assert "sy_consumer_lag" in rule["seriesQuery"] and rule["name"]["as"] == "sy_stage_lag"


# --------------------------------------------------------------------------- images and secrets


def test_dockerfiles_pin_their_bases_and_copy_what_exists(compose: dict[str, Any]) -> None:
    for path in (
        ROOT / "Dockerfile",
        ROOT / "deploy" / "vllm.Dockerfile",
        ROOT / "deploy" / "triton.Dockerfile",
    ):
        assert d.dockerfile_problems(path) == [], path
    probes = [s["build"] for s in compose["services"].values() if isinstance(s.get("build"), dict)]
    probes = [b for b in probes if b.get("context") == "deploy/probe"]
    assert len(probes) == 2, "the collector and Jaeger build on deploy/probe"
    for build in probes:
        assert d.dockerfile_problems(ROOT / "deploy" / "probe" / "Dockerfile", build["args"]) == []
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"var", ".venv", ".git"} <= set(ignored), "the build context must leave out var/ and .venv"


def _pyproject_deps() -> dict[str, str]:
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        name = re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0]
        out[name.lower().replace("_", "-")] = dep.replace(" ", "")
    return out


def _vllm_image_packages() -> tuple[set[str], dict[str, str]]:
    text = (ROOT / "deploy" / "vllm.Dockerfile").read_text()
    provided = set(re.search(r"# base image provides: (.*)", text).group(1).split())  # type: ignore[union-attr]
    installed = {}
    for spec in re.findall(r'"([A-Za-z0-9_.-]+[<>=!~][^"]*)"', text):
        name = re.split(r"[<>=!~]", spec, maxsplit=1)[0]
        installed[name.lower().replace("_", "-")] = spec
    return provided, installed


def vllm_image_problems(provided: set[str], installed: dict[str, str]) -> list[str]:
    """Everything the worker imports is in the vLLM image or installed at pyproject's pin."""
    deps = _pyproject_deps()
    dists = packages_distributions()
    problems = []
    for top in sorted(d.third_party_imports("vllm_worker")):
        names = {n.lower().replace("_", "-") for n in dists.get(top, [])}
        ours = sorted(n for n in names if n in deps)
        if not ours:
            if top not in provided:
                problems.append(
                    f"worker imports {top}: not in pyproject and not listed as provided by the image"
                )
            continue
        for dist in ours:
            if dist in installed:
                if installed[dist] != deps[dist]:
                    problems.append(f"vllm.Dockerfile pins {installed[dist]}, pyproject {deps[dist]}")
            elif dist not in provided and top not in provided:
                problems.append(f"worker imports {top} ({dist}): neither installed nor provided by the image")
    return problems


def test_vllm_image_carries_what_the_worker_imports() -> None:
    provided, installed = _vllm_image_packages()
    assert vllm_image_problems(provided, installed) == []


def test_no_secret_literal_in_deployment_files() -> None:
    problems = []
    for path in d.deploy_files():
        problems += d.secret_problems_in_text(str(path.relative_to(ROOT)), path.read_text())
    assert problems == []


def test_readme_documents_production() -> None:
    text = (ROOT / "README.md").read_text()
    assert "## Running in production" in text
    section = text.split("## Running in production", 1)[1].split("\n## ", 1)[0]
    for topic in (
        "SY_KAFKA_BOOTSTRAP",
        "SY_MILVUS_URI",
        "SY_S3_ENDPOINT",
        "SY_CELERY_BROKER",
        "partitions",
        "lag",
    ):
        assert topic in section, topic


# --------------------------------------------------------------------------- the checkers catch breakage


def _broken(compose: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(compose)


def test_checker_catches_a_missing_healthcheck(compose: dict[str, Any]) -> None:
    c = _broken(compose)
    del c["services"]["router"]["healthcheck"]
    assert any("router: no healthcheck" in p for p in d.compose_problems(c))
    c = _broken(compose)
    c["services"]["gateway"]["depends_on"]["registry"] = {"condition": "service_started"}
    assert any("depends_on registry needs condition service_healthy" in p for p in d.compose_problems(c))


def test_checker_refuses_duplicate_keys() -> None:
    text = d.COMPOSE.read_text()
    text = text.replace("\nvolumes:\n", "\n  reward:\n    image: switchyard:0.1.0\nvolumes:\n", 1)
    with pytest.raises(yaml.YAMLError, match="duplicate key 'reward'"):
        d.load_compose(text)


def test_checker_catches_unpinned_images(compose: dict[str, Any]) -> None:
    c = _broken(compose)
    c["services"]["redis"]["image"] = "redis:latest"
    c["services"]["kafka"]["image"] = "apache/kafka"
    problems = d.compose_problems(c)
    assert any("redis: image not pinned" in p for p in problems)
    assert any("kafka: image not pinned" in p for p in problems)
    assert d.image_pinned("nvcr.io/nvidia/tritonserver:25.01-py3")
    assert d.image_pinned("minio/minio:RELEASE.2025-04-22T22-12-26Z")
    assert d.image_pinned("busybox@sha256:" + "0" * 64)
    assert not d.image_pinned("redis:7")


def test_checker_catches_missing_and_wrong_settings(compose: dict[str, Any]) -> None:
    c = _broken(compose)
    del c["services"]["cache"]["environment"]["SY_MILVUS_URI"]
    c["services"]["router"]["environment"]["SY_HEALTH_PORT"] = "9999"
    c["services"]["gateway"]["environment"]["SY_GATEWAY_TIMEOUT"] = "5"  # a typo of SY_GATEWAY_TIMEOUT_S
    c["services"]["preprocess"]["environment"]["SY_TOPIC_PARTITIONS"] = "zero"
    c["services"]["registry"]["volumes"] = []
    problems = "\n".join(d.compose_service_problems(c, d.service_names()))
    assert "cache reads SY_MILVUS_URI but it is not set" in problems
    assert "router: SY_HEALTH_PORT should be 9103" in problems
    assert "unknown setting SY_GATEWAY_TIMEOUT" in problems
    assert "SY_TOPIC_PARTITIONS" in problems
    assert "registry: reads models from SY_MODELS_DIR but mounts nothing there" in problems
    c = _broken(compose)
    c["services"]["router"]["environment"]["SY_POOLS"] = "[]"
    c["services"]["vllm_worker"]["environment"]["SY_VLLM_POOL"] = "gpu-a"
    problems = "\n".join(d.compose_consistency_problems(c, d.service_names()))
    assert "SY_POOLS differs" in problems and "gpu-a is not a vllm pool" in problems
    assert d.pool_problems("sample", [{"name": "x", "models": ["other"]}]) != []


def test_checker_catches_a_missing_service_and_scrape(compose: dict[str, Any]) -> None:
    c = _broken(compose)
    del c["services"]["reward"]
    assert "compose: service reward missing" in d.compose_service_problems(c, d.service_names())
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    config["scrape_configs"] = [j for j in config["scrape_configs"] if j["job_name"] != "cache"]
    assert d.prometheus_problems(config, d.service_names()) == ["prometheus: no scrape of cache:9102"]


def test_checker_catches_k8s_breakage(
    k8s: tuple[list[dict[str, Any]], dict[str, str], dict[str, str]],
) -> None:
    docs, config, secrets = copy.deepcopy(k8s)
    wl = d.workloads(docs)
    router = wl["router"]["spec"]["template"]["spec"]
    del router["containers"][0]["readinessProbe"]
    wl["vllm-worker"]["spec"]["template"]["spec"]["tolerations"] = []
    wl["preprocess"]["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] = "/"
    docs = [x for x in docs if not (x["kind"] == "PodDisruptionBudget" and x["metadata"]["name"] == "cache")]
    for x in docs:
        if x["kind"] == "HorizontalPodAutoscaler" and x["metadata"]["name"] == "router":
            x["spec"]["maxReplicas"] = 64
    cache_env = wl["cache"]["spec"]["template"]["spec"]["containers"][0]["env"]
    cache_env.append({"name": "SY_S3_SECRET_KEY", "value": "hunter2hunter2"})
    config = {k: v for k, v in config.items() if k != "SY_MILVUS_URI"}
    problems = "\n".join(d.k8s_problems(docs, config, secrets))
    assert "router/router: no readinessProbe" in problems
    assert "vllm-worker: GPU pod must" in problems
    assert "preprocess: livenessProbe should GET /healthz" in problems
    assert "cache: no PodDisruptionBudget" in problems
    assert "router: maxReplicas 64 > 4 partitions" in problems
    assert "SY_S3_SECRET_KEY must come from the Secret" in problems
    assert "cache reads SY_MILVUS_URI but it is not set" in problems


def test_checker_catches_a_gateway_that_keeps_state_per_replica(
    k8s: tuple[list[dict[str, Any]], dict[str, str], dict[str, str]],
) -> None:
    """Issue 37: the gateway as a StatefulSet with affinity, or without the shared Redis, is caught."""
    docs, config, secrets = copy.deepcopy(k8s)
    assert d.scale_out_problems(docs, config, secrets) == []
    gw = d.workloads(docs)["gateway"]
    gw["kind"] = "StatefulSet"
    env = gw["spec"]["template"]["spec"]["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != "SY_LIMITS_STORAGE_URI"]
    reg = d.workloads(docs)["registry"]["spec"]["template"]["spec"]["containers"][0]["env"]
    reg.append({"name": "SY_LIMITS_STORAGE_URI", "value": "memory://"})
    for x in docs:
        if x["kind"] == "Service" and x["metadata"]["name"] == "gateway":
            x["spec"]["sessionAffinity"] = "ClientIP"
    problems = "\n".join(d.scale_out_problems(docs, config, secrets))
    assert "k8s gateway: must be a stateless Deployment" in problems
    assert "k8s gateway: SY_LIMITS_STORAGE_URI must name the shared Redis" in problems
    assert "k8s registry: SY_LIMITS_STORAGE_URI must name the shared Redis, got 'memory://'" in problems
    assert "k8s service gateway: session affinity" in problems


def test_checker_catches_a_missing_kustomize_file(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [gone.yaml, ok.yaml]\n")
    (tmp_path / "ok.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n")
    problems = d.kustomization_problems(tmp_path)
    assert any("gone.yaml does not exist" in p for p in problems)
    assert any("lacks apiVersion/kind/name" in p for p in problems)


def test_checker_catches_secret_literals() -> None:
    samples = {
        "MINIO_ROOT_PASSWORD: supersecretvalue": True,
        "SY_INTERNAL_TOKEN=abc123abc123": True,
        "  - AWS key AKIAABCDEFGHIJKLMNOP": True,
        'SY_API_KEYS: \'{"sk-abcdefghijklmnopqrstu": "acme"}\'': True,
        "MINIO_ROOT_PASSWORD: ${SY_S3_SECRET_KEY:?set it}": False,
        "SY_INTERNAL_TOKEN=<internal token>": False,
        'SY_API_KEYS={"<api key>": "<tenant>"}': False,
        "- name: SY_S3_SECRET_KEY": False,
    }
    for line, bad in samples.items():
        assert bool(d.secret_problems_in_text("sample", line)) is bad, line


def test_checker_catches_a_vllm_image_without_a_dependency() -> None:
    provided, installed = _vllm_image_packages()
    del installed["aiokafka"]
    installed["structlog"] = "structlog==1.0.0"
    problems = "\n".join(vllm_image_problems(provided, installed))
    assert "worker imports aiokafka (aiokafka): neither installed nor provided" in problems
    assert "pins structlog==1.0.0" in problems


def test_checker_catches_unpinned_dockerfile_base(tmp_path: Path) -> None:
    path = d.ROOT / "deploy" / "probe" / "Dockerfile"
    assert any("no pinned build arg" in p for p in d.dockerfile_problems(path))
    assert any(
        "not pinned" in p for p in d.dockerfile_problems(path, {"BASE": "jaegertracing/jaeger:latest"})
    )


def test_triton_repository_parses_as_tritons_model_config_and_python_models_use_only_declared_tensors() -> (
    None
):
    """What NVIDIA's container would refuse at load: a config.pbtxt that is not a valid
    ModelConfig (parsed strictly with the schema tritonclient ships, the server's own), a name
    that is not its folder's, a python model without 1/model.py, or a tensor the model reads or
    sends that its config does not declare."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    repo = ROOT / "deploy" / "triton" / "models"
    dockerfile = (ROOT / "deploy" / "triton.Dockerfile").read_text()
    assert "COPY deploy/triton/models /srv/triton/models" in dockerfile  # unchanged in the image
    image = re.search(r"^FROM (\S+)", dockerfile, re.M).group(1)  # type: ignore[union-attr]
    assert f"`{image}`" in (ROOT / "README.md").read_text()  # README names the image built
    by_code: dict[Path, list[Any]] = {}  # sy-tiny, sy-tiny-bf16 and sy-vlm share one model.py
    for cfg_path in sorted(repo.glob("*/config.pbtxt")):
        cfg = text_format.Parse(cfg_path.read_text(), model_config_pb2.ModelConfig())
        folder = cfg_path.parent
        assert cfg.name == folder.name
        assert cfg.backend == "python"
        by_code.setdefault((folder / "1" / "model.py").resolve(), []).append(cfg)
    assert sum(len(v) for v in by_code.values()) == 5
    for path, cfgs in by_code.items():
        code = path.read_text()
        read = set(re.findall(r'get_input_tensor_by_name\(request, "(\w+)"\)', code))
        read |= set(re.findall(r'_(?:scalar|strings|texts?)\(request, "(\w+)"', code))
        sent = set(re.findall(r'pb_utils\.Tensor\(\s*"(\w+)"', code))
        declared_in = {t.name for c in cfgs for t in c.input}
        assert read and read <= declared_in, (path, read - declared_in)
        common = set.intersection(*({t.name for t in c.input} for c in cfgs))
        for cfg in cfgs:
            inputs, outputs = {t.name for t in cfg.input}, {t.name for t in cfg.output}
            assert inputs <= read, (cfg.name, inputs - read)  # nothing declared that the code ignores
            # an input only some of them declare (IMAGES: sy-vlm) must be optional: absent = None
            assert all(t.optional for t in cfg.input if t.name not in common), cfg.name
            assert sent and sent <= outputs, (cfg.name, sent - outputs)
            if cfg.model_transaction_policy.decoupled:
                assert "get_response_sender" in code


def test_k8s_trust_boundaries(k8s: tuple[list[dict[str, Any]], dict[str, str], dict[str, str]]) -> None:
    """Issue 33: the sandbox runner holds nothing and reaches nothing; every other pod refuses
    ingress unless a policy admits it; the runner admits the reward pods alone."""
    docs, _, _ = k8s
    runner = d.workloads(docs)["sandbox-runner"]["spec"]["template"]["spec"]
    assert runner["automountServiceAccountToken"] is False and runner["enableServiceLinks"] is False
    for c in runner["containers"]:
        assert "envFrom" not in c, "the sandbox runner takes no ConfigMap or Secret"
        refs = [e for e in c.get("env", []) if "valueFrom" in e]
        assert not refs, f"the sandbox runner reads {refs}"
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert not any(v.get("secret") or v.get("configMap") for v in runner.get("volumes", []))
    policies = {p["metadata"]["name"]: p["spec"] for p in docs if p["kind"] == "NetworkPolicy"}
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    own = policies["sandbox-runner"]
    assert own["egress"] == [] and "Egress" in own["policyTypes"]
    assert own["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "reward"}}}
    ]
    runner_labels = {"app.kubernetes.io/name": "sandbox-runner", "app.kubernetes.io/component": "sandbox"}

    def selects_runner(selector: dict[str, Any]) -> bool:
        if any(runner_labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
            return False
        for e in selector.get("matchExpressions", []):
            value = runner_labels.get(e["key"])
            if (e["operator"] == "In") != (value in e["values"]):
                return False
        return True

    admitting = [n for n, p in policies.items() if p.get("ingress") and selects_runner(p["podSelector"])]
    assert admitting == ["sandbox-runner"], f"policies admitting more than the reward pods: {admitting}"


def test_strimzi_acls_let_a_tenant_write_only_the_ingest_topic() -> None:
    users = [
        u
        for u in yaml.safe_load_all((ROOT / "deploy/k8s/components/strimzi-acls/kafkausers.yaml").read_text())
        if u and u["kind"] == "KafkaUser"
    ]
    tenants = [u for u in users if u["metadata"]["name"].startswith("switchyard-ingest-")]
    assert tenants and any(u["metadata"]["name"] == "switchyard-services" for u in users)
    for u in tenants:
        acls = u["spec"]["authorization"]["acls"]
        assert acls == [
            {
                "resource": {"type": "topic", "name": "sy.requests", "patternType": "literal"},
                "operations": ["Describe", "Write"],
            }
        ], acls
