"""shared.runtime.body_limit: a body over the limit gets 413 whether or not it declares its length."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from shared.runtime.body_limit import BodyLimit


class TooBig(Exception):
    pass


def _client(methods: set[str] | None = None) -> TestClient:
    app = FastAPI()

    @app.exception_handler(TooBig)
    async def too_big(_r: Request, _e: TooBig) -> JSONResponse:
        return JSONResponse({"error": "overflow"}, status_code=413)

    @app.post("/echo")
    @app.put("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"n": len(await request.body())}

    limited = BodyLimit(
        app,
        10,
        refusal=lambda: JSONResponse({"error": "declared"}, status_code=413),
        overflow=TooBig,
        methods=methods,
    )
    return TestClient(limited)


def test_a_body_within_the_limit_passes() -> None:
    assert _client().post("/echo", content=b"x" * 10).json() == {"n": 10}


def test_a_declared_oversize_body_is_refused_before_reading() -> None:
    r = _client().post("/echo", content=b"x" * 11)
    assert (r.status_code, r.json()) == (413, {"error": "declared"})


def test_an_undeclared_oversize_body_is_stopped_while_it_arrives() -> None:
    def chunks():  # no Content-Length: chunked transfer
        yield b"x" * 6
        yield b"x" * 6

    r = _client().post("/echo", content=chunks())
    assert (r.status_code, r.json()) == (413, {"error": "overflow"})


def test_only_the_named_methods_are_limited() -> None:
    assert _client({"POST"}).put("/echo", content=b"x" * 50).json() == {"n": 50}
    assert _client({"POST"}).post("/echo", content=b"x" * 50).status_code == 413
