"""One stream read through the proxy with the real ``openai`` SDK, and how it ended.

Several checks ask the same question of a proxy: what does a learner's client, the openai SDK,
make of this stream? ``read_with_sdk`` reads one to its end (or its time limit) and names the
ending the way the SDK shows it: ``finished`` (the stream ended normally), ``error_event``
(the SDK raised ``APIError`` for an error event in the stream), ``status`` (an HTTP error
status), ``connection`` (the connection broke), ``unparsable`` (a data line that is not JSON),
``hung`` (nothing ended it within the limit).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from labkit.checks.context import PROMPT, CheckContext

__all__ = ["Ending", "SdkStream", "read_with_sdk"]

Ending = Literal["finished", "error_event", "status", "connection", "unparsable", "hung"]


@dataclass(frozen=True)
class SdkStream:
    ending: Ending
    text_chars: int  # content the SDK delivered
    chunks: int  # chunks the SDK parsed, with or without content
    error: str  # the exception the SDK raised, if any (cut to 160 characters)
    raised: str = "nothing"  # its type's name
    status: int = 200  # the HTTP status the SDK saw
    retry_after: str | None = None  # with an error status, its Retry-After header


async def read_with_sdk(
    ctx: CheckContext, scenario: dict[str, int], seed: int, limit_s: float
) -> SdkStream:
    """Stream one chat completion with the mock ``scenario`` through the proxy."""
    import openai  # here, not at the top: importing labkit stays quick

    client = openai.AsyncOpenAI(
        base_url=ctx.sdk_base_url, api_key="lab-key", max_retries=0, timeout=limit_s
    )
    text, chunks = 0, 0
    ending: Ending = "finished"
    failure: BaseException | None = None
    status, retry_after = 200, None
    try:
        async with asyncio.timeout(limit_s):
            stream = await client.chat.completions.create(
                model="lab-model",
                messages=[{"role": "user", "content": PROMPT}],
                stream=True,
                extra_body={"mock": {**scenario, "seed": seed}},
            )
            async with stream:
                async for chunk in stream:
                    chunks += 1
                    if chunk.choices and chunk.choices[0].delta.content:
                        text += len(chunk.choices[0].delta.content)
    except TimeoutError as exc:
        ending, failure = "hung", exc
    except openai.APIStatusError as exc:
        ending, failure = "status", exc
        status, retry_after = exc.status_code, exc.response.headers.get("retry-after")
    except openai.APIConnectionError as exc:
        ending, failure = "connection", exc
    except openai.APIError as exc:
        ending, failure = "error_event", exc
    except ValueError as exc:  # json.JSONDecodeError: a data line that is not JSON
        ending, failure = "unparsable", exc
    finally:
        await client.close()
    if failure is None:
        return SdkStream(ending, text, chunks, "")
    raised = type(failure).__name__
    error = f"{raised}: {failure}" if ending != "hung" else ""
    return SdkStream(ending, text, chunks, error[:160], raised, status, retry_after)
