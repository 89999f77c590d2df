"""The reward functions, each behind the interface of base.py.

A function gets the samples of one group (the prompt, each completion, the group's references)
and its params, and returns one `Score` per sample. Rule-based functions are plain per-sample
code (`RuleFunction.score_one`); the code-test and reward-model functions are async and batch
over the group. `check` validates params at submission time, so a bad spec is a 400 at the
gateway (or a DLQ record) instead of a zero reward later. Their weighted combination is in
spec.py.

Names: exact_match, numeric_match, regex, json_schema, length_penalty, code_tests,
task_check (the checkable tasks of shared/rewards/tasks.py), reward_model (Triton).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import regex  # ships with transformers; its matcher takes a timeout (user patterns can backtrack)

from shared.rewards import tasks
from shared.rewards.base import (
    Params,
    RewardFunction,
    RuleFunction,
    Sample,
    Score,
    bool_param,
    float_param,
)
from shared.rewards.reward_model import TritonRewardModel
from shared.rewards.sandbox import Limits, SandboxConfig, run_python


# ---------------------------------------------------------------------------------- helpers
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
        bool_param(params, "case_sensitive", True)

    def score_one(self, sample: Sample, params: Params) -> Score:
        ref = _reference(sample, params, "answer")
        if ref is None:
            return Score(0.0, "no reference")
        got, want = sample.answer_text, ref.strip()
        if not bool_param(params, "case_sensitive", True):
            got, want = got.lower(), want.lower()
        return Score(1.0 if got == want else 0.0)


class NumericMatch(RuleFunction):
    """1 when the final number of the completion equals the reference within `tolerance`."""

    name = "numeric_match"

    def check(self, params: Params) -> None:
        if float_param(params, "tolerance", 1e-6) < 0:
            raise ValueError("param 'tolerance' must not be negative")

    def score_one(self, sample: Sample, params: Params) -> Score:
        ref = _reference(sample, params, "answer")
        want = final_number(ref) if ref is not None else None
        if want is None:
            return Score(0.0, "no numeric reference")
        got = final_number(sample.answer_text)
        if got is None:
            return Score(0.0, "no number in completion")
        return Score(1.0 if abs(got - want) <= float_param(params, "tolerance", 1e-6) else 0.0)


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
        target = float_param(params, "target", 64)
        limit = float_param(params, "limit", 2 * target)
        if target < 0 or limit <= target:
            raise ValueError("params need 0 <= target < limit")

    def score_one(self, sample: Sample, params: Params) -> Score:
        target = float_param(params, "target", 64)
        limit = float_param(params, "limit", 2 * target)
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
        timeout = float_param(params, "timeout_s", 5.0)
        return Limits(
            timeout_s=timeout,
            cpu_s=max(1, math.ceil(timeout)),
            memory_mb=int(float_param(params, "memory_mb", 512)),
            max_output_bytes=int(float_param(params, "max_output_bytes", 64 * 1024)),
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
