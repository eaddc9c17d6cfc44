"""OpenAI's ``/v1/models``: the models a key may call."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from ferryman_server.router.doors.http.caller import Authenticated

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

OWNER = "ferryman"


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = OWNER


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


@router.get("/models", summary="The models this key may call.")
async def list_models(caller: Authenticated) -> ModelList:
    models = caller.gateway.catalog.list_models(caller.tenant).models
    return ModelList(data=[ModelCard(id=m.name) for m in models])


@router.get("/models/{model}", summary="One model.")
async def get_model(caller: Authenticated, model: str) -> ModelCard:
    return ModelCard(id=caller.gateway.catalog.get_model(caller.tenant, model).name)
