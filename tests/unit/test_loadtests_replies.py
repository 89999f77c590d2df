"""The `replies` benchmark's report section (loadtests/report.py)."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.report import render


def case(replicas: int, per_replica: float, total: float) -> dict:
    return {
        "replicas": replicas,
        "requests": 300,
        "answered": 300,
        "bytes_per_request_per_replica": per_replica,
        "bytes_read_per_request_all_replicas": total,
    }


def test_the_section_has_one_row_per_case_with_its_figures(tmp_path: Path) -> None:
    data = {
        "one_replica": case(1, 812.0, 812.0),
        "three_replicas": case(3, 830.5, 845.0),
        "three_replicas_reading_everything": case(3, 2480.0, 2460.0),
        "summary": {"ratio_3_vs_1": 1.02},
    }
    (tmp_path / "replies.json").write_text(json.dumps(data))
    page = render(tmp_path)
    assert "Reply routing: bytes each gateway replica reads" in page
    assert "| 3 replicas, reply partitions | 300 | 300 | 830.5 | 845 |" in page
    assert "| 3 replicas reading every reply | 300 | 300 | 2,480.0 | 2,460.0 |" in page
    assert "| 1 replica | 300 | 300 | 812 | 812 |" in page
