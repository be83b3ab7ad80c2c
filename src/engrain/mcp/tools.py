"""The MCP server's tools and resources: each tool resolves who it acts for, makes one
call into the :class:`~engrain.engine.Engine` and answers a small typed result (its JSON
schema is the tool's output schema, its JSON the text a model reads).

An :class:`EngrainError` (the engine's, or the resolver's 401/403) becomes a tool error:
``is_error`` with the error's ``code`` and message as text and
:meth:`EngrainError.to_dict` as structured content; never a traceback. Arguments that do
not fit a tool's input schema (a number for ``kind``, a list for ``message``) never reach
the tool: the SDK refuses them, and :class:`EngrainMCP` answers that refusal as the same
``invalid_input`` tool error, its message starting with the argument's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, Resource, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic import ValidationError as ArgumentsError

from engrain.engine import Engine
from engrain.errors import SCHEMA_ERRORS, EngrainError, NotFoundError, ValidationError
from engrain.model import Kind, Memory, MemoryType
from engrain.tiers import Tier
from engrain.validate import MAX_INT

#: Who a call acts for: ``(the request's context, the user_id argument, the project the
#: call is limited to)`` → the user id, or :class:`AuthenticationError` /
#: :class:`PermissionDeniedError` / :class:`ValidationError`.
Resolver = Callable[[Context, str | None, str | None], str]

INSTRUCTIONS = """\
engrain is this user's long-term memory. Before answering a request that could depend on
the user's preferences, past decisions, project conventions or facts they told you, call
`context` with their message and follow the memory it returns. When the user states a
lasting preference, decision, rule or fact, or corrects you, call `remember` with one
short self-contained sentence. After a `context` helped (or misled), call `feedback` with
its context_id. Use `list_memories`, `forget`, `pin` and `mute` when the user asks to
review or change what is remembered."""

TIER_TITLES = {Tier.DNA: "DNA summary", Tier.FIELD_GUIDE: "field guide"}

# -- argument types (their descriptions are what the model reads) -------------------------

UserArg = Annotated[
    str | None,
    Field(description="Leave out: the server knows whose memory this is. Only when your "
          "credentials may act for several users, the user to act for."),
]  # fmt: skip
ProjectArg = Annotated[
    str | None,
    Field(description="Project name (e.g. the repository) to limit the call to; memories "
          "of no project are included. Leave out for all of the user's memories."),
]  # fmt: skip
MemoryIdArg = Annotated[
    str, Field(description="A memory id, as returned by remember, context or list_memories.")
]
KindArg = Annotated[
    str,
    Field(description="What the memory is: preference (how the user likes things), fact, "
          "decision (a choice and its reason), invariant (a rule that must hold), pattern, "
          "antipattern (what to avoid), golden_path, correction (fixes an earlier memory), "
          "context, event.",
          json_schema_extra={"enum": [k.value for k in Kind]}),
]  # fmt: skip
TypeArg = Annotated[
    Annotated[str, Field(json_schema_extra={"enum": [t.value for t in MemoryType]})] | None,
    Field(description="Memory type; leave out to derive it from the kind."),
]  # fmt: skip
BudgetArg = Annotated[
    int | None,
    Field(description="Most tokens the memory may take; leave out for automatic.", ge=0,
          le=MAX_INT),
]  # fmt: skip

# -- results -------------------------------------------------------------------------------


class MemoryView(BaseModel):
    """A memory as a model needs it."""

    id: str
    content: str
    kind: str
    memory_type: str
    project: str | None
    domains: list[str]
    pinned: bool
    muted: bool
    superseded_by: str | None
    updated_at: str

    @classmethod
    def of(cls, memory: Memory) -> MemoryView:
        """The view of ``memory``."""
        return cls(
            id=memory.id, content=memory.content, kind=memory.kind.value,
            memory_type=memory.memory_type.value, project=memory.project,
            domains=list(memory.domains), pinned=memory.pinned, muted=memory.muted,
            superseded_by=memory.superseded_by, updated_at=memory.updated_at.isoformat(),
        )  # fmt: skip


class Remembered(BaseModel):
    """What ``remember`` did."""

    action: str = Field(description="stored (a new memory) or merged (an existing one "
                        "updated) or discarded")  # fmt: skip
    memory_id: str | None
    reason: str | None


class ContextBlock(BaseModel):
    """The memory to put in front of the model for one message."""

    context_id: str = Field(description="Pass to feedback once you know whether it helped.")
    text: str = Field(description="The <memory> block; empty when nothing is relevant.")
    tier: int
    tokens: int
    memories: list[MemoryView]


class ScoredView(BaseModel):
    """A recalled memory with its score."""

    memory: MemoryView
    score: float
    similarity: float
    tokens: int


class Recalled(BaseModel):
    """The memories nearest to a query."""

    memories: list[ScoredView]
    total_tokens: int


class MemoryList(BaseModel):
    """Some of the user's memories, most recently updated first."""

    memories: list[MemoryView]


class Forgotten(BaseModel):
    """How many of the named memories existed (and are now deleted)."""

    forgotten: int
    requested: int


class Changed(BaseModel):
    """A memory after a pin or mute."""

    memory: MemoryView


class FeedbackView(BaseModel):
    """What the feedback changed."""

    usefulness: dict[str, float] = Field(description="Each memory's usefulness after.")
    pairs_learned: int


class Explanation(BaseModel):
    """Why a message gets the memory it gets: classification, budget, weights and each
    candidate's score and verdict."""

    explanation: dict[str, Any]


# -- the server ----------------------------------------------------------------------------


def answer(produce: Callable[[], BaseModel]) -> CallToolResult:
    """The tool result of ``produce()``; an :class:`EngrainError` it raises becomes a tool
    error carrying the error's code and message."""
    try:
        result = produce()
    except EngrainError as error:
        return failure(error)
    return CallToolResult(
        content=[TextContent(type="text", text=result.model_dump_json())],
        structured_content=result.model_dump(mode="json"),
    )


def failure(error: EngrainError) -> CallToolResult:
    """The tool error of ``error``: its code and message as text, its dict as structured
    content."""
    return CallToolResult(
        content=[TextContent(type="text", text=f"{error.code}: {error.message}")],
        structured_content=error.to_dict(),
        is_error=True,
    )


def arguments_error(error: ArgumentsError) -> ValidationError:
    """The SDK's refusal of a tool's arguments as engrain's :class:`ValidationError` (the
    subclass the engine raises for the same value, ``errors.SCHEMA_ERRORS``): the
    first wrong argument's name, then what is wrong with it (no input echoed back, no
    link to pydantic's pages)."""
    first = error.errors(include_url=False, include_input=False)[0]
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    more = error.error_count() - 1
    extra = f" (and {more} more wrong argument{'s' if more > 1 else ''})" if more else ""
    refusal = SCHEMA_ERRORS.get(first["type"], ValidationError)  # the engine's code for it
    return refusal(f"{field}: {first['msg']}{extra}")


class EngrainMCP(MCPServer[Any]):
    """The SDK's server, listing the compiled tiers as concrete resources (their reads go
    through the ``engrain://tiers/{tier}`` template, which knows the request's user), and
    answering arguments its schema refuses as engrain's ``invalid_input`` tool error."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """The SDK's call; arguments that fail the tool's input schema (the tool never
        ran, nothing was written) come back as :func:`failure` of a ValidationError, and
        so do arguments the tool does not take: the SDK would drop them, so a misspelled
        ``token_budjet`` silently became the default (HTTP refuses an unknown field too)."""
        schema = self._tool_input_schema(name)
        if schema is not None:
            known = schema.get("properties", {})
            unknown = sorted(set(arguments or {}) - set(known))
            if unknown:
                return failure(ValidationError(
                    f"{unknown[0]}: unknown argument; {name} takes {', '.join(sorted(known))}"
                ))  # fmt: skip
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            refused = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(refused, ArgumentsError):
                raise  # a crash inside the tool stays the SDK's (logged, its text withheld)
            return failure(arguments_error(refused))

    async def list_resources(self) -> list[Resource]:
        """The two tiers, then anything else registered."""
        tiers = [
            Resource(uri=f"engrain://tiers/{int(t)}", name=f"tier-{int(t)}",
                     title=f"Tier {int(t)}: {title}", mime_type="text/markdown",
                     description=_TIER_HELP[t])
            for t, title in TIER_TITLES.items()
        ]  # fmt: skip
        return [*tiers, *await super().list_resources()]


_TIER_HELP = {
    Tier.DNA: "The user's compiled DNA summary: their most important rules and preferences "
    "in a few hundred tokens, for small context windows.",
    Tier.FIELD_GUIDE: "The user's compiled field guide: rules, preferences, decisions and "
    "patterns in a few thousand tokens, for medium context windows.",
}


def build_server(engine: Engine, resolve: Resolver, *, name: str = "engrain") -> EngrainMCP:
    """The MCP server over ``engine``: every tool and resource acts for the user
    ``resolve`` returns (see :func:`engrain.mcp.fixed_user` and
    :func:`engrain.mcp.key_user`)."""
    server = EngrainMCP(name, instructions=INSTRUCTIONS, log_level="WARNING")
    _add_writing_tools(server, engine, resolve)
    _add_reading_tools(server, engine, resolve)
    _add_curation_tools(server, engine, resolve)
    _add_tier_resources(server, engine, resolve)
    return server


def _add_writing_tools(server: MCPServer[Any], engine: Engine, resolve: Resolver) -> None:
    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False))
    def remember(
        ctx: Context,
        content: Annotated[
            str,
            Field(
                description="One short, self-contained statement, "
                "e.g. 'Prefers tabs over spaces in Python'."
            ),
        ],
        kind: KindArg = "fact",
        memory_type: TypeArg = None,
        project: ProjectArg = None,
        domains: Annotated[
            list[str] | None, Field(description="Topic tags, e.g. ['python', 'testing'].")
        ] = None,
        corrects: Annotated[
            str | None,
            Field(
                description="The id of a memory this one replaces (it is then never used again)."
            ),
        ] = None,
        pinned: Annotated[bool, Field(description="Always include it when there is room.")] = False,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, Remembered]:
        """Store something lasting the user told you: a preference, decision, rule, fact or
        a correction of an earlier memory. Call it when the user states something that
        should shape future answers, not for small talk. A near-duplicate of a recent
        memory updates that memory instead of adding one. Returns the action (stored or
        merged) and the memory id."""

        def call() -> Remembered:
            user = resolve(ctx, user_id, project)
            outcome = engine.remember(
                content, user, kind, memory_type=memory_type, project=project,
                domains=domains, corrects=corrects, pinned=pinned,
            )  # fmt: skip
            return Remembered(action=outcome.action, memory_id=outcome.memory_id,
                              reason=outcome.reason)  # fmt: skip

        return answer(call)

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
    def feedback(
        ctx: Context,
        context_id: Annotated[
            str | None, Field(description="The context_id a context call returned.")
        ] = None,
        memory_ids: Annotated[
            list[str] | None,
            Field(description="Or: the ids of the memories the feedback is about."),
        ] = None,
        helpful: Annotated[
            bool | None, Field(description="Did the memory help? Give this or score.")
        ] = None,
        score: Annotated[
            float | None, Field(description="How much it helped, 0 to 1.", ge=0, le=1)
        ] = None,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, FeedbackView]:
        """Tell engrain whether the memory it gave you helped, so it learns what to include:
        name a context_id (from `context`) or memory_ids, and helpful true/false or a score.
        Returns each memory's new usefulness."""

        def call() -> FeedbackView:
            user = resolve(ctx, user_id, None)
            result = engine.feedback(user, context_id, memory_ids, helpful=helpful, score=score)
            return FeedbackView(
                usefulness={k: after for k, (_, after) in result.usefulness.items()},
                pairs_learned=result.pairs_learned,
            )

        return answer(call)


#: ``previous`` of the context and explain tools.
PreviousArg = Annotated[
    str | None,
    Field(
        description="The user's turn before this message, when the message continues it "
        '("and the refresh ones?"): its subject is searched too.'
    ),
]


def _add_reading_tools(server: MCPServer[Any], engine: Engine, resolve: Resolver) -> None:
    read_only = ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    def context(
        ctx: Context,
        message: Annotated[str, Field(description="The user's message, as they wrote it.")],
        project: ProjectArg = None,
        token_budget: BudgetArg = None,
        user_id: UserArg = None,
        previous: PreviousArg = None,
    ) -> Annotated[CallToolResult, ContextBlock]:
        """The user's memory relevant to a message: call it before answering a request that
        may depend on their preferences, conventions, decisions or earlier facts. Returns
        `text`, a <memory> block to follow when answering (empty when nothing is relevant),
        the memories in it, and a `context_id` for `feedback`. Pass `previous`, the user's
        turn before, when the message continues it."""

        def call() -> ContextBlock:
            user = resolve(ctx, user_id, project)
            found = engine.context(message, user, project=project, token_budget=token_budget,
                                   previous=previous)  # fmt: skip
            return ContextBlock(
                context_id=found.id, text=found.text, tier=found.tier, tokens=found.tokens,
                memories=[MemoryView.of(m) for m in found.memories],
            )  # fmt: skip

        return answer(call)

    @server.tool(annotations=read_only)
    def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What to look for, in words.")],
        top_k: Annotated[
            int | None, Field(description="Most memories to return.", ge=1, le=MAX_INT)
        ] = None,
        project: ProjectArg = None,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, Recalled]:
        """Search the user's memories by meaning and get them ranked with scores. Prefer
        `context` to prepare an answer; use recall to look something up or to find the id
        of a memory to forget, pin or mute."""

        def call() -> Recalled:
            user = resolve(ctx, user_id, project)
            result = engine.recall(query, user, top_k, project=project)
            scored = [ScoredView(memory=MemoryView.of(s.memory), score=s.score,
                                 similarity=s.similarity, tokens=s.tokens)
                      for s in result.scored]  # fmt: skip
            return Recalled(memories=scored, total_tokens=result.total_tokens)

        return answer(call)

    @server.tool(annotations=read_only)
    def explain(
        ctx: Context,
        message: Annotated[str, Field(description="The message to explain.")],
        project: ProjectArg = None,
        token_budget: BudgetArg = None,
        user_id: UserArg = None,
        previous: PreviousArg = None,
    ) -> Annotated[CallToolResult, Explanation]:
        """Why `context` would give a message the memory it gives: how the message was
        classified, the token budget, and each candidate memory's score and why it was or
        was not included (and with `previous`, whether the turn before was used). For
        debugging memory, not for answering."""

        def call() -> Explanation:
            user = resolve(ctx, user_id, project)
            gated = engine.explain(message, user, project=project, token_budget=token_budget,
                                   previous=previous)  # fmt: skip
            return Explanation(explanation=gated.to_dict())

        return answer(call)

    @server.tool(annotations=read_only)
    def list_memories(
        ctx: Context,
        project: Annotated[str | None, Field(description="Only this project.")] = None,
        kind: Annotated[
            str | None, Field(description="Only this kind (preference, fact, decision, ...).")
        ] = None,
        # Engine.list's default, as `engrain list` and GET /v1/memories have it
        limit: Annotated[int, Field(description="Most memories to list.", ge=1, le=1000)] = 100,
        offset: Annotated[
            int, Field(description="Memories to skip (for the next page).", ge=0, le=MAX_INT)
        ] = 0,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, MemoryList]:
        """The user's memories, most recently updated first, with their ids: for reviewing
        what is remembered or finding an id to forget, pin or mute. Page with offset."""

        def call() -> MemoryList:
            user = resolve(ctx, user_id, project)
            found = engine.list(user, project=project, kind=kind, limit=limit, offset=offset)
            return MemoryList(memories=[MemoryView.of(m) for m in found])

        return answer(call)


def _add_curation_tools(server: MCPServer[Any], engine: Engine, resolve: Resolver) -> None:
    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    def forget(
        ctx: Context,
        memory_ids: Annotated[
            list[str], Field(description="The ids of the memories to delete.", min_length=1)
        ],
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, Forgotten]:
        """Delete memories for good, when the user asks you to forget something or a memory
        is wrong and no correction should replace it. Ids that are not the user's memories
        make the call fail with not_found (the others are deleted)."""

        def call() -> Forgotten:
            user = resolve(ctx, user_id, None)
            count = engine.forget(memory_ids, user)
            distinct = len(set(memory_ids))
            if count < distinct:
                raise NotFoundError(f"{distinct - count} of {distinct} ids are not memories "
                                    f"of this user ({count} forgotten)")  # fmt: skip
            return Forgotten(forgotten=count, requested=distinct)

        return answer(call)

    flag = ToolAnnotations(destructive_hint=False, idempotent_hint=True)

    @server.tool(annotations=flag)
    def pin(
        ctx: Context,
        memory_id: MemoryIdArg,
        pinned: Annotated[bool, Field(description="false to unpin.")] = True,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, Changed]:
        """Pin a memory so it is included whenever there is room (or unpin it): for what
        the user says must always be kept in mind."""
        return answer(
            lambda: Changed(
                memory=MemoryView.of(
                    engine.pin(memory_id, resolve(ctx, user_id, None), pinned=pinned)
                )
            )
        )

    @server.tool(annotations=flag)
    def mute(
        ctx: Context,
        memory_id: MemoryIdArg,
        muted: Annotated[bool, Field(description="false to unmute.")] = True,
        user_id: UserArg = None,
    ) -> Annotated[CallToolResult, Changed]:
        """Mute a memory so it is never included again, but kept (or unmute it): for a
        memory that is distracting or outdated but should not be deleted."""
        return answer(
            lambda: Changed(
                memory=MemoryView.of(
                    engine.mute(memory_id, resolve(ctx, user_id, None), muted=muted)
                )
            )
        )


def _add_tier_resources(server: MCPServer[Any], engine: Engine, resolve: Resolver) -> None:
    @server.resource(
        "engrain://tiers/{tier}{?project,user_id}",
        name="tier",
        title="Compiled memory tier",
        description="Tier 1 (DNA summary) or 2 (field guide) of the user's memories, compiled "
        "and cached; optionally of one project.",
        mime_type="text/markdown",
    )
    def tier_text(ctx: Context, tier: str, project: str | None = None,
                  user_id: str | None = None) -> str:  # fmt: skip
        """The text of one compiled tier."""
        wanted = {str(int(t)): t for t in TIER_TITLES}.get(tier)
        if wanted is None:
            raise ResourceError(f"unknown_value: no tier {tier!r}, the tiers are 1 and 2")
        try:
            compiled = engine.tiers(resolve(ctx, user_id, project), project)
        except EngrainError as error:
            raise ResourceError(f"{error.code}: {error.message}") from error
        return compiled.tiers[wanted].text


__all__ = ["EngrainMCP", "Resolver", "answer", "build_server"]
