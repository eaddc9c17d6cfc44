"""The Helm chart, rendered by Helm's own engine (helm-python-sdk), linted, and every
manifest validated against a current Kubernetes schema (kubernetes-validate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from promtool import promtool

from ferryman_server.rollouts.settings import RolloutSettings

CHART = Path(__file__).resolve().parents[3] / "helm" / "ferryman"
KUBE_VERSION = kubernetes_validate.latest_version()
CRDS = {"ServiceMonitor", "PrometheusRule", "ScaledObject"}
WORKLOADS = {"Deployment", "StatefulSet"}

VALUE_SETS = {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}
"""The chart's ci/ value sets (as chart-testing runs them); every test below renders them."""


def value_set(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(VALUE_SETS[name].read_text()) or {}
    return loaded


DEFAULTS = value_set("external-db")
ALL_ON = value_set("all-on")


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(CHART)
    rendered = chart.render(values, name="fm", namespace="ferryman", is_install=True)
    docs = []
    for path, text in rendered.items():
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(value_set(request.param))


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["spec"]["template"]["spec"]["containers"])


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_lints_clean(name: str) -> None:
    report = helm.lint(CHART, value_set(name), strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


def test_every_manifest_is_valid_kubernetes(manifests: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in manifests}
    assert {
        "Deployment",
        "Service",
        "Job",
        "Secret",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    } <= kinds
    for doc in manifests:
        if doc["kind"] in CRDS:
            assert doc["apiVersion"] in ("monitoring.coreos.com/v1", "keda.sh/v1alpha1") and doc["spec"]
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_containers_have_probes_resources_and_run_as_non_root(manifests: list[dict[str, Any]]) -> None:
    for doc in manifests:
        if doc["kind"] not in WORKLOADS | {"Job"}:
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in containers(doc):
            where = f"{doc['kind']}/{doc['metadata']['name']}/{container['name']}"
            assert container["resources"]["requests"] and container["resources"]["limits"], where
            context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
            assert context.get("runAsNonRoot") is True and context.get("runAsUser", 0) != 0, where
            assert context.get("allowPrivilegeEscalation") is False, where
            if doc["kind"] in WORKLOADS:  # a Job's container runs to completion: no probes
                assert "readinessProbe" in container and "livenessProbe" in container, where


def test_pdb_and_hpa_target_real_workloads(manifests: list[dict[str, Any]]) -> None:
    workloads = {d["metadata"]["name"]: d for d in manifests if d["kind"] in WORKLOADS}
    for pdb in by_kind(manifests, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        matched = [
            w
            for w in workloads.values()
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, pdb["metadata"]["name"]
    for hpa in by_kind(manifests, "HorizontalPodAutoscaler"):
        target = workloads[hpa["spec"]["scaleTargetRef"]["name"]]
        assert target["kind"] == hpa["spec"]["scaleTargetRef"]["kind"]
        assert "replicas" not in target["spec"], "an autoscaled Deployment must not pin replicas"
    for scaled in by_kind(manifests, "ScaledObject"):
        assert "replicas" not in workloads[scaled["spec"]["scaleTargetRef"]["name"]]["spec"]
    for workload in workloads.values():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_node_pools_request_gpus_and_drain_gracefully() -> None:
    docs = render(ALL_ON)
    nodes = {
        d["metadata"]["name"]: d for d in by_kind(docs, "Deployment") if "-node-" in d["metadata"]["name"]
    }
    gpu, cpu = nodes["fm-ferryman-node-gpu"], nodes["fm-ferryman-node-cpu"]
    (gpu_container,) = containers(gpu)
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert gpu["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 90
    # An exec, not the sleep action (Kubernetes 1.30): the chart says it supports 1.27.
    assert gpu_container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "5"]}}
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.27.0-0"
    assert "nvidia.com/gpu" not in containers(cpu)[0]["resources"]["limits"]
    # GPU pods: the NVIDIA runtime class and a memory-backed /dev/shm (64 MiB by default).
    gpu_pod = gpu["spec"]["template"]["spec"]
    assert gpu_pod["runtimeClassName"] == "nvidia"
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in gpu_pod["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in gpu_container["volumeMounts"]
    assert "shm" not in [v["name"] for v in cpu["spec"]["template"]["spec"]["volumes"]]
    env = {e["name"]: e.get("value") for e in gpu_container["env"]}
    assert env["FERRYMAN_NODE_POOL"] == "gpu" and env["FERRYMAN_NODE_DRAIN_GRACE_S"] == "90"
    assert env["FERRYMAN_NODE_GENERATION_SLOTS"] == "8" and env["FERRYMAN_NODE_GENERATION_ADMISSION"] == "vtc"
    assert env["FERRYMAN_NODE_GENERATION_PRECISION"] == "float16"
    (job,) = by_kind(docs, "Job")
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "ferryman db upgrade" in script and "ferryman model place minilm --version 1 --node gpu" in script
    # The bundled PostgreSQL is created after pre-install hooks: on install the migration waits for it.
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    (external,) = by_kind(render(DEFAULTS), "Job")
    assert external["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_monitoring_objects_carry_rules_and_dashboards() -> None:
    docs = render(ALL_ON)
    (rule,) = by_kind(docs, "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "FerrymanNodeDown" in alerts
    dashboards = [
        d for d in by_kind(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert len(dashboards) == 4
    assert by_kind(docs, "ServiceMonitor")[0]["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(
    "bad",
    [
        {"router": {"replicas": 0}},
        {"router": {"maxStreamsPerConnection": -1}},
        {"quota": {"failMode": "sometimes"}},
        {"podSecurityContext": {"runAsNonRoot": False}},
        {"nodePools": [{"name": "Bad_Name"}]},
        {"surprise": True},
    ],
)
def test_values_that_break_the_schema_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render({**DEFAULTS, **bad})


def test_default_values_install_with_the_charts_own_postgresql_and_redis() -> None:
    docs = render({})
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("StatefulSet", "fm-ferryman-postgresql") in kinds and ("Deployment", "fm-ferryman-redis") in kinds
    secrets = {d["metadata"]["name"]: d for d in by_kind(docs, "Secret")}
    password = secrets["fm-ferryman-postgresql"]["stringData"]["password"]
    assert len(password) >= 32, "a random password, not a default one"
    url = secrets["fm-ferryman-config"]["stringData"]["database-url"]
    assert url == f"postgresql://postgres:{password}@fm-ferryman-postgresql:5432/ferryman"
    # A database of one's own replaces the bundled one.
    assert not [d for d in render(DEFAULTS) if "postgresql" in d["metadata"]["name"]]


def test_a_database_is_required_without_the_bundled_one() -> None:
    with pytest.raises(helm.HelmError, match=r"database\.url"):
        render({"postgresql": {"enabled": False}})


@pytest.mark.parametrize(
    "split",
    [
        {"quota": {"replicas": 2}},
        {"quota": {"enabled": False, "replicas": 1}, "router": {"replicas": 2}},
        {
            "quota": {"enabled": False, "replicas": 1},
            "router": {"replicas": 1, "autoscaling": {"maxReplicas": 3}},
        },
    ],
)
def test_several_quota_stores_without_redis_are_refused(split: dict[str, Any]) -> None:
    """Without Redis every quota replica (or router hosting quotas) counts alone: limits and
    idempotency would split silently, so the chart does not render."""
    no_redis: dict[str, Any] = {"redisServer": {"enabled": False}}
    with pytest.raises(helm.HelmError, match=r"needs? Redis"):
        render({**DEFAULTS, **no_redis, **split})
    # One store: a single quota replica without Redis, or any number with it.
    one = {"quota": {"replicas": 1}, "router": {"replicas": 2}}
    assert render({**DEFAULTS, **no_redis, **one})
    assert render({**DEFAULTS, **split})


def test_scrape_targets_serve_metrics_and_pools_scale_on_their_own_queues() -> None:
    docs = render(ALL_ON)
    services = {d["metadata"]["name"]: d["spec"]["ports"] for d in by_kind(docs, "Service")}
    console = services["fm-ferryman-console"]
    assert [p["name"] for p in console] == ["http"], "the console serves HTTP and no metrics"
    quota = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "fm-ferryman-quota")
    assert "--metrics-listen" in containers(quota)[0]["args"], "every scraped service serves metrics"
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["targetLabels"] == ["app.kubernetes.io/component"]
    (scaled,) = by_kind(docs, "ScaledObject")
    queue = scaled["spec"]["triggers"][0]
    assert queue["metadata"]["query"] == (
        'sum(ferryman_queue_depth{model="mlp",version="1"}'
        ' or ferryman_queue_depth{model="minilm",version="1"}) or vector(0)'
    )


def test_a_pool_scales_ahead_of_its_forecast_and_down_to_zero() -> None:
    docs = render(ALL_ON)
    (scaled,) = by_kind(docs, "ScaledObject")
    _, ahead = scaled["spec"]["triggers"]
    assert ahead["metadata"]["query"] == 'max(ferryman_forecast_replicas{pool="gpu"})'
    assert ahead["metadata"]["threshold"] == "1", "as many replicas as the forecast says"
    assert scaled["spec"]["idleReplicaCount"] == 0 < scaled["spec"]["minReplicaCount"]
    workloads = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    rollouts = {e["name"]: e.get("value") for e in containers(workloads["fm-ferryman-rollouts"])[0]["env"]}
    assert json.loads(rollouts["FERRYMAN_ROLLOUT_FORECAST_POOLS"]) == {
        "gpu": 'sum(rate(ferryman_requests_total{model="mlp"}[5m]))'
    }
    assert RolloutSettings(
        prometheus_url="http://p:9090",
        forecast_pools=json.loads(rollouts["FERRYMAN_ROLLOUT_FORECAST_POOLS"]),
        forecast_per_replica=float(rollouts["FERRYMAN_ROLLOUT_FORECAST_PER_REPLICA"]),
        forecast_lead_s=float(rollouts["FERRYMAN_ROLLOUT_FORECAST_LEAD_S"]),
    ).forecast_pools == {"gpu": 'sum(rate(ferryman_requests_total{model="mlp"}[5m]))'}
    batcher = {e["name"]: e.get("value") for e in containers(workloads["fm-ferryman-batcher"])[0]["env"]}
    assert batcher["FERRYMAN_BATCHER_HOLD_FOR_NODE"] == "true", "a pool at zero: requests wait for a node"
    plain = {d["metadata"]["name"]: d for d in by_kind(render(DEFAULTS), "Deployment")}
    assert "FERRYMAN_BATCHER_HOLD_FOR_NODE" not in {
        e["name"] for e in containers(plain["fm-ferryman-batcher"])[0]["env"]
    }


def pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ferryman's own workloads (not the bundled PostgreSQL and Redis)."""
    return [d for d in docs if d["kind"] in ("Deployment", "Job") and "ferryman" in containers(d)[0]["image"]]


MONITORING = {
    "namespaceSelector": {},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
"""The default monitoring selector (values.yaml: networkPolicy.monitoring)."""


def test_internal_apis_are_reachable_only_by_their_callers() -> None:
    docs = render(ALL_ON)
    policies = {d["metadata"]["name"]: d["spec"] for d in by_kind(docs, "NetworkPolicy")}
    assert set(policies) == {
        "fm-ferryman-router",
        "fm-ferryman-batcher",
        "fm-ferryman-quota",
        "fm-ferryman-rollouts",
        "fm-ferryman-console",
        "fm-ferryman-postgresql",
        "fm-ferryman-redis",
    } | {f"fm-ferryman-node-{pool}" for pool in ("gpu", "cpu")}
    scrape = {"from": [MONITORING], "ports": [{"port": "metrics"}]}
    assert policies["fm-ferryman-rollouts"]["ingress"] == [scrape]  # serves no API

    def callers(name: str) -> set[str]:
        (internal, metrics) = policies[name]["ingress"]
        assert internal["ports"] == [{"port": "grpc"}] and metrics == scrape
        return {p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in internal["from"]}

    assert callers("fm-ferryman-batcher") == {"router"}
    assert callers("fm-ferryman-quota") == {"router", "console"}
    assert callers("fm-ferryman-node-gpu") == callers("fm-ferryman-node-cpu") == {"batcher", "console"}
    tenants, router_metrics = policies["fm-ferryman-router"]["ingress"]
    assert "from" not in tenants  # tenants come from anywhere, to the gRPC and HTTP doors
    assert tenants["ports"] == [{"port": "grpc"}, {"port": "http"}]
    assert router_metrics == scrape, "per-tenant figures: the monitoring selector only"
    assert policies["fm-ferryman-console"]["ingress"] == [{"ports": [{"port": "http"}]}]
    for store, port in (("postgresql", "postgresql"), ("redis", "redis")):
        (rule,) = policies[f"fm-ferryman-{store}"]["ingress"]
        assert rule["ports"] == [{"port": port}]
        assert rule["from"] == [
            {
                "podSelector": {
                    "matchLabels": {"app.kubernetes.io/name": "ferryman", "app.kubernetes.io/instance": "fm"}
                }
            }
        ]
    assert not by_kind(render({**DEFAULTS, "networkPolicy": {"enabled": False}}), "NetworkPolicy")


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["no-values", "all-on"])
def test_network_policies_select_every_workload(values: dict[str, Any]) -> None:
    docs = render(values)
    selectors = [d["spec"]["podSelector"]["matchLabels"] for d in by_kind(docs, "NetworkPolicy")]
    workloads = by_kind(docs, "Deployment") + by_kind(docs, "StatefulSet")
    assert len(workloads) >= 8
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(all(labels.get(k) == v for k, v in s.items()) for s in selectors), workload["metadata"][
            "name"
        ]
    for policy in by_kind(docs, "NetworkPolicy"):
        for rule in policy["spec"]["ingress"]:
            if {"port": "metrics"} in rule["ports"]:
                assert rule.get("from") == [MONITORING], policy["metadata"]["name"]


def test_the_bundled_redis_has_a_password_its_url_carries() -> None:
    docs = render({})
    (redis,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "fm-ferryman-redis"]
    (container,) = containers(redis)
    assert "--requirepass" in container["command"][-1] and "$REDIS_PASSWORD" in container["command"][-1]
    # Bounded below its container's limit, refusing writes when full (never evicting).
    assert "--maxmemory 384mb --maxmemory-policy noeviction" in container["command"][-1]
    assert container["resources"]["limits"]["memory"] == "512Mi"
    secrets = {d["metadata"]["name"]: d for d in by_kind(docs, "Secret")}
    password = secrets["fm-ferryman-redis"]["stringData"]["password"]
    assert len(password) >= 32
    urls = [v for v in secrets["fm-ferryman-config"]["stringData"].values() if v.startswith("redis://")]
    assert urls == [f"redis://:{password}@fm-ferryman-redis:6379/0"]
    given = render({"redisServer": {"enabled": True, "image": "redis:7-alpine", "password": "chosen-one"}})
    assert {d["metadata"]["name"]: d for d in by_kind(given, "Secret")}["fm-ferryman-redis"][
        "stringData"
    ] == {"password": "chosen-one"}


def test_the_rollouts_controller_is_scraped_through_its_service(manifests: list[dict[str, Any]]) -> None:
    (service,) = [d for d in by_kind(manifests, "Service") if d["metadata"]["name"] == "fm-ferryman-rollouts"]
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]


def test_one_rollout_controller_reads_the_routers_from_prometheus(manifests: list[dict[str, Any]]) -> None:
    (controller,) = [
        d for d in by_kind(manifests, "Deployment") if d["metadata"]["name"] == "fm-ferryman-rollouts"
    ]
    assert controller["spec"]["replicas"] == 1  # a second would only race the first
    (container,) = containers(controller)
    assert container["args"][:2] == ["serve", "rollouts"]
    assert container["args"][container["args"].index("--prometheus-url") + 1].startswith("http")
    disabled = render({**DEFAULTS, "rollouts": {"enabled": False}})
    assert not [d for d in disabled if d["metadata"]["name"].endswith("-rollouts")]


def test_the_router_serves_its_http_doors(manifests: list[dict[str, Any]]) -> None:
    (router,) = [d for d in by_kind(manifests, "Deployment") if d["metadata"]["name"] == "fm-ferryman-router"]
    (container,) = containers(router)
    assert "--http-listen" in container["args"]
    assert container["args"][container["args"].index("--http-listen") + 1] == "0.0.0.0:7080"
    assert {"name": "http", "containerPort": 7080} in container["ports"]
    (service,) = [d for d in by_kind(manifests, "Service") if d["metadata"]["name"] == "fm-ferryman-router"]
    assert {"name": "http", "port": 7080, "targetPort": "http", "appProtocol": "http"} in service["spec"][
        "ports"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FERRYMAN_ROUTER_MAX_STREAMS_PER_CONNECTION"] == "0"  # no limit unless a deployment sets one


def test_every_service_gets_the_release_service_token(manifests: list[dict[str, Any]]) -> None:
    (secret,) = [d for d in by_kind(manifests, "Secret") if d["metadata"]["name"].endswith("service-token")]
    assert len(secret["data"]["service-token"]) >= 48
    for doc in pods(manifests):
        for container in containers(doc):
            env = {e["name"]: e for e in container.get("env", [])}
            ref = env["FERRYMAN_SERVICE_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": secret["metadata"]["name"], "key": "service-token"}


def test_tls_from_a_cert_manager_secret() -> None:
    docs = render({**DEFAULTS, "tls": {"existingSecret": "fm-tls", "clientAuth": True}})
    for doc in pods(docs):
        spec = doc["spec"]["template"]["spec"]
        assert {"name": "tls", "secret": {"secretName": "fm-tls"}} in spec["volumes"]
        for container in spec["containers"]:
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["FERRYMAN_TLS_CERT"] == "/etc/ferryman/tls/tls.crt"
            assert env["FERRYMAN_TLS_CA"] == "/etc/ferryman/tls/ca.crt"
            assert env["FERRYMAN_TLS_CLIENT_AUTH"] == "true"
            assert "grpc" not in container.get("readinessProbe", {})  # kubelet gRPC probes speak no TLS


def test_metrics_go_over_otlp_only_when_asked() -> None:
    for values, wanted in ((DEFAULTS, None), (ALL_ON, "otlp")):
        for doc in pods(render(values)):
            for container in containers(doc):
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                assert env.get("OTEL_METRICS_EXPORTER") == wanted


def test_routers_resolve_every_batcher_pod_and_it_is_scraped_once(manifests: list[dict[str, Any]]) -> None:
    deployments = {d["metadata"]["name"]: d for d in by_kind(manifests, "Deployment")}
    args = containers(deployments["fm-ferryman-router"])[0]["args"]
    host, _, port = args[args.index("--batchers") + 1].rpartition(":")
    (headless,) = [d for d in by_kind(manifests, "Service") if d["metadata"]["name"] == host]
    assert headless["spec"]["clusterIP"] == "None", "one address per batcher pod, not one balanced IP"
    pod_labels = deployments["fm-ferryman-batcher"]["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= pod_labels.items()
    assert [(p["name"], p["port"]) for p in headless["spec"]["ports"]] == [("grpc", int(port))]


def test_the_console_charts_from_prometheus_and_keeps_logins_across_upgrades() -> None:
    docs = render(ALL_ON)
    console = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "fm-ferryman-console")
    env = {e["name"]: e for e in containers(console)[0]["env"]}
    assert env["FERRYMAN_CONSOLE_PROMETHEUS_URL"]["value"].startswith("http")
    secret_ref = env["FERRYMAN_CONSOLE_SESSION_SECRET"]["valueFrom"]["secretKeyRef"]
    (secret,) = [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == secret_ref["name"]]
    assert len(secret["data"][secret_ref["key"]]) >= 48  # random, base64; kept by lookup on upgrade
    assert env["FERRYMAN_CONSOLE_QUOTA_ADDRESS"]["value"] == "fm-ferryman-quota:7002"


def test_nodes_fetch_artifacts_into_a_cache_volume_with_the_stores_credentials() -> None:
    (node,) = [
        d for d in by_kind(render({}), "Deployment") if d["metadata"]["name"] == "fm-ferryman-node-gpu"
    ]
    (container,) = containers(node)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FERRYMAN_DATA_DIR"] == "/var/lib/ferryman"
    assert env["FERRYMAN_NODE_ARTIFACT_CACHE_BYTES"] == str(20 * 1024**3)
    assert "AWS_ENDPOINT_URL" not in env and "envFrom" not in container  # AWS, the pod's identity
    volumes = {v["name"]: v for v in node["spec"]["template"]["spec"]["volumes"]}
    assert volumes["artifacts"] == {"name": "artifacts", "emptyDir": {"sizeLimit": "20Gi"}}
    assert {"name": "artifacts", "mountPath": "/var/lib/ferryman"} in container["volumeMounts"]
    minio = {
        "cacheGiB": 5,
        "existingClaim": "models",
        "s3": {"endpoint": "http://minio:9000", "region": "eu-1", "existingSecret": "minio-keys"},
    }
    (node,) = [
        d
        for d in by_kind(render({"artifacts": minio}), "Deployment")
        if d["metadata"]["name"] == "fm-ferryman-node-gpu"
    ]
    (container,) = containers(node)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000" and env["AWS_DEFAULT_REGION"] == "eu-1"
    assert container["envFrom"] == [{"secretRef": {"name": "minio-keys"}}]
    volumes = {v["name"]: v for v in node["spec"]["template"]["spec"]["volumes"]}
    assert volumes["artifacts"]["persistentVolumeClaim"] == {"claimName": "models"}


def test_trusted_proxies_reach_every_container() -> None:
    docs = render({"trustedProxies": ["10.42.0.0/16", "10.43.0.10"]})
    router = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "fm-ferryman-router")
    (container,) = containers(router)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FERRYMAN_TRUSTED_PROXIES"] == "10.42.0.0/16,10.43.0.10"
    assert "FERRYMAN_TRUSTED_PROXIES" not in {
        e["name"] for e in containers(by_kind(render({}), "Deployment")[0])[0]["env"]
    }


def keda_queries(docs: list[dict[str, Any]]) -> list[str]:
    return [t["metadata"]["query"] for d in by_kind(docs, "ScaledObject") for t in d["spec"]["triggers"]]


def test_every_rendered_keda_query_is_promql_promtool_accepts(tmp_path: Path) -> None:
    """Every ci/ value set, and each with its pools loading on demand (versions: []), which
    rendered ``sum()``: the queries KEDA would run, checked as recording rules by promtool."""
    on_demand = {**ALL_ON, "nodePools": [{**pool, "versions": []} for pool in ALL_ON["nodePools"]]}
    queries = [q for name in VALUE_SETS for q in keda_queries(render(value_set(name)))]
    queries += keda_queries(render(on_demand))
    assert len(queries) >= 4 and any(q.startswith("sum(ferryman_queue_depth)") for q in queries), queries
    rules = {
        "groups": [
            {"name": "keda", "rules": [{"record": f"keda:q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    (tmp_path / "keda.yaml").write_text(yaml.safe_dump(rules))
    done = promtool("check", "rules", "keda.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
