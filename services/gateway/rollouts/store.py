"""The rollouts a gateway has read from sy.rewards (SQLite, one file per instance).

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
from pathlib import Path
from typing import Any

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope


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

    def finished(self, rollouts: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """Those of these (tenant, rollout id)s that failed or have every group in."""
        done = []
        with self._lock:
            for tenant, rollout_id in rollouts:
                row = self._db.execute(
                    "SELECT 1 FROM rollouts r WHERE r.tenant=? AND r.id=? AND (r.error IS NOT NULL OR "
                    "r.num_groups <= (SELECT COUNT(*) FROM groups g WHERE g.tenant=r.tenant AND g.rollout_id=r.id))",
                    (tenant, rollout_id),
                ).fetchone()
                if row is not None:
                    done.append((tenant, rollout_id))
        return done

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
