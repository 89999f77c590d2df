from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    KIND_CHAT: _ClassVar[Kind]
    KIND_COMPLETION: _ClassVar[Kind]
    KIND_EMBEDDING: _ClassVar[Kind]
    KIND_ROLLOUT: _ClassVar[Kind]

class ReplyFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLY_FORMAT_UNSPECIFIED: _ClassVar[ReplyFormat]
    REPLY_FORMAT_PROTOBUF: _ClassVar[ReplyFormat]
    REPLY_FORMAT_JSON: _ClassVar[ReplyFormat]

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_INTERACTIVE: _ClassVar[Priority]
    PRIORITY_BATCH: _ClassVar[Priority]
    PRIORITY_ROLLOUT: _ClassVar[Priority]
KIND_UNSPECIFIED: Kind
KIND_CHAT: Kind
KIND_COMPLETION: Kind
KIND_EMBEDDING: Kind
KIND_ROLLOUT: Kind
REPLY_FORMAT_UNSPECIFIED: ReplyFormat
REPLY_FORMAT_PROTOBUF: ReplyFormat
REPLY_FORMAT_JSON: ReplyFormat
PRIORITY_UNSPECIFIED: Priority
PRIORITY_INTERACTIVE: Priority
PRIORITY_BATCH: Priority
PRIORITY_ROLLOUT: Priority

class ContentPart(_message.Message):
    __slots__ = ("type", "text", "image_url", "input_audio")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    INPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: str
    image_url: ImageUrl
    input_audio: InputAudio
    def __init__(self, type: _Optional[str] = ..., text: _Optional[str] = ..., image_url: _Optional[_Union[ImageUrl, _Mapping]] = ..., input_audio: _Optional[_Union[InputAudio, _Mapping]] = ...) -> None: ...

class ImageUrl(_message.Message):
    __slots__ = ("url", "detail")
    URL_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    url: str
    detail: str
    def __init__(self, url: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class InputAudio(_message.Message):
    __slots__ = ("data", "format")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    data: str
    format: str
    def __init__(self, data: _Optional[str] = ..., format: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "parts", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ..., name: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "logprobs", "top_logprobs", "stream", "min_p", "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "logit_bias", "allowed_token_ids", "bad_words")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    n: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    min_tokens: int
    logprobs: bool
    top_logprobs: int
    stream: bool
    min_p: float
    ignore_eos: bool
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    include_stop_str_in_output: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    logit_bias: _containers.ScalarMap[int, float]
    allowed_token_ids: _containers.RepeatedScalarFieldContainer[int]
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., n: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., min_tokens: _Optional[int] = ..., logprobs: bool = ..., top_logprobs: _Optional[int] = ..., stream: bool = ..., min_p: _Optional[float] = ..., ignore_eos: bool = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., include_stop_str_in_output: bool = ..., skip_special_tokens: bool = ..., spaces_between_special_tokens: bool = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., allowed_token_ids: _Optional[_Iterable[int]] = ..., bad_words: _Optional[_Iterable[str]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("messages", "prompt", "sampling", "user")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    prompt: str
    sampling: SamplingParams
    user: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., user: _Optional[str] = ...) -> None: ...

class MediaRef(_message.Message):
    __slots__ = ("uri", "mime", "sha256", "size_bytes", "width", "height", "duration_s", "modality", "part_index", "message_index")
    URI_FIELD_NUMBER: _ClassVar[int]
    MIME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    MODALITY_FIELD_NUMBER: _ClassVar[int]
    PART_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    uri: str
    mime: str
    sha256: str
    size_bytes: int
    width: int
    height: int
    duration_s: float
    modality: str
    part_index: int
    message_index: int
    def __init__(self, uri: _Optional[str] = ..., mime: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., duration_s: _Optional[float] = ..., modality: _Optional[str] = ..., part_index: _Optional[int] = ..., message_index: _Optional[int] = ...) -> None: ...

class TokenCounts(_message.Message):
    __slots__ = ("prompt_text", "image", "audio", "total", "tokenizer")
    PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    prompt_text: int
    image: int
    audio: int
    total: int
    tokenizer: str
    def __init__(self, prompt_text: _Optional[int] = ..., image: _Optional[int] = ..., audio: _Optional[int] = ..., total: _Optional[int] = ..., tokenizer: _Optional[str] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("stage", "start_ns", "end_ns", "attrs")
    class AttrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STAGE_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    start_ns: int
    end_ns: int
    attrs: _containers.ScalarMap[str, str]
    def __init__(self, stage: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., attrs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CacheInfo(_message.Message):
    __slots__ = ("hit", "similarity", "entry_id", "tier")
    HIT_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    hit: bool
    similarity: float
    entry_id: str
    tier: str
    def __init__(self, hit: bool = ..., similarity: _Optional[float] = ..., entry_id: _Optional[str] = ..., tier: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "stage", "retryable", "http_status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    stage: str
    retryable: bool
    http_status: int
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., stage: _Optional[str] = ..., retryable: bool = ..., http_status: _Optional[int] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("rollout_id", "group_index", "sample_index", "group_size", "prompts", "reward_spec", "num_groups", "references", "reward", "group", "staleness", "policy_alias", "accepted_unix_ns", "return_tokens")
    class ReferencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INDEX_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    REWARD_SPEC_FIELD_NUMBER: _ClassVar[int]
    NUM_GROUPS_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    POLICY_ALIAS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    group_index: int
    sample_index: int
    group_size: int
    prompts: _containers.RepeatedCompositeFieldContainer[RolloutPrompt]
    reward_spec: RewardSpec
    num_groups: int
    references: _containers.ScalarMap[str, str]
    reward: RewardResult
    group: GroupResult
    staleness: int
    policy_alias: str
    accepted_unix_ns: int
    return_tokens: bool
    def __init__(self, rollout_id: _Optional[str] = ..., group_index: _Optional[int] = ..., sample_index: _Optional[int] = ..., group_size: _Optional[int] = ..., prompts: _Optional[_Iterable[_Union[RolloutPrompt, _Mapping]]] = ..., reward_spec: _Optional[_Union[RewardSpec, _Mapping]] = ..., num_groups: _Optional[int] = ..., references: _Optional[_Mapping[str, str]] = ..., reward: _Optional[_Union[RewardResult, _Mapping]] = ..., group: _Optional[_Union[GroupResult, _Mapping]] = ..., staleness: _Optional[int] = ..., policy_alias: _Optional[str] = ..., accepted_unix_ns: _Optional[int] = ..., return_tokens: bool = ...) -> None: ...

class RolloutPrompt(_message.Message):
    __slots__ = ("messages", "prompt", "references")
    class ReferencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    prompt: str
    references: _containers.ScalarMap[str, str]
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., prompt: _Optional[str] = ..., references: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RewardFunction(_message.Message):
    __slots__ = ("name", "weight", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: float
    params: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[float] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RewardSpec(_message.Message):
    __slots__ = ("functions",)
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    functions: _containers.RepeatedCompositeFieldContainer[RewardFunction]
    def __init__(self, functions: _Optional[_Iterable[_Union[RewardFunction, _Mapping]]] = ...) -> None: ...

class RewardResult(_message.Message):
    __slots__ = ("reward", "scores", "notes", "advantage", "scored_unix_ns")
    class ScoresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class NotesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REWARD_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_FIELD_NUMBER: _ClassVar[int]
    SCORED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    reward: float
    scores: _containers.ScalarMap[str, float]
    notes: _containers.ScalarMap[str, str]
    advantage: float
    scored_unix_ns: int
    def __init__(self, reward: _Optional[float] = ..., scores: _Optional[_Mapping[str, float]] = ..., notes: _Optional[_Mapping[str, str]] = ..., advantage: _Optional[float] = ..., scored_unix_ns: _Optional[int] = ...) -> None: ...

class GroupResult(_message.Message):
    __slots__ = ("mean", "std", "size", "rewards", "advantages", "completion_ms", "scoring_ms")
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_MS_FIELD_NUMBER: _ClassVar[int]
    SCORING_MS_FIELD_NUMBER: _ClassVar[int]
    mean: float
    std: float
    size: int
    rewards: _containers.RepeatedScalarFieldContainer[float]
    advantages: _containers.RepeatedScalarFieldContainer[float]
    completion_ms: float
    scoring_ms: float
    def __init__(self, mean: _Optional[float] = ..., std: _Optional[float] = ..., size: _Optional[int] = ..., rewards: _Optional[_Iterable[float]] = ..., advantages: _Optional[_Iterable[float]] = ..., completion_ms: _Optional[float] = ..., scoring_ms: _Optional[float] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "token", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., logprob: _Optional[float] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "token", "logprob", "top")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    token: str
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., token: _Optional[str] = ..., logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("index", "text", "finish_reason", "token_ids", "logprobs", "token_logprobs")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    finish_reason: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    token_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., finish_reason: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., token_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("choices", "usage", "pool", "worker", "model_version")
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedCompositeFieldContainer[Choice]
    usage: Usage
    pool: str
    worker: str
    model_version: str
    def __init__(self, choices: _Optional[_Iterable[_Union[Choice, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., pool: _Optional[str] = ..., worker: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("request_id", "tenant", "kind", "model", "adapter", "request", "media", "priority", "deadline_unix_ms", "reply_to", "batch_id", "rollout", "policy_version", "timings", "cache", "error", "tokens", "response", "pool", "created_unix_ns", "metadata", "adapter_ref", "reply_format")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_REF_FIELD_NUMBER: _ClassVar[int]
    REPLY_FORMAT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    kind: Kind
    model: str
    adapter: str
    request: Request
    media: _containers.RepeatedCompositeFieldContainer[MediaRef]
    priority: Priority
    deadline_unix_ms: int
    reply_to: str
    batch_id: str
    rollout: Rollout
    policy_version: str
    timings: _containers.RepeatedCompositeFieldContainer[Timing]
    cache: CacheInfo
    error: Error
    tokens: TokenCounts
    response: Response
    pool: str
    created_unix_ns: int
    metadata: _containers.ScalarMap[str, str]
    adapter_ref: AdapterRef
    reply_format: ReplyFormat
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., kind: _Optional[_Union[Kind, str]] = ..., model: _Optional[str] = ..., adapter: _Optional[str] = ..., request: _Optional[_Union[Request, _Mapping]] = ..., media: _Optional[_Iterable[_Union[MediaRef, _Mapping]]] = ..., priority: _Optional[_Union[Priority, str]] = ..., deadline_unix_ms: _Optional[int] = ..., reply_to: _Optional[str] = ..., batch_id: _Optional[str] = ..., rollout: _Optional[_Union[Rollout, _Mapping]] = ..., policy_version: _Optional[str] = ..., timings: _Optional[_Iterable[_Union[Timing, _Mapping]]] = ..., cache: _Optional[_Union[CacheInfo, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., tokens: _Optional[_Union[TokenCounts, _Mapping]] = ..., response: _Optional[_Union[Response, _Mapping]] = ..., pool: _Optional[str] = ..., created_unix_ns: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., adapter_ref: _Optional[_Union[AdapterRef, _Mapping]] = ..., reply_format: _Optional[_Union[ReplyFormat, str]] = ...) -> None: ...

class AdapterRef(_message.Message):
    __slots__ = ("name", "version", "sha256", "owner", "rank", "base_model", "requested", "size_bytes", "config_sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    sha256: str
    owner: str
    rank: int
    base_model: str
    requested: str
    size_bytes: int
    config_sha256: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., sha256: _Optional[str] = ..., owner: _Optional[str] = ..., rank: _Optional[int] = ..., base_model: _Optional[str] = ..., requested: _Optional[str] = ..., size_bytes: _Optional[int] = ..., config_sha256: _Optional[str] = ...) -> None: ...
