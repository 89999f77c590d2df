"""Reward functions behind one small interface, and their weighted combination.

A function gets the samples of one group (the prompt, each completion, the group's references)
and its params, and returns one `Score` per sample. Rule-based functions are plain per-sample
code (`RuleFunction.score_one`); the code-test and reward-model functions are async and batch
over the group. `check` validates params at submission time, so a bad spec is a 400 at the
gateway (or a DLQ record) instead of a zero reward later.

Names: exact_match, numeric_match, regex, json_schema, length_penalty, code_tests,
task_check (the checkable tasks of shared/rewards/tasks.py), reward_model (Triton).
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import regex  # ships with transformers; its matcher takes a timeout (user patterns can backtrack)

from shared.rewards import tasks
from shared.rewards.sandbox import Limits, SandboxConfig, run_python
from shared.runtime.envelope import DependencyUnavailable

Params = Mapping[str, str]


@dataclass(frozen=True)
class Sample:
    """One completion to score, with what the prompt's references say."""

    prompt: str
    completion: str
    references: Mapping[str, str] = field(default_factory=dict)
    token_ids: Sequence[int] = ()
    finish_reason: str = ""

    @property
    def answer_text(self) -> str:
        """The completion without end-of-turn markers or surrounding whitespace."""
        return tasks.clean(self.completion)


class RewardUnavailable(RuntimeError):
    """A scorer that depends on a service (the reward model) cannot answer now: retry the group."""


@dataclass(frozen=True)
class Score:
    value: float
    note: str = ""


class RewardFunction(ABC):
    name: ClassVar[str]

    def check(self, params: Params) -> None:  # noqa: B027 - optional hook
        """Raise ValueError naming what is wrong with `params`."""

    @abstractmethod
    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]: ...


class RuleFunction(RewardFunction):
    """A cheap per-sample function (microseconds): scored inline, no I/O."""

    @abstractmethod
    def score_one(self, sample: Sample, params: Params) -> Score: ...

    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]:
        return [self.score_one(s, params) for s in samples]


# ---------------------------------------------------------------------------------- helpers
def _float(params: Params, key: str, default: float) -> float:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"param {key!r} must be a number, got {raw!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"param {key!r} must be finite")
    return v


def _bool(params: Params, key: str, default: bool) -> bool:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"param {key!r} must be true or false, got {raw!r}")


def _reference(sample: Sample, params: Params, default_key: str) -> str | None:
    """The reference named by params["reference"] (a key of the group's references), else params["value"]."""
    key = params.get("reference", default_key)
    if key in sample.references:
        return sample.references[key]
    return params.get("value")


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def final_number(text: str) -> float | None:
    """The last number in the text ("The answer is 1,234.5." -> 1234.5); None when there is none."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def extract_code(text: str) -> str:
    """The first fenced code block (```python ... ```), else the whole text."""
    m = re.search(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", text, re.S)
    return m.group(1) if m else text


def extract_json(text: str) -> str:
    m = re.search(r"```[ \t]*(?:json)?[ \t]*\n(.*?)```", text, re.S)
    return m.group(1) if m else text


# -------------------------------------------------------------------------------- functions
class ExactMatch(RuleFunction):
    """1 when the completion equals the reference (after trimming; case-insensitive with case_sensitive=false)."""

    name = "exact_match"

    def check(self, params: Params) -> None:
        _bool(params, "case_sensitive", True)

    def score_one(self, sample: Sample, params: Params) -> Score:
        ref = _reference(sample, params, "answer")
        if ref is None:
            return Score(0.0, "no reference")
        got, want = sample.answer_text, ref.strip()
        if not _bool(params, "case_sensitive", True):
            got, want = got.lower(), want.lower()
        return Score(1.0 if got == want else 0.0)


class NumericMatch(RuleFunction):
    """1 when the final number of the completion equals the reference within `tolerance`."""

    name = "numeric_match"

    def check(self, params: Params) -> None:
        if _float(params, "tolerance", 1e-6) < 0:
            raise ValueError("param 'tolerance' must not be negative")

    def score_one(self, sample: Sample, params: Params) -> Score:
        ref = _reference(sample, params, "answer")
        want = final_number(ref) if ref is not None else None
        if want is None:
            return Score(0.0, "no numeric reference")
        got = final_number(sample.answer_text)
        if got is None:
            return Score(0.0, "no number in completion")
        return Score(1.0 if abs(got - want) <= _float(params, "tolerance", 1e-6) else 0.0)


class RegexMatch(RuleFunction):
    """1 when `pattern` is found (mode=search) or matches the whole completion (mode=fullmatch)."""

    name = "regex"
    timeout_s = 0.05

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str], Any] = {}

    def _pattern(self, params: Params) -> Any:
        pattern = params.get("pattern")
        if not pattern:
            raise ValueError("param 'pattern' is required")
        flags = params.get("flags", "")
        key = (pattern, flags)
        if key not in self._compiled:
            bits = 0
            for f in flags:
                if f not in "ims":
                    raise ValueError(f"param 'flags' may hold i, m, s; got {flags!r}")
                bits |= {"i": regex.I, "m": regex.M, "s": regex.S}[f]
            try:
                self._compiled[key] = regex.compile(pattern, bits)
            except regex.error as exc:
                raise ValueError(f"param 'pattern' is not a valid regular expression: {exc}") from None
            if len(self._compiled) > 1024:
                self._compiled.pop(next(iter(self._compiled)))
        return self._compiled[key]

    def check(self, params: Params) -> None:
        self._pattern(params)
        if params.get("mode", "search") not in ("search", "fullmatch"):
            raise ValueError("param 'mode' must be search or fullmatch")

    def score_one(self, sample: Sample, params: Params) -> Score:
        pat = self._pattern(params)
        text = sample.answer_text
        try:
            if params.get("mode", "search") == "fullmatch":
                hit = pat.fullmatch(text, timeout=self.timeout_s)
            else:
                hit = pat.search(text, timeout=self.timeout_s)
        except TimeoutError:
            return Score(0.0, "pattern timed out")
        return Score(1.0 if hit else 0.0)


class JsonSchemaValid(RuleFunction):
    """1 when the completion (or its ```json block) parses and validates against `schema`."""

    name = "json_schema"

    def __init__(self) -> None:
        self._validators: dict[str, Any] = {}

    def _validator(self, schema_text: str) -> Any:
        if schema_text not in self._validators:
            import jsonschema

            try:
                schema = json.loads(schema_text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"schema is not JSON: {exc}") from None
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"schema is not a valid JSON schema: {exc.message}") from None
            self._validators[schema_text] = cls(schema)
            if len(self._validators) > 256:
                self._validators.pop(next(iter(self._validators)))
        return self._validators[schema_text]

    def _schema_text(self, sample: Sample | None, params: Params) -> str | None:
        if "schema" in params:
            return params["schema"]
        if sample is not None:
            return sample.references.get(params.get("reference", "schema"))
        return None

    def check(self, params: Params) -> None:
        if "schema" in params:
            self._validator(params["schema"])

    def score_one(self, sample: Sample, params: Params) -> Score:
        schema_text = self._schema_text(sample, params)
        if schema_text is None:
            return Score(0.0, "no schema")
        try:
            validator = self._validator(schema_text)
        except ValueError as exc:
            return Score(0.0, str(exc))
        try:
            doc = json.loads(extract_json(sample.answer_text))
        except json.JSONDecodeError:
            return Score(0.0, "not JSON")
        err = next(iter(validator.iter_errors(doc)), None)
        return Score(1.0 if err is None else 0.0, "" if err is None else f"schema: {err.message[:160]}")


class LengthPenalty(RuleFunction):
    """0 up to `target` tokens, falling linearly to -1 at `limit` (default 2x target), -1 beyond.

    Counts completion tokens when the engine returned them, else whitespace-separated words.
    """

    name = "length_penalty"

    def check(self, params: Params) -> None:
        target = _float(params, "target", 64)
        limit = _float(params, "limit", 2 * target)
        if target < 0 or limit <= target:
            raise ValueError("params need 0 <= target < limit")

    def score_one(self, sample: Sample, params: Params) -> Score:
        target = _float(params, "target", 64)
        limit = _float(params, "limit", 2 * target)
        n = len(sample.token_ids) if sample.token_ids else len(sample.completion.split())
        if n <= target:
            return Score(0.0)
        return Score(-min(1.0, (n - target) / (limit - target)))


class TaskCheck(RuleFunction):
    """1 when the completion answers one of the synthetic tasks sy-tiny was trained on (no references needed)."""

    name = "task_check"

    def score_one(self, sample: Sample, params: Params) -> Score:
        task = params.get("task") or tasks.detect(sample.prompt)
        if task is None:
            return Score(0.0, "not a known task prompt")
        try:
            return Score(1.0 if tasks.check(task, sample.prompt, sample.completion) else 0.0)
        except ValueError as exc:
            return Score(0.0, str(exc))


class CodeTests(RewardFunction):
    """1 when the completion's code passes the group's unit tests in the sandbox (sandbox.py).

    The program is the completion's first ```python block (else its text) followed by the
    tests (references["tests"], or params["tests"]); any failure, timeout, memory or output
    overrun scores 0 with the reason in the note. Where the OS sandbox is unavailable (and
    SY_SANDBOX_ALLOW_WEAK is off) the code is not run: 0 with the note `sandbox_unavailable`.
    """

    name = "code_tests"

    def __init__(self, max_parallel: int = 2, sandbox: SandboxConfig | None = None) -> None:
        import asyncio

        self._slots = asyncio.Semaphore(max_parallel)
        self._sandbox = sandbox  # None: the SY_SANDBOX_* settings

    def _limits(self, params: Params) -> Limits:
        timeout = _float(params, "timeout_s", 5.0)
        return Limits(
            timeout_s=timeout,
            cpu_s=max(1, math.ceil(timeout)),
            memory_mb=int(_float(params, "memory_mb", 512)),
            max_output_bytes=int(_float(params, "max_output_bytes", 64 * 1024)),
        )

    def check(self, params: Params) -> None:
        lim = self._limits(params)
        if not 0 < lim.timeout_s <= 60:
            raise ValueError("param 'timeout_s' must be in (0, 60]")
        if not 64 <= lim.memory_mb <= 4096:
            raise ValueError("param 'memory_mb' must be in [64, 4096]")
        if not 0 < lim.max_output_bytes <= 1 << 22:
            raise ValueError("param 'max_output_bytes' must be in (0, 4 MiB]")

    async def _one(self, sample: Sample, params: Params) -> Score:
        tests = sample.references.get(params.get("reference", "tests")) or params.get("tests")
        if not tests:
            return Score(0.0, "no tests")
        program = extract_code(sample.answer_text) + "\n\n" + tests + "\n"
        async with self._slots:
            result = await run_python(program, self._limits(params), config=self._sandbox)
        return Score(1.0 if result.passed else 0.0, result.reason())

    async def score(self, samples: Sequence[Sample], params: Params) -> list[Score]:
        import asyncio

        return list(await asyncio.gather(*(self._one(s, params) for s in samples)))


def triton_url_of(settings: Any) -> str | None:
    """Where reward models are served: SY_REWARD_TRITON_URL, else the Triton pool's SY_TRITON_URL."""
    return getattr(settings, "reward_triton_url", None) or getattr(settings, "triton_url", None)


def default_functions(triton_url: str | None = None) -> dict[str, RewardFunction]:
    from shared.rewards.reward_model import TritonRewardModel

    fns: list[RewardFunction] = [
        ExactMatch(),
        NumericMatch(),
        RegexMatch(),
        JsonSchemaValid(),
        LengthPenalty(),
        TaskCheck(),
        CodeTests(),
        TritonRewardModel(triton_url),
    ]
    return {f.name: f for f in fns}


@dataclass(frozen=True)
class SpecItem:
    name: str
    weight: float
    params: Mapping[str, str]

    @property
    def key(self) -> str:
        return self.name


def items_from_proto(spec: Any) -> list[SpecItem]:
    """A switchyard.v1.RewardSpec as SpecItems (weight unset = 1)."""
    return [
        SpecItem(f.name, f.weight if f.HasField("weight") else 1.0, dict(f.params)) for f in spec.functions
    ]


def score_keys(items: Sequence[SpecItem]) -> list[str]:
    """Score names: the function name, or name#i when a spec uses a function twice."""
    counts: dict[str, int] = {}
    for it in items:
        counts[it.name] = counts.get(it.name, 0) + 1
    seen: dict[str, int] = {}
    keys = []
    for it in items:
        if counts[it.name] == 1:
            keys.append(it.name)
        else:
            keys.append(f"{it.name}#{seen.get(it.name, 0)}")
            seen[it.name] = seen.get(it.name, 0) + 1
    return keys


def check_spec(items: Sequence[SpecItem], functions: Mapping[str, RewardFunction]) -> None:
    """Raise ValueError naming the first bad function of a reward spec."""
    if not items:
        raise ValueError("reward.functions must name at least one function")
    for i, it in enumerate(items):
        fn = functions.get(it.name)
        if fn is None:
            raise ValueError(
                f"reward.functions[{i}]: unknown function {it.name!r}; known: {sorted(functions)}"
            )
        if not math.isfinite(it.weight):
            raise ValueError(f"reward.functions[{i}]: weight must be finite")
        try:
            fn.check(it.params)
        except ValueError as exc:
            raise ValueError(f"reward.functions[{i}] ({it.name}): {exc}") from None


@dataclass
class Scored:
    reward: float
    scores: dict[str, float]
    notes: dict[str, str]


async def score_group(
    samples: Sequence[Sample], items: Sequence[SpecItem], functions: Mapping[str, RewardFunction]
) -> list[Scored]:
    """Every function over the group, then the weighted sum per sample.

    A function that fails on the input scores 0 for the whole group with the error as the note;
    `RewardUnavailable` (a scorer's service failed the call) and `DependencyUnavailable` (it is
    down: the bus waits for it) propagate, so the bus retries the group rather than publish
    rewards that are zero only because a server was away.
    """
    keys = score_keys(items)
    out = [Scored(0.0, {}, {}) for _ in samples]
    for key, it in zip(keys, items, strict=True):
        fn = functions[it.name]
        try:
            scores = await fn.score(samples, it.params)
        except (RewardUnavailable, DependencyUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001 - see docstring
            scores = [Score(0.0, f"{type(exc).__name__}: {exc}"[:200])] * len(samples)
        for o, sc in zip(out, scores, strict=True):
            o.scores[key] = sc.value
            o.reward += it.weight * sc.value
            if sc.note:
                o.notes[key] = sc.note
    return out
