from pydantic import SecretStr

from shared.runtime.auth import bearer, is_internal, tenant_for_key
from shared.runtime.config import Settings


def test_bearer_header_parsing() -> None:
    assert bearer("Bearer sk-a") == "sk-a"
    assert bearer("bearer  sk-a ") == "sk-a"
    assert bearer("Basic abc") is None
    assert bearer(None) is None and bearer("") is None


def test_api_keys_map_to_tenants_and_unknown_keys_to_none() -> None:
    keys = {"sk-a": "tenant-a", "sk-b": "tenant-b"}
    assert tenant_for_key(keys, "sk-b") == "tenant-b"
    assert tenant_for_key(keys, "sk-c") is None
    assert tenant_for_key(keys, "") is None


def test_internal_token() -> None:
    s = Settings(internal_token=SecretStr("s3cret"))
    assert is_internal(s, "Bearer s3cret")
    assert not is_internal(s, "Bearer s3cre")
    assert not is_internal(s, "s3cret")  # not a bearer header
    assert not is_internal(s, None)
