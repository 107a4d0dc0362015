"""An OpenAI-compatible API on the app's server: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``.

Switches are chosen per request with an extra field the official client passes
through ``extra_body``::

    client = OpenAI(base_url="http://127.0.0.1:7860/v1", api_key="-")
    client.completions.create(model="smollm2-135m", prompt="My weekend was", seed=1,
                              extra_body={"switches": {"sentiment": 4, "formality": -2}, "adaptive": False})

A request goes through the model's :class:`~lmswitch.serve.batcher.Batcher`:
concurrent requests are decoded together on the app's compute thread, each row
with its own switches and seed, so the same seed gives the same text as
``lmswitch.generate``. Errors are OpenAI-style objects (``{"error": {...}}``)
with HTTP 4xx: a bad value (400), a missing or wrong API key (401), an unknown
model (404), an oversized body (413); 503 while the model loads. Switches come
from the app's switch folder (a session's private switches are not visible here).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from jinja2 import TemplateError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.concurrency import run_in_threadpool

from lmswitch.core.generate import Prompt, check_seed
from lmswitch.core.guided import judges_of
from lmswitch.core.models import LanguageModel
from lmswitch.core.options import SAMPLING, SamplingOptions
from lmswitch.core.steering import Setting, beyond_fluent_field, check_setting
from lmswitch.serve.batcher import Busy, Row
from lmswitch.serve.limits import check_new_tokens, check_request
from lmswitch.webapp.backend import SERVER_STOPPING, USER_ERRORS, Backend

DONE = "data: [DONE]\n\n"  # the last server-sent event of a stream
MAX_BODY_BYTES = 1_000_000  # a request body above this is refused with 413
MAX_SWITCHES = 16  # switches in one request
MAX_IN_FLIGHT = 8  # requests running or waiting; beyond it a request is refused at once ("busy, retry"), never left to time out
Number = StrictInt | StrictFloat


class ApiError(Exception):
    """An error the client should see, as an OpenAI-style error object with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


# a request cut short because the server stops (its text would otherwise read as one that merely ends)
STOPPING_ERROR = ApiError(503, SERVER_STOPPING, kind="server_error", code="server_stopping")


# OpenAI fields this server does not implement: refused when they ask for something (400, as n > 1 and stop are), never
# ignored, so a client does not read an answer as having what it asked for (log-probabilities, penalties, tools)
_PENALTIES = "penalties are not applied (the repeat guard, repeat_guard, keeps steered text from looping)"
_LOGPROBS, _TOOLS = "log-probabilities are not returned", "tools are not supported"
UNSUPPORTED = {"logprobs": _LOGPROBS, "top_logprobs": _LOGPROBS, "echo": "the prompt is not echoed",
               "suffix": "text after the completion (insertion) is not supported", "presence_penalty": _PENALTIES,
               "frequency_penalty": _PENALTIES, "logit_bias": "logit biases are not applied (steer with switches instead)",
               "tools": _TOOLS, "functions": "functions are not supported", "tool_choice": _TOOLS,
               "response_format": "only plain text is written"}


EXTENSIONS = ("switches", "adaptive", "kl_budget", "generation_budget", "guide", "repeat_guard")  # lmswitch's request fields


def _refuse_unsupported(req: _Request) -> None:
    """Refuse what this server does not do (OpenAI fields it ignores would change the answer silently), a misspelt
    steering field, and more than one prompt or choice."""
    asked = next((k for k in UNSUPPORTED if _asks((req.model_extra or {}).get(k))), None)
    if asked:
        raise ApiError(400, f"{asked}: {UNSUPPORTED[asked]} by this server; leave it out", param=asked)
    if "extra_body" in (req.model_extra or {}):  # sent as a field, its switches would be ignored
        raise ApiError(400, "extra_body is an argument of the OpenAI Python client, not a field of the request: send "
                            f"{', '.join(EXTENSIONS[:2])} and the other steering fields at the top level of the JSON body",
                       param="extra_body")
    for key in req.model_extra or {}:  # other unknown fields are ignored, but not a misspelt steering field
        meant = difflib.get_close_matches(key, EXTENSIONS, n=1, cutoff=0.8)
        if meant and key not in UNSUPPORTED:
            raise ApiError(400, f"unknown field {key[:40]!r}: did you mean {meant[0]!r}? (as sent, the text would not be "
                                "steered as asked)", param=key[:40])
    if req.generation_budget is not None and not req.adaptive:
        raise ApiError(400, "generation_budget is adaptive strength's budget per generation: give it with adaptive=true, or "
                            "leave it out", param="generation_budget")
    if req.n != 1:
        raise ApiError(400, f"n = {req.n}: one choice per request (send several requests, with different seeds)", param="n")
    if req.stop:
        raise ApiError(400, "stop sequences are not supported; cut the text yourself, or use max_tokens", param="stop")
    if isinstance(req, CompletionRequest) and isinstance(req.prompt, list) and len(req.prompt) != 1:
        raise ApiError(400, f"prompt: one prompt per request; got {len(req.prompt)}", param="prompt")


def _options(req: _Request, chat: bool, lm: LanguageModel) -> SamplingOptions:
    """The request's decoding options: the library's defaults where it gives none; refusals name the request's field."""
    field = "max_completion_tokens" if isinstance(req, ChatRequest) and req.max_completion_tokens is not None else "max_tokens"
    limit = getattr(req, field)
    if limit is not None:
        try:
            check_new_tokens(replace(SAMPLING, max_new_tokens=limit))
        except ValueError as err:  # the server's cap, in the request's own field
            raise ApiError(400, str(err).replace("max_new_tokens", field, 1), param=field) from None
    numbers = {"temperature": req.temperature, "top_p": req.top_p, "kl_budget": req.kl_budget, "generation_budget": req.generation_budget}
    counts = {"max_new_tokens": limit, "best_of": req.best_of, "guide": req.guide, "repeat_guard": req.repeat_guard}
    options = replace(SAMPLING, chat=chat, adaptive=req.adaptive, **{k: float(v) for k, v in numbers.items() if v is not None},
                      **{k: v for k, v in counts.items() if v is not None})
    try:
        options.validate(lm)
    except ValueError as err:  # its messages start with the option's name, which is the request's field too
        name = str(err).split(" ", 1)[0]
        raise ApiError(400, str(err), param=name if name in type(req).model_fields else None) from None
    return options


def _asks(value: Any) -> bool:
    """Whether an unsupported field's value asks for something (None, false, 0, empty and {"type": "text"} do not)."""
    return value not in (None, False, 0, "", [], {}, {"type": "text"}, "none")


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False  # a last chunk with the usage and no choices, as OpenAI sends it


class _Request(BaseModel):
    """What both endpoints take: OpenAI's sampling fields and lmswitch's steering fields; the fields of
    :data:`UNSUPPORTED` are refused when they ask for something, other unknown fields are ignored (e.g. ``user``)."""

    model_config = ConfigDict(extra="allow")  # kept in model_extra, where UNSUPPORTED is looked up
    model: StrictStr | None = None
    max_tokens: StrictInt | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    seed: StrictInt | None = None
    stream: StrictBool = False
    stream_options: _StreamOptions | None = None
    n: StrictInt = 1
    stop: StrictStr | list[StrictStr] | None = None
    switches: dict[StrictStr, Number] = Field(default_factory=dict)  # switch name → ε (ε0 units)
    adaptive: StrictBool = SAMPLING.adaptive
    kl_budget: Number | None = None
    generation_budget: Number | None = None
    best_of: StrictInt | None = None  # OpenAI's completions field: the likeliest of this many candidates is returned
    guide: StrictInt | None = None  # lmswitch's extension: guided decoding with this many candidates per piece
    repeat_guard: StrictInt | None = None  # lmswitch's extension: steering may not raise the text's last this many tokens


class CompletionRequest(_Request):
    prompt: StrictStr | list[StrictStr]


class _TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: StrictStr | list[_TextPart]

    def plain(self) -> dict[str, str]:
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": text}


class ChatRequest(_Request):
    messages: list[_Message]
    max_completion_tokens: StrictInt | None = None


@dataclass(frozen=True)
class Job:
    """One validated request: what to generate and how."""

    lm: LanguageModel
    prompt: Prompt
    setting: Setting
    seed: int
    options: SamplingOptions
    chat: bool
    stream: bool
    usage_chunk: bool = False  # a stream ends with a chunk of its usage (stream_options.include_usage)


def _validated(model: type[BaseModel], body: bytes) -> Any:
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body has {len(body):,} bytes; the limit is {MAX_BODY_BYTES:,}", code="request_too_large")
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        raise ApiError(400, _invalid(err.errors()), param=_where(err.errors()[0])) from None


def _invalid(errors: list) -> str:
    """pydantic's first complaint about a body as a client reads it: the field, what is wrong, the value as JSON."""
    first, where = errors[0], _where(errors[0])
    if first["type"] == "json_invalid":
        why = first.get("ctx", {}).get("error", first["msg"])
        return f"the body is not JSON ({why}): send a JSON object, with Content-Type: application/json"
    if first["type"] == "model_type" and where == "body":
        return f"the body must be a JSON object; got {_as_json(first.get('input'))}"
    if first["type"] == "missing":
        return f"{where} is required"
    tags = {str(x) for e in errors if _where(e) == where for x in e["loc"] if _TYPE_TAG.match(str(x))}
    # a number field is a union of int and float: pydantic's first complaint ("a valid integer") misleads
    says = "Input should be a number" if {"int", "float"} <= tags else first["msg"]
    return f"{where}: {says} (got {_as_json(first.get('input'))})"


def _as_json(value: Any) -> str:
    """A value as the client sent it (``null``, ``true``, ``"5"``), cut to 80 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _where(error: Mapping) -> str:
    """A pydantic error's field, without the union members pydantic names in it."""
    return ".".join(str(x) for x in error["loc"] if not _TYPE_TAG.match(str(x))) or "body"


_TYPE_TAG = re.compile(r"^(int|float|str|bool|(list|dict)\[.*\]|function-.*)$")  # pydantic's union members in error locations


class OpenAIApi:
    """The ``/v1`` routes over a :class:`Backend`; ``api_key`` (when set) must come as ``Authorization: Bearer KEY``."""

    def __init__(self, backend: Backend, api_key: str | None = None, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.backend = backend
        self.api_key = api_key or None
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # requests between their admission and the end of their generation
        self._lock = threading.Lock()

    def router(self) -> APIRouter:
        router = APIRouter(prefix="/v1")
        router.add_api_route("/models", self.models, methods=["GET"])
        router.add_api_route("/models/{model}", self.model, methods=["GET"])
        router.add_api_route("/completions", self.completions, methods=["POST"])
        router.add_api_route("/chat/completions", self.chat_completions, methods=["POST"])
        for route in list(router.routes):  # a wrong method gets an OpenAI error object, not FastAPI's {"detail": …}
            taken = sorted(route.methods)
            router.add_api_route(route.path.removeprefix("/v1"), _wrong_method(taken), include_in_schema=False,
                                 methods=sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - set(taken)))
        return router

    # --- routes -------------------------------------------------------------------------------------------
    async def models(self, request: Request) -> JSONResponse:
        """Every model this server serves now (the one it started with, and any a page has loaded since)."""
        try:
            self._authorise(request)
            self._model(None)  # 503 while the model loads or when it failed
        except ApiError as err:
            return err.response()
        return JSONResponse({"object": "list", "data": [_model_object(name, library) for name, (_, library) in self.backend.models.items()],
                             "lmswitch": {"in_flight": self.in_flight, "max_in_flight": self.max_in_flight}})

    async def model(self, request: Request, model: str) -> JSONResponse:
        """One model (OpenAI's retrieve-model), or a 404."""
        try:
            self._authorise(request)
            _, library = self._model(model)
        except ApiError as err:
            return err.response()
        return JSONResponse(_model_object(model, library))

    async def completions(self, request: Request):
        return await self._serve(request, CompletionRequest, chat=False)

    async def chat_completions(self, request: Request):
        return await self._serve(request, ChatRequest, chat=True)

    async def _serve(self, request: Request, model: type[_Request], chat: bool):
        try:
            self._authorise(request)
            declared = request.headers.get("content-length", "0")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:  # refused before reading it
                raise ApiError(413, f"the request body has {int(declared):,} bytes; the limit is {MAX_BODY_BYTES:,}",
                               code="request_too_large")
            job = self._job(_validated(model, await request.body()), chat)
            release = self._take_slot()
        except ApiError as err:
            return err.response()
        except (*USER_ERRORS, TemplateError) as err:
            return ApiError(400, str(err)).response()
        gone = threading.Event()  # set when the client disconnects or the server stops: its generation stops at its next step
        if job.stream:
            return _EventStream(self._events(job, release, gone), gone, release, self.backend.stopping)
        watcher = asyncio.create_task(_watch(request, gone, self.backend.stopping))
        try:
            row = await run_in_threadpool(self.backend.batcher(job.lm).generate, job.prompt, job.setting, seed=job.seed,
                                          options=job.options, cancel=gone)
        except Busy as err:
            return ApiError(503, str(err), kind="server_error", code="busy").response()
        except USER_ERRORS as err:
            return ApiError(400, str(err)).response()
        except Exception as err:  # a bug, not the request: still an OpenAI error object, and the server keeps serving
            return ApiError(500, f"{type(err).__name__}: {err}", kind="server_error").response()
        finally:
            watcher.cancel()
            release()
        if self._cut_by_stop(row, job, gone):
            return STOPPING_ERROR.response()
        if gone.is_set() or row is None:  # nobody reads the answer
            return Response(status_code=499)
        return JSONResponse(_completion(job, row))

    def _take_slot(self) -> Callable[[], None]:
        """Count a request in; returns its release (safe to call more than once). Over the limit: 503 "busy" at once."""
        with self._lock:
            if self.in_flight >= self.max_in_flight:
                raise ApiError(503, f"the server is busy ({self.max_in_flight} requests running or waiting); retry in a few seconds",
                               kind="server_error", code="busy")
            self.in_flight += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if not released.is_set():
                    released.set()
                    self.in_flight -= 1

        return release

    # --- checks -------------------------------------------------------------------------------------------
    def _authorise(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        given = given.strip() if scheme.lower() == "bearer" else ""
        if not secrets.compare_digest(given.encode(), self.api_key.encode()):
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY' (the key the server was started with, "
                                "--api-key or LMSWITCH_API_KEY)", kind="authentication_error", code="invalid_api_key")

    def _model(self, name: str | None):
        if not self.backend.ready.is_set():
            raise ApiError(503, f"the model '{self.backend.model_name}' is still loading; retry in a few seconds", kind="server_error")
        if self.backend.error:
            raise ApiError(503, f"the model could not be loaded ({self.backend.error})", kind="server_error")
        if name and name not in self.backend.models:
            raise ApiError(404, f"unknown model {name!r}; this server serves {', '.join(self.backend.models)}", param="model",
                           code="model_not_found")
        return self.backend.models[name] if name else (self.backend.lm, self.backend.library)

    def _setting(self, lm: LanguageModel, library, switches: dict[str, float]) -> Setting:
        """The request's switches, each checked before any answer starts (a stream's 200 would carry the refusal)."""
        if len(switches) > MAX_SWITCHES:
            raise ApiError(400, f"{len(switches)} switches in one request; the limit is {MAX_SWITCHES}", param="switches")
        setting = []
        for name, eps in switches.items():
            switch = library.get(name)
            if switch is None:
                known = ", ".join(library.names()) or "none"
                raise ApiError(400, f"unknown switch {name[:60]!r}; this server has: {known}", param="switches", code="switch_not_found")
            try:
                check_setting(lm, [(switch, float(eps))])
            except ValueError as err:  # not finite, or out of range
                raise ApiError(400, str(err), param=f"switches.{name[:60]}") from None
            setting.append((switch, float(eps)))
        return setting

    def _job(self, req: _Request, chat: bool) -> Job:
        _refuse_unsupported(req)
        lm, library = self._model(req.model)
        options = _options(req, chat, lm)
        if req.seed is not None:
            try:
                check_seed(req.seed)
            except ValueError as err:
                raise ApiError(400, str(err), param="seed") from None
        prompt = [m.plain() for m in req.messages] if isinstance(req, ChatRequest) else (
            req.prompt if isinstance(req.prompt, str) else req.prompt[0])
        if isinstance(req, ChatRequest) and not prompt:
            raise ApiError(400, "messages: give at least one message", param="messages")
        self._check_length(lm, prompt, options, "messages" if chat else "prompt")  # (the chat template's refusals fail here too)
        seed = req.seed if req.seed is not None else secrets.randbelow(2**31)
        setting = self._setting(lm, library, req.switches)
        if options.guide > 1:
            try:
                judges_of(setting)
            except ValueError as err:
                raise ApiError(400, str(err), param="guide") from None
        return Job(lm, prompt, setting, seed, options, chat, req.stream, bool(req.stream_options and req.stream_options.include_usage))

    @staticmethod
    def _check_length(lm: LanguageModel, prompt: Prompt, options: SamplingOptions, field: str) -> None:
        """A prompt longer than this server reads, or than the model's context holds beside the tokens asked for, is
        refused, as OpenAI does (the library cuts it from the left with a warning, which an API client would never see)."""
        try:
            check_request(lm, prompt, options)
        except ValueError as err:
            raise ApiError(400, str(err), param=field, code="context_length_exceeded") from None

    def _cut_by_stop(self, row: Row | None, job: Job, gone: threading.Event) -> bool:
        """Whether the server's stop cut this generation short (dropped while it waited, or a text shorter than asked
        that the model did not end): the client is told so, not given a text that reads as if it merely ended."""
        if not (gone.is_set() and self.backend.stopping.is_set()):
            return False
        return row is None or (not row.ended and len(row.new_ids) < job.options.max_new_tokens)

    # --- streaming ----------------------------------------------------------------------------------------
    def _events(self, job: Job, release: Callable[[], None], gone: threading.Event) -> Iterator[str]:
        """Server-sent events: one chunk per new piece of text, a chunk with the finish reason, the usage's chunk when
        asked for, then ``[DONE]``; the generation stops once ``gone`` is set."""
        head = _head(job, chunk=True)
        sent = ""
        try:
            for item in self.backend.batcher(job.lm).stream(job.prompt, job.setting, seed=job.seed, options=job.options,
                                                            cancel=gone):
                text = item.text if isinstance(item, Row) else item
                if text.startswith(sent) and len(text) > len(sent) and not text.endswith("\ufffd"):  # a whole character more
                    yield _event({**head, "choices": [_delta(job, text[len(sent):], None, first=not sent)]})
                    sent = text
                if isinstance(item, Row) and self._cut_by_stop(item, job, gone):
                    yield _event(STOPPING_ERROR.body())
                elif isinstance(item, Row):
                    release()  # the generation is over: the slot is free before the client reads the end
                    yield _event({**head, "choices": [_delta(job, "", _finish(item), first=not sent)]})
                    if job.usage_chunk:
                        yield _event({**head, "choices": [], "usage": _usage(item)})
        except Busy as err:
            yield _event(ApiError(503, str(err), kind="server_error", code="busy").body())
        except USER_ERRORS as err:
            yield _event(ApiError(400, str(err)).body())
        except Exception as err:  # headers are sent: the error travels as an event, and the stream still ends properly
            yield _event(ApiError(500, f"{type(err).__name__}: {err}", kind="server_error").body())
        release()  # (after an error too) the client may send its next request as soon as it reads the end
        yield DONE


class _EventStream(StreamingResponse):
    """A streamed answer that stops its generation (``gone``) and frees its slot as soon as the client disconnects,
    or when it ends. (Starlette reads the events in a worker thread and never closes their iterator: a request
    left to the garbage collector would go on decoding and hold its slot meanwhile.)"""

    def __init__(self, events: Iterator[str], gone: threading.Event, release: Callable[[], None], stopping: threading.Event) -> None:
        super().__init__(events, media_type="text/event-stream")
        self.gone, self.release, self.stopping = gone, release, stopping

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.create_task(_watch(Request(scope, receive), self.gone, self.stopping))
        try:
            await super().__call__(scope, receive, send)
        finally:
            watcher.cancel()
            self.gone.set()  # sent in full, or the client left: either way nobody reads more
            self.release()


async def _watch(request: Request, gone: threading.Event, stopping: threading.Event, every: float = 0.2) -> None:
    """Set ``gone`` once the client has disconnected, or the server is stopping (then :meth:`OpenAIApi._cut_by_stop`
    tells the client so)."""
    try:
        while not stopping.is_set() and not await request.is_disconnected():
            await asyncio.sleep(every)
    except Exception:  # (the connection's state cannot be read: treat the client as gone)
        pass
    gone.set()


def _wrong_method(taken: list[str]) -> Callable[[Request], Awaitable[JSONResponse]]:
    """The answer to a method a route does not take: a 405 naming the one it takes (POST with a JSON body, or GET)."""
    how = "POST, with a JSON body" if taken == ["POST"] else " or ".join(taken)

    async def answer(request: Request) -> JSONResponse:
        response = ApiError(405, f"{request.url.path} takes {how}; got {request.method}", code="method_not_allowed").response()
        response.headers["Allow"] = ", ".join(taken)
        return response
    return answer


def _model_object(name: str, library) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "lmswitch", "switches": library.names()}


def _event(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _head(job: Job, chunk: bool = False) -> dict:
    kind = ("chat.completion.chunk" if chunk else "chat.completion") if job.chat else "text_completion"
    return {"id": f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", "object": kind, "created": int(time.time()),
            "model": job.lm.name, "system_fingerprint": job.lm.fingerprint,
            "lmswitch": {"seed": job.seed, "switches": {s.name: e for s, e in job.setting}, "adaptive": job.options.adaptive,
                         **beyond_fluent_field(job.setting)}}  # (ε 400 was served without a word)


def _finish(row: Row) -> str:
    """``"stop"`` when the model ended the text (its end-of-sequence token), else ``"length"``."""
    return "stop" if row.ended else "length"


def _usage(row: Row) -> dict:
    return {"prompt_tokens": row.prompt_tokens, "completion_tokens": len(row.new_ids), "total_tokens": row.prompt_tokens + len(row.new_ids)}


def _delta(job: Job, text: str, finish: str | None, first: bool) -> dict:
    if not job.chat:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    delta = {"role": "assistant", "content": text} if first else {"content": text}
    return {"index": 0, "delta": delta if text or first else {}, "logprobs": None, "finish_reason": finish}


def _completion(job: Job, row: Row) -> dict:
    text, finish = row.text, _finish(row)
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish} if job.chat
              else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish})
    return {**_head(job), "choices": [choice], "usage": _usage(row)}
