"""RL rollouts on the gateway: POST /v1/rollouts, GET /v1/rollouts/{id}, and the sy.rewards reader.

POST validates the job (prompts, n, sampling, reward spec, policy), pins the policy adapter
to one version (as chat requests are pinned), and writes ONE job record (kind rollout) on
sy.requests; preprocess fans it out into one request per prompt with n samples. Results are
read back from sy.rewards: every gateway instance reads the whole topic (from the start at each
start) into its own SQLite file (`RolloutStore`), so any instance answers GET for any rollout,
including jobs a Kafka producer wrote straight to sy.requests. Records are keyed by
(tenant, rollout, group, sample): a redelivered record is stored once, and a rollout id is the
tenant's own (another tenant may use the same one at the same time: DESIGN §6; the reward
service's dedupe and the router's pending table are keyed by tenant too).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from fastapi import APIRouter, Depends, Header, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from switchyard.v1.envelope_pb2 import RewardFunction, RolloutPrompt

from shared.openai.format import chat_message
from shared.openai.protocol import ChatMessageIn
from shared.rewards import SpecItem, check_spec, default_functions, triton_url_of
from shared.runtime.admission import Admission, estimate_tokens
from shared.runtime.bus import CONTENT_TYPE_HEADER, FetchWaitGuard, client_kwargs, header, rewind_reset_logs
from shared.runtime.config import Settings
from shared.runtime.envelope import MAX_MAX_TOKENS, Envelope, Kind, Priority, Rejected, decode
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RolloutPromptIn(_Strict):
    messages: list[ChatMessageIn] | None = Field(default=None, min_length=1)
    prompt: str | None = Field(default=None, min_length=1)
    references: dict[str, str] = Field(
        default_factory=dict, description="e.g. answer (exact/numeric match), tests (code_tests), schema"
    )

    @model_validator(mode="after")
    def _one_form(self) -> RolloutPromptIn:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("each prompt needs exactly one of messages or prompt")
        return self


class RewardFunctionIn(_Strict):
    name: str = Field(min_length=1, max_length=64)
    weight: float = Field(default=1.0, ge=-1e6, le=1e6, allow_inf_nan=False)
    params: dict[str, Any] = Field(default_factory=dict)

    def params_text(self) -> dict[str, str]:
        """Params travel as strings; structured values (a JSON schema) as JSON text."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.params.items()}


class RewardIn(_Strict):
    functions: list[RewardFunctionIn] = Field(min_length=1, max_length=16)


class PolicyIn(_Strict):
    model: str = Field(min_length=1, max_length=256, description="base model")
    adapter: str | None = Field(default=None, max_length=200, description="adapter name[@version|alias]")


class RolloutSampling(_Strict):
    temperature: float | None = Field(default=1.0, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, lt=2**31)
    max_tokens: int = Field(default=64, ge=1, le=MAX_MAX_TOKENS)
    min_tokens: int | None = Field(default=None, ge=0, le=MAX_MAX_TOKENS)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: list[str] | None = Field(default=None, max_length=4)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool = Field(default=False, description="return each sampled token's logprob (and token ids)")


class RolloutRequest(_Strict):
    policy: PolicyIn
    prompts: list[RolloutPromptIn] = Field(min_length=1)
    n: int = Field(default=4, ge=1, le=16, description="samples per prompt (the group size)")
    sampling: RolloutSampling = Field(default_factory=RolloutSampling)
    reward: RewardIn
    return_tokens: bool = Field(default=False, description="completion token ids on every sample")
    rollout_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,80}$",
        description="idempotency key: a retry returns this rollout",
    )
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _small(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > 16:
            raise ValueError("at most 16 metadata entries")
        return v


def rollout_cost(req: RolloutRequest) -> int:
    """Tokens a job may spend: per prompt its (estimated) prompt tokens once, plus max_tokens x n."""
    total = 0
    for p in req.prompts:
        text = p.prompt or "".join(m.content if isinstance(m.content, str) else "" for m in p.messages or [])
        total += estimate_tokens(len(text.encode())) + req.sampling.max_tokens * req.n
    return total


def to_job_envelope(req: RolloutRequest, rollout_id: str, tenant: str) -> Envelope:
    now = time.time_ns()
    env = Envelope(
        request_id=rollout_id,
        tenant=tenant,
        kind=Kind.KIND_ROLLOUT,
        model=req.policy.model,
        adapter=req.policy.adapter or "",
        priority=Priority.PRIORITY_ROLLOUT,
        created_unix_ns=now,
    )
    env.metadata.update(req.metadata)
    s = env.request.sampling
    s.n = req.n
    s.max_tokens = req.sampling.max_tokens
    s.logprobs = req.sampling.logprobs
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_tokens",
        "seed",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
    ):
        v = getattr(req.sampling, name)
        if v is not None:
            setattr(s, name, v)
    if req.sampling.stop:
        s.stop.extend(req.sampling.stop)
    r = env.rollout
    r.rollout_id, r.group_size, r.num_groups = rollout_id, req.n, len(req.prompts)
    r.accepted_unix_ns, r.return_tokens = now, req.return_tokens
    for p in req.prompts:
        rp = RolloutPrompt(prompt=p.prompt or "", references=p.references)
        if p.messages:
            rp.messages.extend(chat_message(m) for m in p.messages)
        r.prompts.append(rp)
    for f in req.reward.functions:
        r.reward_spec.functions.append(RewardFunction(name=f.name, weight=f.weight, params=f.params_text()))
    return env


# ------------------------------------------------------------------------------------ store
class RolloutStore:
    """Rollouts, their groups and samples as read from sy.rewards (SQLite, one file per instance)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._lock = threading.Lock()
        # (tenant, rollout id) -> set when its records arrive (rollout ids are per tenant, DESIGN §6)
        self._changed: dict[tuple[str, str], asyncio.Event] = {}
        with self._lock:
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS rollouts (
                    id TEXT NOT NULL, tenant TEXT NOT NULL, accepted_ns INTEGER NOT NULL,
                    num_groups INTEGER NOT NULL, group_size INTEGER NOT NULL, policy TEXT,
                    error TEXT, PRIMARY KEY (tenant, id));
                CREATE TABLE IF NOT EXISTS groups (
                    tenant TEXT, rollout_id TEXT, group_index INTEGER, body TEXT NOT NULL, failed INTEGER,
                    PRIMARY KEY (tenant, rollout_id, group_index));
                CREATE TABLE IF NOT EXISTS samples (
                    tenant TEXT, rollout_id TEXT, group_index INTEGER, sample_index INTEGER,
                    body TEXT NOT NULL, scored_ns INTEGER, tokens INTEGER,
                    PRIMARY KEY (tenant, rollout_id, group_index, sample_index));
                """
            )
        self.duplicates = 0

    def accept(self, env: Envelope, policy: dict[str, Any]) -> bool:
        """Record a new rollout; False when the tenant already has one with this id."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (
                    env.rollout.rollout_id,
                    env.tenant,
                    env.rollout.accepted_unix_ns,
                    env.rollout.num_groups,
                    env.rollout.group_size,
                    json.dumps(policy),
                ),
            )
            return cur.rowcount > 0

    def unfinished(self, tenant: str, within_s: float) -> int:
        """The tenant's rollouts accepted in the last `within_s` seconds that neither failed nor
        have every group in (its quota of open jobs; one that lost a group stops counting then)."""
        since = time.time_ns() - int(within_s * 1e9)
        with self._lock:
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM rollouts r WHERE r.tenant=? AND r.accepted_ns >= ? AND r.error IS NULL "
                "AND r.num_groups > (SELECT COUNT(*) FROM groups g WHERE g.tenant=r.tenant AND g.rollout_id=r.id)",
                (tenant, since),
            ).fetchone()
        return int(n)

    def exists(self, tenant: str, rollout_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM rollouts WHERE tenant=? AND id=?", (tenant, rollout_id)
            ).fetchone()
        return row is not None

    def forget(self, tenant: str, rollout_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM rollouts WHERE tenant=? AND id=?", (tenant, rollout_id))

    def add_many(self, envs: list[Envelope]) -> None:
        """Store sy.rewards records in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for env in envs:
                    self._add(env)
            finally:
                self._db.execute("COMMIT")

    def add(self, env: Envelope) -> None:
        with self._lock:
            self._add(env)

    def notify(self, rollouts: set[tuple[str, str]]) -> None:
        """Wake GETs waiting on these (tenant, rollout id)s (call on the event loop, after the
        records are stored)."""
        for key in rollouts:
            ev = self._changed.pop(key, None)
            if ev is not None:
                ev.set()

    async def wait_done(self, tenant: str, rollout_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The status (no sample bodies) once the rollout completed or failed, or when `timeout_s`
        passed: a trainer blocks on its job without polling, and hears of it as soon as the
        gateway stored the last record."""
        deadline = time.monotonic() + timeout_s
        while True:
            ev = self._changed.setdefault((tenant, rollout_id), asyncio.Event())
            found = await asyncio.to_thread(self.get, tenant, rollout_id, False)
            left = deadline - time.monotonic()
            if found is None:
                self._changed.pop((tenant, rollout_id), None)
                return None
            if found["status"] in ("completed", "failed") or left <= 0:
                return found
            try:
                await asyncio.wait_for(ev.wait(), left)
            except TimeoutError:
                pass

    def _add(self, env: Envelope) -> None:
        """Store one sy.rewards record (sample, group, or a job-level error); repeats are ignored."""
        r = env.rollout
        self._db.execute(
            "INSERT OR IGNORE INTO rollouts VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (
                r.rollout_id,
                env.tenant,
                r.accepted_unix_ns or env.created_unix_ns,
                r.num_groups or 1,
                r.group_size,
                json.dumps({"model": env.model, "adapter": env.adapter, "version": env.policy_version}),
            ),
        )
        if env.error.code and env.request_id == r.rollout_id:  # the job itself failed
            self._db.execute(
                "UPDATE rollouts SET error=? WHERE tenant=? AND id=?",
                (
                    json.dumps({"code": env.error.code, "message": env.error.message}),
                    env.tenant,
                    r.rollout_id,
                ),
            )
            return
        if r.HasField("group"):
            cur = self._db.execute(
                "INSERT OR IGNORE INTO groups VALUES (?, ?, ?, ?, ?)",
                (
                    env.tenant,
                    r.rollout_id,
                    r.group_index,
                    json.dumps(group_json(env)),
                    int(bool(env.error.code)),
                ),
            )
        else:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    env.tenant,
                    r.rollout_id,
                    r.group_index,
                    r.sample_index,
                    json.dumps(sample_json(env)),
                    r.reward.scored_unix_ns,
                    env.response.usage.completion_tokens,
                ),
            )
        if cur.rowcount == 0:
            self.duplicates += 1

    def get(self, tenant: str, rollout_id: str, with_samples: bool = True) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT accepted_ns, num_groups, group_size, policy, error FROM rollouts WHERE tenant=? AND id=?",
                (tenant, rollout_id),
            ).fetchone()
            if row is None:
                return None
            n_groups, failed = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(failed), 0) FROM groups WHERE tenant=? AND rollout_id=?",
                (tenant, rollout_id),
            ).fetchone()
            n_samples, last_ns, tokens = self._db.execute(
                "SELECT COUNT(*), COALESCE(MAX(scored_ns), 0), COALESCE(SUM(tokens), 0) FROM samples "
                "WHERE tenant=? AND rollout_id=?",
                (tenant, rollout_id),
            ).fetchone()
            groups = samples = []
            if with_samples:  # status polls skip the bodies
                groups = self._db.execute(
                    "SELECT group_index, body, failed FROM groups WHERE tenant=? AND rollout_id=? ORDER BY group_index",
                    (tenant, rollout_id),
                ).fetchall()
                samples = self._db.execute(
                    "SELECT group_index, sample_index, body FROM samples "
                    "WHERE tenant=? AND rollout_id=? ORDER BY group_index, sample_index",
                    (tenant, rollout_id),
                ).fetchall()
        accepted_ns, num_groups, group_size, policy, error = row
        by_group: dict[int, list[dict[str, Any]]] = {}
        for g, _s, body in samples:
            by_group.setdefault(g, []).append(json.loads(body))
        status = "queued"
        if error:
            status = "failed"
        elif n_groups >= num_groups:
            status = "completed"
        elif n_groups or n_samples:
            status = "in_progress"
        elapsed_s = (last_ns - accepted_ns) / 1e9 if last_ns > accepted_ns else 0.0
        out: dict[str, Any] = {
            "id": rollout_id,
            "object": "rollout",
            "status": status,
            "policy": json.loads(policy) if policy else None,
            "created": accepted_ns / 1e9,
            "num_groups": num_groups,
            "group_size": group_size,
            "counts": {
                "groups_completed": n_groups,
                "groups_failed": failed,
                "samples": n_samples,
                "expected_samples": num_groups * group_size,
            },
            "throughput": {
                "elapsed_s": round(elapsed_s, 3),
                "samples_per_s": round(n_samples / elapsed_s, 3) if elapsed_s else None,
                "tokens_per_s": round(tokens / elapsed_s, 3) if elapsed_s else None,
                "completion_tokens": tokens,
            },
        }
        if error:
            out["error"] = json.loads(error)
        if with_samples:
            out["groups"] = [{**json.loads(body), "samples": by_group.get(g, [])} for g, body, _ in groups]
        return out


def sample_json(env: Envelope) -> dict[str, Any]:
    r, c = env.rollout, env.response.choices[0] if env.response.choices else None
    out: dict[str, Any] = {
        "group_index": r.group_index,
        "sample_index": r.sample_index,
        "text": c.text if c else "",
        "finish_reason": c.finish_reason if c else "",
        "reward": r.reward.reward,
        "scores": dict(r.reward.scores),
        "advantage": r.reward.advantage,
        "policy_version": env.policy_version,
        "staleness": r.staleness,
        "completion_tokens": env.response.usage.completion_tokens,
    }
    if r.reward.notes:
        out["notes"] = dict(r.reward.notes)
    if c is not None and c.token_ids:
        out["token_ids"] = list(c.token_ids)
    if c is not None and c.logprobs:
        out["logprobs"] = [round(x, 6) for x in c.logprobs]
    return out


def group_json(env: Envelope) -> dict[str, Any]:
    r, g = env.rollout, env.rollout.group
    out: dict[str, Any] = {
        "group_index": r.group_index,
        "request_id": env.request_id,
        "policy_version": env.policy_version,
        "staleness": r.staleness,
        "mean": g.mean,
        "std": g.std,
        "rewards": list(g.rewards),
        "advantages": list(g.advantages),
        "completion_ms": round(g.completion_ms, 3),
        "scoring_ms": round(g.scoring_ms, 3),
    }
    if env.error.code:
        out["error"] = {"code": env.error.code, "message": env.error.message}
    return out


def store_path(settings: Settings) -> Path:
    return settings.var_dir / "gateway" / f"{settings.instance_id}-rollouts.sqlite"


async def follow_rewards(settings: Settings, store: RolloutStore, stop: asyncio.Event) -> None:
    """Read sy.rewards (all partitions, no group) into the store, from the beginning at every start.

    Saved offsets would skip records after a broker reset (the embedded broker starts empty and
    refills past them); the store ignores repeats, so rereading is always correct.
    """
    topic = settings.topic("rewards")
    consumer = AIOKafkaConsumer(
        **client_kwargs(settings),  # type: ignore[arg-type]
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=max(settings.kafka_fetch_max_wait_ms, 20),
        max_partition_fetch_bytes=settings.kafka_max_request_bytes,
        client_id=f"gateway-rewards-{settings.instance_id}",
    )
    await consumer.start()
    try:
        while not stop.is_set():
            try:
                await _read_rewards(consumer, topic, store, stop, settings)
            except Exception as exc:  # noqa: BLE001 - a broker hiccup must not stop the gateway
                log.warning("rewards reader failed; rereading the topic", error=repr(exc))
                await asyncio.sleep(1.0)
    finally:
        await consumer.stop()


async def _read_rewards(
    consumer: AIOKafkaConsumer, topic: str, store: RolloutStore, stop: asyncio.Event, settings: Settings
) -> None:
    parts: set[int] = set()
    while not parts and not stop.is_set():
        await consumer.topics()
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await asyncio.sleep(0.5)
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    guard = FetchWaitGuard.from_settings(consumer, "gateway-rewards", settings)
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=100)
        guard.observe(bool(batch))
        rewind_reset_logs(consumer, "gateway-rewards")
        envs = []
        for records in batch.values():
            for rec in records:
                try:
                    env = decode(rec.value, header(rec.headers, CONTENT_TYPE_HEADER))
                except Rejected:
                    continue
                if env.rollout.rollout_id:
                    envs.append(env)
        if envs:
            await asyncio.to_thread(store.add_many, envs)
            store.notify({(env.tenant, env.rollout.rollout_id) for env in envs})


# ----------------------------------------------------------------------------------- routes
def rollout_router(
    settings: Settings,
    submit: Callable[[Envelope, str | None], Awaitable[None]],
    tenant_dep: Callable[..., str],
    check_model: Callable[[str, str, Envelope | None], Awaitable[None]],
    check_ready: Callable[[], None],
    api_error: Callable[..., Exception],  # ApiError(status, message, code, param, headers=)
    store: RolloutStore | None = None,
    admission: Admission | None = None,
) -> APIRouter:
    """The /v1/rollouts routes; `check_model` pins the policy adapter onto the job envelope.

    `store`: the one the sy.rewards reader fills (so `wait` hears of new records); None opens the
    same file without that (tests of the routes alone)."""
    router = APIRouter()
    store = store or RolloutStore(store_path(settings))
    functions = default_functions(triton_url_of(settings))

    @router.post("/v1/rollouts", status_code=202)
    async def create_rollout(
        body: RolloutRequest,
        tenant: str = Depends(tenant_dep),
        idempotency_key: str | None = Header(default=None),
    ) -> JSONResponse:
        """Start a rollout job: n samples per prompt from the policy, scored by the reward spec."""
        check_ready()
        if len(body.prompts) > settings.rollout_max_prompts:
            raise api_error(
                400,
                f"at most {settings.rollout_max_prompts} prompts per rollout (SY_ROLLOUT_MAX_PROMPTS)",
                "invalid_request",
                "prompts",
            )
        try:
            check_spec(
                [SpecItem(f.name, f.weight, f.params_text()) for f in body.reward.functions], functions
            )
        except ValueError as exc:
            raise api_error(400, str(exc), "invalid_request", "reward.functions") from None
        key = body.rollout_id or idempotency_key
        rollout_id = f"ro-{key}" if key else f"ro-{uuid.uuid4().hex}"
        env = to_job_envelope(body, rollout_id, tenant)
        if body.policy.adapter:
            await check_model(body.policy.adapter, tenant, env)
            if env.model != body.policy.model:
                raise api_error(
                    400,
                    f"adapter {body.policy.adapter!r} is for base model {env.model!r}, not {body.policy.model!r}",
                    "invalid_request",
                    "policy.adapter",
                )
        else:
            await check_model(body.policy.model, tenant, None)
        ref = env.adapter_ref
        policy = {
            "model": env.model,
            "adapter": body.policy.adapter,
            "version": f"{ref.name}@{ref.version}" if ref.name else env.model,
        }
        env.policy_version = policy["version"]
        if admission is not None and not store.exists(tenant, rollout_id):  # a retry spends no tokens twice
            await admission.tokens(tenant, rollout_cost(body))
        # The quota check and the accept with no await between (one event loop per replica).
        if (
            not store.exists(tenant, rollout_id)
            and store.unfinished(tenant, settings.rollout_quota_window_s) >= settings.tenant_max_rollouts
        ):
            raise api_error(
                429,
                f"{settings.tenant_max_rollouts} rollouts already unfinished for this tenant in the last "
                f"{settings.rollout_quota_window_s:g} s (SY_TENANT_MAX_ROLLOUTS): wait for some to finish",
                "too_many_rollouts",
                None,
                headers={"Retry-After": "5"},
            )
        if store.accept(env, policy):
            try:
                await submit(env, None)
            except Exception:
                store.forget(tenant, rollout_id)
                raise
            log.info("rollout accepted", rollout_id=rollout_id, groups=len(body.prompts), n=body.n)
        current = store.get(tenant, rollout_id, with_samples=False) or {}
        return JSONResponse(current, status_code=202)

    @router.get("/v1/rollouts/{rollout_id}")
    async def get_rollout(
        rollout_id: str,
        samples: bool = True,
        wait: float = Query(
            default=0.0, ge=0, le=60, description="seconds to hold the reply until the rollout is done"
        ),
        tenant: str = Depends(tenant_dep),
    ) -> dict[str, Any]:
        """Status, counts, throughput, and (samples=true) every group with its samples and rewards.

        `wait`: long poll; the reply comes when the rollout completed or failed, or after `wait`
        seconds with the status as it is then."""
        if wait > 0:
            found = await store.wait_done(tenant, rollout_id, wait)
            if found is not None and samples:
                found = await asyncio.to_thread(store.get, tenant, rollout_id, True)
        else:
            found = await asyncio.to_thread(store.get, tenant, rollout_id, samples)
        if found is None:
            raise api_error(404, f"no rollout {rollout_id!r}", "not_found", None)
        return found

    return router
