"""fow-cache 0.1.0's 600 question pairs (data CC BY 4.0, code MIT; Mabon ap Gwyn), relabelled.

Its categories map onto ours: near_repeat and paraphrase are `paraphrase`; negation stays
`negation`; entity_swap, number_date and scope are split item by item (the lists below, read
from the pairs themselves) into swapped roles (a direction or order reversed), a different name,
a different product or language, a changed number or date, an added constraint (b is a with
words added), or the same topic with another question. The texts are unchanged. Its
multi-turn conversations are not used: the cache compares only last turns within the same
conversation context, so those pairs never meet in it.
"""

from __future__ import annotations

BY_CATEGORY = {
    "near_repeat": "paraphrase",
    "paraphrase": "paraphrase",
    "negation": "negation",
    "entity_swap": "different_name",
    "number_date": "changed_number",
    "scope": "same_topic_different_question",
}

_SWAPPED = "entity_swap-009 entity_swap-013 entity_swap-a001 entity_swap-a014 entity_swap-a016 entity_swap-a021 entity_swap-a024 entity_swap-b008 entity_swap-b014"
_PRODUCT = (
    "entity_swap-001 entity_swap-007 entity_swap-010 entity_swap-011 entity_swap-016 entity_swap-a009 "
    "entity_swap-b007 entity_swap-b009 entity_swap-b015 entity_swap-b019 entity_swap-b020 entity_swap-b021 "
    "entity_swap-b025 scope-022"
)
_SAME_TOPIC = (
    "entity_swap-008 entity_swap-015 entity_swap-018 entity_swap-019 entity_swap-020 entity_swap-022 "
    "entity_swap-a020 entity_swap-b002 entity_swap-b010 entity_swap-b012 entity_swap-b016 entity_swap-b022 "
    "entity_swap-b023 number_date-005 number_date-b017"
)
_DATE = (
    "number_date-001 number_date-003 number_date-006 number_date-014 number_date-015 number_date-016 "
    "number_date-017 number_date-019 number_date-023 number_date-024 number_date-a009 number_date-a017 "
    "number_date-a019 number_date-b008 number_date-b010 number_date-b013 number_date-b023 number_date-b024"
)
_NUMBER = "scope-a001 scope-a011"
_ADDED = "scope-001 scope-020 scope-021 scope-024"
_NAME = "scope-003"

OVERRIDES: dict[str, str] = {
    **dict.fromkeys(_SWAPPED.split(), "swapped_roles"),
    **dict.fromkeys(_PRODUCT.split(), "different_language_or_product"),
    **dict.fromkeys(_SAME_TOPIC.split(), "same_topic_different_question"),
    **dict.fromkeys(_DATE.split(), "changed_date"),
    **dict.fromkeys(_NUMBER.split(), "changed_number"),
    **dict.fromkeys(_ADDED.split(), "added_constraint"),
    **dict.fromkeys(_NAME.split(), "different_name"),
}


def fow_pairs() -> list[dict[str, object]]:
    """fow-cache's question pairs in our record shape (no family or split yet)."""
    from fow_cache.data import load_questions

    out: list[dict[str, object]] = []
    for q in load_questions():
        qid = str(q["id"])
        kind = OVERRIDES.get(qid, BY_CATEGORY[str(q["category"])])
        if (kind == "paraphrase") != bool(q["same_answer"]):
            raise ValueError(f"fow-cache {qid}: {kind} but same_answer={q['same_answer']}")
        out.append(
            {
                "id": f"fow-{qid}",
                "a": str(q["a"]),
                "b": str(q["b"]),
                "kind": kind,
                "same": bool(q["same_answer"]),
                "source": "fow-cache",
                "group": f"fow-{qid}",
                "domain": f"fow:{q['category']}",
            }
        )
    return out
