"""Registry commands: db, tenant, key, quota, model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from ferryman.priorities import PRIORITIES
from ferryman.v1 import node_pb2
from ferryman_server.cli.context import engine, migrated_engine, settings
from ferryman_server.cli.output import JsonFlag, console, emit, fail, refusals, table
from ferryman_server.kernel.artifacts import artifact_path, pushed_sha256, pushed_uri
from ferryman_server.kernel.schema import IOSchema
from ferryman_server.registry.migrate import upgrade
from ferryman_server.registry.reader import RegistryReader
from ferryman_server.registry.specs import QuotaLimits
from ferryman_server.registry.states import ModelFormat
from ferryman_server.registry.validation import RegistryError
from ferryman_server.registry.writer import RegistryWriter, VersionSpec

db_app = typer.Typer(help="Registry database.", no_args_is_help=True)
tenant_app = typer.Typer(help="Tenants.", no_args_is_help=True)
key_app = typer.Typer(help="API keys.", no_args_is_help=True)
quota_app = typer.Typer(help="Quota policies.", no_args_is_help=True)
model_app = typer.Typer(help="Models and versions.", no_args_is_help=True)

PRIORITY_HELP = "Default priority: " + ", ".join(f"{v} {n}" for n, v in PRIORITIES.items()) + "."


def writer() -> RegistryWriter:
    return RegistryWriter(migrated_engine(), actor="cli")


def reader() -> RegistryReader:
    return RegistryReader(migrated_engine())


@db_app.command("upgrade")
def db_upgrade(as_json: JsonFlag = False) -> None:
    """Create or migrate the registry schema to the newest revision."""
    revision = upgrade(engine())
    url = settings().resolved_database_url()
    emit(
        {"revision": revision},
        as_json,
        lambda: console.print(f"registry at revision {revision} ({url})"),
    )


@tenant_app.command("create")
def tenant_create(
    name: str,
    tier: Annotated[str, typer.Option(help="Tier label.")] = "standard",
    priority: Annotated[
        int,
        typer.Option(help=PRIORITY_HELP),
    ] = 2,
    models: Annotated[str, typer.Option(help="Comma-separated model aliases allowed (default all).")] = "",
    weight: Annotated[float, typer.Option(help="Share of contended compute (relative; default 1).")] = 1.0,
    as_json: JsonFlag = False,
) -> None:
    """Create a tenant and print its first API key (shown only this once)."""
    allowed = [m for m in models.split(",") if m]
    with refusals():
        key = writer().create_tenant(
            name, tier=tier, priority=priority, allowed_models=allowed, weight=weight
        )
    emit(
        {"tenant": name, "key": key.plaintext, "prefix": key.prefix},
        as_json,
        lambda: console.print(
            f"tenant [bold]{name}[/bold] created\nAPI key (shown once): [bold]{key.plaintext}[/bold]",
            soft_wrap=True,
        ),
    )


@tenant_app.command("weight")
def tenant_weight(
    name: str,
    weight: Annotated[float, typer.Argument(help="Share of contended compute (relative; default 1).")],
    as_json: JsonFlag = False,
) -> None:
    """Set a tenant's weight: its share of generation slots and tokens against busy tenants."""
    with refusals():
        writer().update_tenant(name, weight=weight)
    emit(
        {"tenant": name, "weight": weight}, as_json, lambda: console.print(f"tenant {name} weighs {weight:g}")
    )


@tenant_app.command("spill")
def tenant_spill(
    name: str,
    on: Annotated[bool, typer.Option("--on/--off", help="Spill refused requests into jobs.")],
    as_json: JsonFlag = False,
) -> None:
    """Accept the tenant's requests refused for load or a rate quota as durable jobs
    (their job id in the error), instead of only refusing them."""
    with refusals():
        writer().update_tenant(name, spill_to_job=on)
    emit(
        {"tenant": name, "spill_to_job": on},
        as_json,
        lambda: console.print(
            f"tenant {name}: refused requests {'spill into jobs' if on else 'are refused'}"
        ),
    )


@tenant_app.command("list")
def tenant_list(as_json: JsonFlag = False) -> None:
    """List tenants with their active key prefixes."""
    tenants = reader().tenants()
    rows = [
        [
            t.name,
            t.tier,
            t.priority,
            ",".join(t.allowed_models) or "*",
            t.disabled,
            f"{t.weight:g}",
            " ".join(t.active_keys),
        ]
        for t in tenants
    ]
    emit(
        [
            {
                "name": t.name,
                "tier": t.tier,
                "priority": t.priority,
                "allowed_models": list(t.allowed_models),
                "disabled": t.disabled,
                "weight": t.weight,
                "spill_to_job": t.spill_to_job,
                "key_prefixes": list(t.active_keys),
            }
            for t in tenants
        ],
        as_json,
        lambda: table("tenants", ["name", "tier", "priority", "models", "disabled", "weight", "keys"], rows),
    )


@key_app.command("issue")
def key_issue(tenant: str, as_json: JsonFlag = False) -> None:
    """Issue another API key for a tenant (shown only this once)."""
    with refusals():
        key = writer().issue_key(tenant)
    emit(
        {"tenant": tenant, "key": key.plaintext, "prefix": key.prefix},
        as_json,
        lambda: console.print(f"API key (shown once): [bold]{key.plaintext}[/bold]", soft_wrap=True),
    )


@key_app.command("revoke")
def key_revoke(prefix: str, as_json: JsonFlag = False) -> None:
    """Revoke the key with this visible prefix."""
    with refusals():
        writer().revoke_key(prefix)
    emit({"revoked": prefix}, as_json, lambda: console.print(f"key {prefix} revoked"))


@quota_app.command("set")
def quota_set(
    tenant: str,
    rpm: Annotated[int | None, typer.Option(help="Requests per minute.")] = None,
    tpm: Annotated[int | None, typer.Option(help="Tokens per minute.")] = None,
    cost_per_day: Annotated[float | None, typer.Option(help="US dollars per day.")] = None,
    burst: Annotated[int | None, typer.Option(help="Most requests at once (default: rpm).")] = None,
    max_concurrency: Annotated[int | None, typer.Option(help="Most requests in flight.")] = None,
    mode: Annotated[str, typer.Option(help="hard: reject; soft: admit and degrade.")] = "hard",
    jobs_in_flight: Annotated[int | None, typer.Option(help="Unfinished durable jobs at once.")] = None,
    job_items_per_day: Annotated[int | None, typer.Option(help="Job items submitted per UTC day.")] = None,
    model: Annotated[str, typer.Option(help="Limit only this model alias.")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Set a tenant's limits (replacing the previous ones for that scope)."""
    limits = QuotaLimits(
        rpm=rpm,
        tpm=tpm,
        cost_per_day_usd=cost_per_day,
        burst=burst,
        max_concurrency=max_concurrency,
        mode=mode,
        jobs_in_flight=jobs_in_flight,
        job_items_per_day=job_items_per_day,
    )
    with refusals():
        writer().set_quota(tenant, limits, model=model)
    emit(
        {"tenant": tenant, "model": model, **vars(limits)},
        as_json,
        lambda: console.print(f"quota of {tenant} set: {vars(limits)}"),
    )


@quota_app.command("show")
def quota_show(tenant: str, as_json: JsonFlag = False) -> None:
    """Show a tenant's quota policies."""
    policies = [p.model_dump(exclude={"id", "tenant_id"}) for p in reader().quota_policies(tenant)]
    emit(
        policies,
        as_json,
        lambda: table(
            f"quotas of {tenant}",
            ["model", "rpm", "tpm", "cost/day", "burst", "concurrency", "mode"],
            [
                [
                    p["model"] or "*",
                    p["rpm"],
                    p["tpm"],
                    p["cost_per_day_usd"],
                    p["burst"],
                    p["max_concurrency"],
                    p["mode"],
                ]
                for p in policies
            ],
        ),
    )


def _load_schema(value: str) -> dict[str, Any]:
    text = Path(value).read_text() if not value.lstrip().startswith("{") else value
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--schema is not valid JSON: {exc}")
    if not isinstance(schema, dict):
        fail("--schema must be a JSON object")
    return schema


@model_app.command("register")
def model_register(
    name: str,
    version: Annotated[str, typer.Option(help="Version label.")],
    artifact: Annotated[
        str,
        typer.Option(
            help="Where nodes find it: a path or file:// URI on every node, s3://bucket/key (any "
            "S3-compatible store), http(s)://, or the ferryman://artifacts/... URI of model push."
        ),
    ],
    format: Annotated[str, typer.Option("--format", help=", ".join(f.value for f in ModelFormat) + ".")],
    schema: Annotated[
        str,
        typer.Option(
            help="IO schema, JSON text or a JSON file path: "
            '{"inputs": [{"name": "input", "dtype": "FP32", "shape": [512]}], '
            '"outputs": [{"name": "output", "dtype": "FP32", "shape": [10]}]} '
            "(shapes without the batch dimension; text inputs: "
            '{"name": "text", "text": true}; docs/schemas.md).'
        ),
    ],
    handler: Annotated[str, typer.Option(help="module:Class, for format python.")] = "",
    sha256: Annotated[
        str, typer.Option(help="Expected checksum (computed for local files; required for s3 and http).")
    ] = "",
    max_batch_size: Annotated[int, typer.Option(help="Largest batch in rows.")] = 32,
    price_per_1k_tokens: Annotated[float, typer.Option(help="USD per 1000 tokens.")] = 0.0,
    price_per_item: Annotated[float, typer.Option(help="USD per item.")] = 0.0,
    cacheable: Annotated[bool, typer.Option(help="Deterministic: answers may be cached.")] = False,
    shareable: Annotated[bool, typer.Option(help="Tenants may share identical executions.")] = False,
    description: Annotated[str, typer.Option(help="Model description.")] = "",
    public: Annotated[
        bool, typer.Option("--public/--private", help="New model: every tenant may use it, or only owners.")
    ] = False,
    owner: Annotated[
        list[str] | None, typer.Option(help="New model: a tenant that may use it (repeat).")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(help="Load the artifact here and call it at batch 1 and 2 before registering."),
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Register a model version (the model is created on first use, private unless --public).

    Before it is registered, a version is loaded here and called at a batch of 1 and of 2,
    as a node will: a program exported with a static batch of 1, a missing handler or a
    schema the model does not take is refused with the node's own reason. A remote artifact
    (pushed, s3, http(s)) is fetched and checked as a node would (its digest, its bytes);
    causal LMs are left to their nodes' warm-up."""
    spec = VersionSpec(
        model=name,
        version=version,
        artifact=artifact,
        format=format,
        io_schema=_load_schema(schema),
        sha256=sha256,
        handler=handler,
        description=description,
        max_batch_size=max_batch_size,
        price_per_1k_tokens_usd=price_per_1k_tokens,
        price_per_item_usd=price_per_item,
        cacheable=cacheable,
        shareable=shareable,
        published=public,
        owners=tuple(owner or ()),
    )
    if not artifact.strip():
        fail(
            "--artifact is empty: give a path or file:// URI, s3://, http(s)://, or the "
            "ferryman://artifacts/... URI that ferryman model push printed"
        )
    checked = _check_before_registering(spec) if check else "not checked (--no-check)"
    with refusals():
        row = writer().register_version(spec)
    emit(
        {"model": name, "version": version, "sha256": row.sha256, "status": row.status, "checked": checked},
        as_json,
        lambda: console.print(f"registered {name}:{version} (sha256 {row.sha256[:12]}…, {row.status})"),
    )


def _check_before_registering(spec: VersionSpec) -> str:
    """Load and call ``spec`` as a node would (refusing it with the node's reason), or say
    why that cannot be done here."""
    from ferryman_server.gpu_node.fetch import ArtifactCache
    from ferryman_server.gpu_node.loader import CHECKED_SIZES, LoadError, check_version
    from ferryman_server.gpu_node.settings import NodeSettings

    if spec.format not in ModelFormat.__members__.values():
        return "not checked: an unknown format (the registry says which it takes)"
    if ModelFormat(spec.format) == ModelFormat.CAUSAL_LM:
        return "not checked here: a causal LM is checked by its node's warm-up"
    path = artifact_path(spec.artifact)
    if path is not None and not path.exists():
        return "not checked: no such artifact (the registry says so)"
    pushed = pushed_sha256(spec.artifact)
    registry = reader()
    if pushed is not None and registry.pushed_artifact(pushed) is None:
        return "not checked: no such pushed artifact (the registry says so)"
    try:
        schema = IOSchema.model_validate(spec.io_schema)
    except ValidationError:
        return "not checked: the schema is refused (the registry says why)"
    node_spec = node_pb2.ModelVersionSpec(
        model=spec.model,
        version=spec.version,
        artifact_uri=spec.artifact,
        sha256=spec.sha256,
        format=spec.format,
        handler=spec.handler,
        schema=schema.to_proto(),
        max_batch_size=spec.max_batch_size,
    )
    node_spec.sha256 = node_spec.sha256 or pushed or ""
    defaults = NodeSettings.model_fields
    # A remote artifact is fetched as a node fetches it (into a cache of this run's own),
    # and checked: a wrong digest, a missing object or a lost chunk is refused now.
    with tempfile.TemporaryDirectory(prefix="ferryman-check-") as scratch:
        cache = ArtifactCache(
            Path(scratch),
            defaults["artifact_cache_bytes"].default,
            defaults["artifact_fetch_timeout_s"].default,
            registry,
            deadline_s=defaults["artifact_fetch_deadline_s"].default,
        )
        try:
            check_version(node_spec, cache)
        except LoadError as exc:
            hint = ""
            if "batch 2" in str(exc) and ModelFormat(spec.format) == ModelFormat.TORCH_EXPORT:
                hint = (
                    " (export it with a dynamic batch dimension and an example batch of 2 or more: "
                    'torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch")}}))'
                )
            fail(f"{spec.model}:{spec.version} would not serve: {exc}{hint}")
    return f"loaded and called at batch {' and '.join(map(str, CHECKED_SIZES))}"


@model_app.command("push")
def model_push(
    path: Annotated[Path, typer.Argument(help="The artifact: a file, or a directory (pushed as a tar).")],
    as_json: JsonFlag = False,
) -> None:
    """Store an artifact in the registry, where every node can fetch it (no object store
    needed); register versions with the URI it prints."""
    if not path.exists():
        fail(f"{path} does not exist")
    with refusals():
        pushed = writer().push_artifact(path)
    uri = pushed_uri(pushed.sha256)
    emit(
        {"uri": uri, "sha256": pushed.sha256, "kind": pushed.kind, "bytes": pushed.size},
        as_json,
        lambda: console.print(f"pushed {path.name} ({pushed.size:,} bytes): --artifact {uri}"),
    )


@model_app.command("access")
def model_access(
    name: str,
    public: Annotated[
        bool | None, typer.Option("--public/--private", help="Publish to every tenant, or keep to owners.")
    ] = None,
    owner: Annotated[
        list[str] | None, typer.Option(help="Tenant that may use it (repeat; replaces).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Who may use a model: published to every tenant, or private to its owners."""
    with refusals():
        writer().set_model_access(name, published=public, owners=owner)
    emit(
        {"model": name, "published": public, "owners": owner},
        as_json,
        lambda: console.print(f"access of {name} updated"),
    )


@model_app.command("list")
def model_list(as_json: JsonFlag = False) -> None:
    """List models and their versions; a version that failed on a node says where and why
    (its status FAILED while no node serves it)."""
    registry = reader()
    timeout = settings().heartbeat_timeout_s
    nodes = registry.node_versions(timeout)
    failed, ready = nodes.failed, nodes.ready

    def version(model: str, v: Any) -> dict[str, Any]:
        key = f"{model}:{v.version}"
        failures = {node: reason for node, reason in failed.get(key, [])}
        status = "FAILED" if failures and not ready.get(key) else v.status
        return {
            "version": v.version,
            "status": status,
            "format": v.format,
            "sha256": v.sha256,
            "failed": failures,
        }

    data: list[dict[str, Any]] = [
        {"model": m.name, "versions": [version(m.name, v) for v in registry.versions(m.name)]}
        for m in registry.models()
    ]
    emit(
        data,
        as_json,
        lambda: table(
            "models",
            ["model", "version", "status", "format", "sha256", "failed"],
            [
                [
                    d["model"],
                    v["version"],
                    v["status"],
                    v["format"],
                    v["sha256"][:12],
                    "; ".join(f"{node}: {reason}" for node, reason in v["failed"].items()),
                ]
                for d in data
                for v in d["versions"]
            ],
        ),
    )


@model_app.command("place")
def model_place(
    name: str,
    version: Annotated[str, typer.Option(help="Version label.")],
    node: Annotated[str, typer.Option(help="Node name, node pool, or * for every node.")] = "*",
    as_json: JsonFlag = False,
) -> None:
    """Ask nodes to load a version (idempotent: an existing placement is kept)."""
    try:
        writer().place(name, version, node)
        placed = True
    except RegistryError as exc:
        if "already placed" not in str(exc):
            fail(str(exc))
        placed = False
    emit(
        {"model": name, "version": version, "node": node, "new": placed},
        as_json,
        lambda: console.print(f"{name}:{version} placed on {node}" + ("" if placed else " (already)")),
    )


@model_app.command("unplace")
def model_unplace(
    name: str,
    version: Annotated[str, typer.Option(help="Version label.")],
    node: Annotated[str, typer.Option(help="Node name, node pool, or * as it was placed.")] = "*",
    as_json: JsonFlag = False,
) -> None:
    """Take a placement back: the nodes it named unload the version once in-flight batches end."""
    try:
        removed = writer().unplace(name, version, node)
    except RegistryError as exc:
        fail(str(exc))
    emit(
        {"model": name, "version": version, "node": node, "removed": removed},
        as_json,
        lambda: console.print(
            f"{name}:{version} unplaced from {node}" + ("" if removed else " (was not placed)")
        ),
    )
