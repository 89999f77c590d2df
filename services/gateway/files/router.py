"""/v1/files: upload, list, read, download and delete batch files (logic: serving.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response

from shared.openai.protocol import FileDeleted, FileList, FileObject

from ..deps import Tenant, state_of
from .serving import FileServing

router = APIRouter()


def serving_of(request: Request) -> FileServing:
    return state_of(request, "files", FileServing)


@router.post("/v1/files", response_model=FileObject)
async def create_file(
    file: Annotated[UploadFile, File()], purpose: Annotated[str, Form()], request: Request, tenant: Tenant
) -> JSONResponse:
    """Upload a JSONL batch input file (purpose `batch`)."""
    return JSONResponse(await serving_of(request).create(file, purpose, tenant))


@router.get("/v1/files", response_model=FileList)
async def list_files(request: Request, tenant: Tenant) -> JSONResponse:
    return JSONResponse(await serving_of(request).list(tenant))


@router.get("/v1/files/{file_id}", response_model=FileObject)
async def get_file(file_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    return JSONResponse(await serving_of(request).get(file_id, tenant))


@router.get(
    "/v1/files/{file_id}/content",
    response_class=Response,
    responses={
        200: {
            "description": "The file's JSONL lines",
            "content": {"application/jsonl": {"schema": {"type": "string"}}},
        }
    },
)
async def file_content(file_id: str, request: Request, tenant: Tenant) -> Response:
    """The bytes of an input, output or error file."""
    return Response(await serving_of(request).content(file_id, tenant), media_type="application/jsonl")


@router.delete("/v1/files/{file_id}", response_model=FileDeleted)
async def delete_file(file_id: str, request: Request, tenant: Tenant) -> JSONResponse:
    return JSONResponse(await serving_of(request).delete(file_id, tenant))
