from switchyard.v1 import envelope_pb2 as _envelope_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("original_value", "original_key", "original_headers", "topic", "partition", "offset", "stage", "reason", "error_code", "attempts", "failed_unix_ns", "request_id", "tenant", "original_size", "truncated", "original_sha256")
    ORIGINAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_KEY_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_HEADERS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SHA256_FIELD_NUMBER: _ClassVar[int]
    original_value: bytes
    original_key: bytes
    original_headers: _containers.RepeatedCompositeFieldContainer[Header]
    topic: str
    partition: int
    offset: int
    stage: str
    reason: str
    error_code: str
    attempts: int
    failed_unix_ns: int
    request_id: str
    tenant: str
    original_size: int
    truncated: bool
    original_sha256: str
    def __init__(self, original_value: _Optional[bytes] = ..., original_key: _Optional[bytes] = ..., original_headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., stage: _Optional[str] = ..., reason: _Optional[str] = ..., error_code: _Optional[str] = ..., attempts: _Optional[int] = ..., failed_unix_ns: _Optional[int] = ..., request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., original_size: _Optional[int] = ..., truncated: bool = ..., original_sha256: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("pool", "worker_id", "engine", "models", "adapters", "in_flight", "max_in_flight", "queue_depth", "kv_usage", "sent_unix_ns", "modalities", "max_lora_rank", "partitions", "model_versions")
    class ModelVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    POOL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    MODALITIES_FIELD_NUMBER: _ClassVar[int]
    MAX_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    pool: str
    worker_id: str
    engine: str
    models: _containers.RepeatedScalarFieldContainer[str]
    adapters: _containers.RepeatedScalarFieldContainer[str]
    in_flight: int
    max_in_flight: int
    queue_depth: int
    kv_usage: float
    sent_unix_ns: int
    modalities: _containers.RepeatedScalarFieldContainer[str]
    max_lora_rank: int
    partitions: _containers.RepeatedScalarFieldContainer[int]
    model_versions: _containers.ScalarMap[str, str]
    def __init__(self, pool: _Optional[str] = ..., worker_id: _Optional[str] = ..., engine: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., adapters: _Optional[_Iterable[str]] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., queue_depth: _Optional[int] = ..., kv_usage: _Optional[float] = ..., sent_unix_ns: _Optional[int] = ..., modalities: _Optional[_Iterable[str]] = ..., max_lora_rank: _Optional[int] = ..., partitions: _Optional[_Iterable[int]] = ..., model_versions: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ChoiceDelta(_message.Message):
    __slots__ = ("index", "text", "token_ids", "token_offset", "finish_reason", "text_offset", "logprobs")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    token_offset: int
    finish_reason: str
    text_offset: int
    logprobs: _containers.RepeatedCompositeFieldContainer[_envelope_pb2.TokenLogprob]
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., token_offset: _Optional[int] = ..., finish_reason: _Optional[str] = ..., text_offset: _Optional[int] = ..., logprobs: _Optional[_Iterable[_Union[_envelope_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class StreamDelta(_message.Message):
    __slots__ = ("request_id", "tenant", "choices", "worker", "sent_unix_ns", "first")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    choices: _containers.RepeatedCompositeFieldContainer[ChoiceDelta]
    worker: str
    sent_unix_ns: int
    first: bool
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[ChoiceDelta, _Mapping]]] = ..., worker: _Optional[str] = ..., sent_unix_ns: _Optional[int] = ..., first: bool = ...) -> None: ...

class AdapterVersion(_message.Message):
    __slots__ = ("version", "sha256", "size_bytes", "config_sha256", "rank", "alpha", "target_modules", "base_model", "created_unix_ns")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SHA256_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODULES_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    version: int
    sha256: str
    size_bytes: int
    config_sha256: str
    rank: int
    alpha: float
    target_modules: _containers.RepeatedScalarFieldContainer[str]
    base_model: str
    created_unix_ns: int
    def __init__(self, version: _Optional[int] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., config_sha256: _Optional[str] = ..., rank: _Optional[int] = ..., alpha: _Optional[float] = ..., target_modules: _Optional[_Iterable[str]] = ..., base_model: _Optional[str] = ..., created_unix_ns: _Optional[int] = ...) -> None: ...

class AdapterEvent(_message.Message):
    __slots__ = ("type", "name", "owner", "visibility", "version", "alias", "previous_version", "versions", "aliases", "sent_unix_ns")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[AdapterEvent.Type]
        TYPE_PUBLISHED: _ClassVar[AdapterEvent.Type]
        TYPE_ALIAS_MOVED: _ClassVar[AdapterEvent.Type]
        TYPE_VERSION_DELETED: _ClassVar[AdapterEvent.Type]
        TYPE_DELETED: _ClassVar[AdapterEvent.Type]
    TYPE_UNSPECIFIED: AdapterEvent.Type
    TYPE_PUBLISHED: AdapterEvent.Type
    TYPE_ALIAS_MOVED: AdapterEvent.Type
    TYPE_VERSION_DELETED: AdapterEvent.Type
    TYPE_DELETED: AdapterEvent.Type
    class AliasesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    type: AdapterEvent.Type
    name: str
    owner: str
    visibility: str
    version: int
    alias: str
    previous_version: int
    versions: _containers.RepeatedCompositeFieldContainer[AdapterVersion]
    aliases: _containers.ScalarMap[str, int]
    sent_unix_ns: int
    def __init__(self, type: _Optional[_Union[AdapterEvent.Type, str]] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ..., visibility: _Optional[str] = ..., version: _Optional[int] = ..., alias: _Optional[str] = ..., previous_version: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[AdapterVersion, _Mapping]]] = ..., aliases: _Optional[_Mapping[str, int]] = ..., sent_unix_ns: _Optional[int] = ...) -> None: ...

class CachePurge(_message.Message):
    __slots__ = ("tenant", "model", "adapter", "entry_id", "replica", "sent_unix_ns")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    model: str
    adapter: str
    entry_id: str
    replica: str
    sent_unix_ns: int
    def __init__(self, tenant: _Optional[str] = ..., model: _Optional[str] = ..., adapter: _Optional[str] = ..., entry_id: _Optional[str] = ..., replica: _Optional[str] = ..., sent_unix_ns: _Optional[int] = ...) -> None: ...
