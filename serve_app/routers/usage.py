from __future__ import annotations

from fastapi import APIRouter, Query

from contracts.usage import UsageReport
from serve_app.auth import Caller, Ctx
from serve_app.services import usage_report as service

router = APIRouter(tags=["usage"])


@router.get("/v1/transcribe/usage", response_model=UsageReport)
async def usage(
    caller: Caller,
    ctx: Ctx,
    start_date_time: str = Query(description="YYYY-MM-DDTHH:MM:SSZ"),
    end_date_time: str = Query(description="YYYY-MM-DDTHH:MM:SSZ"),
    interval: str = Query("day", description="minute, hour, day, week or month"),
) -> UsageReport:
    return await service.report(ctx, caller, start_date_time, end_date_time, interval)
